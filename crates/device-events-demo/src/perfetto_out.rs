//! The demo's Perfetto file, beside its Chrome file: the same tracks and
//! slices, on CLOCK_MONOTONIC with the clocks and bounds Perfetto keeps,
//! and, for several processes, the manifest that merges their files.

use std::collections::HashMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Instant;

use device_events_core::Placement;
use device_events_trace::{HostClock, Perfetto, PerfettoWriter, TrackId, perfetto_manifest};

/// This process's file in `dir`.
pub fn file_name(index: usize) -> String {
    format!("process-{index}.pftrace")
}

/// The Chrome trace's tracks mirrored in a Perfetto file: one device with
/// its streams, and the host thread.
pub struct Mirror {
    writer: PerfettoWriter,
    device: TrackId,
    tracks: HashMap<TrackId, TrackId>,
}

impl Mirror {
    pub fn open(dir: &Path, index: usize, device: &str) -> Result<Mirror, Box<dyn Error>> {
        std::fs::create_dir_all(dir)?;
        let writer = Perfetto::new(format!("device-events demo, process {index}"))
            .create(dir.join(file_name(index)))?;
        let device = writer.device(device.to_owned());
        Ok(Mirror {
            writer,
            device,
            tracks: HashMap::new(),
        })
    }

    pub fn host(&mut self, chrome: TrackId, name: &str) {
        let track = self.writer.host_thread(name.to_owned());
        self.tracks.insert(chrome, track);
    }

    pub fn stream(&mut self, chrome: TrackId, name: &str) {
        let track = self.writer.stream(self.device, name.to_owned());
        self.tracks.insert(chrome, track);
    }

    pub fn host_span(&self, chrome: TrackId, label: &'static str, start: Instant, end: Instant) {
        if let Some(track) = self.tracks.get(&chrome) {
            self.writer.host_span(*track, label, start, end);
        }
    }

    pub fn window(&self, chrome: TrackId, label: &'static str, placed: &Placement) {
        if let Some(track) = self.tracks.get(&chrome) {
            self.writer.window(*track, label, placed);
        }
    }

    pub fn finish(self) -> Result<(), Box<dyn Error>> {
        let dropped = self.writer.finish()?;
        if dropped > 0 {
            eprintln!("demo: {dropped} windows or spans dropped, the writer behind");
        }
        Ok(())
    }
}

/// Start the other processes of `--processes`: this program again, each
/// with its index.
pub fn spawn_others(processes: usize) -> Result<Vec<Child>, Box<dyn Error>> {
    let exe = std::env::current_exe()?;
    // The same arguments, less `--processes`, which each of them is given.
    let mut args = Vec::new();
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        if arg == "--processes" {
            given.next();
        } else if !arg.starts_with("--processes=") {
            args.push(arg);
        }
    }
    (1..processes)
        .map(|index| {
            Command::new(&exe)
                .args(&args)
                .args(["--processes", "1", "--process-index", &index.to_string()])
                .spawn()
                .map_err(|err| format!("could not start process {index}: {err}").into())
        })
        .collect()
}

/// Wait for the others, then write the manifest merging every process's
/// file: all of this machine, lined up on its BOOTTIME with no correction.
pub fn finish_all(
    dir: &Path,
    processes: usize,
    others: Vec<Child>,
) -> Result<PathBuf, Box<dyn Error>> {
    for (index, mut child) in others.into_iter().enumerate() {
        let status = child.wait()?;
        if !status.success() {
            return Err(format!("process {} failed ({status})", index + 1).into());
        }
    }
    let machine = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "this machine".into());
    let clock = HostClock::read();
    let names: Vec<String> = (0..processes).map(file_name).collect();
    let files: Vec<(&str, &str, Option<HostClock>)> = names
        .iter()
        .map(|name| (name.as_str(), machine.as_str(), clock))
        .collect();
    let manifest = perfetto_manifest(&files)?;
    let path = dir.join("perfetto_manifest.json");
    std::fs::write(&path, serde_json::to_string_pretty(&manifest)?)?;
    Ok(path)
}
