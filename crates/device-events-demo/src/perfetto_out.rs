//! The demo's Perfetto file, beside its Chrome file: the same tracks and
//! slices, on CLOCK_MONOTONIC with the clocks and bounds Perfetto keeps,
//! and, for several processes, the manifest that merges their files.

use std::collections::HashMap;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use device_events_core::Placement;
use device_events_trace::{HostClock, Perfetto, PerfettoWriter, Trace, TrackId, perfetto_manifest};

use crate::truth::TrueEnd;

/// This process's file in `dir`.
pub fn file_name(index: usize) -> String {
    format!("process-{index}.pftrace")
}

/// What this process says of its file beside it: its machine, its host
/// clock as the file states it, and, on the software driver, each
/// window's true ends in the order of the file's windows.
fn statement_name(index: usize) -> String {
    format!("process-{index}.json")
}

/// A machine this process plays, for checks of a merge across machines:
/// its REALTIME's offset from this host's, and its stated error (`None`:
/// its clock says it is unsynchronised).
#[derive(Clone, Copy)]
pub struct Simulated {
    offset_ns: i64,
    error: Option<Duration>,
}

/// The machine process `index` plays in `--simulated-machines`' list;
/// `None` for this host.
///
/// # Errors
///
/// An entry that is not `OFFSET_NS:ERROR_NS` or `OFFSET_NS:unsynchronised`.
pub fn simulated(list: Option<&str>, index: usize) -> Result<Option<Simulated>, Box<dyn Error>> {
    let Some(entry) = list.and_then(|list| list.split(',').nth(index)) else {
        return Ok(None);
    };
    let bad = || {
        format!(
            "--simulated-machines: {entry:?} is not OFFSET_NS:ERROR_NS or OFFSET_NS:unsynchronised"
        )
    };
    let (offset, error) = entry.split_once(':').ok_or_else(bad)?;
    let offset_ns = offset.trim().parse().map_err(|_| bad())?;
    let error = match error.trim() {
        "unsynchronised" => None,
        ns => Some(Duration::from_nanos(ns.parse().map_err(|_| bad())?)),
    };
    Ok(Some(Simulated { offset_ns, error }))
}

/// The Chrome trace's tracks mirrored in a Perfetto file: one device with
/// its streams, and the host thread.
pub struct Mirror {
    writer: PerfettoWriter,
    dir: PathBuf,
    index: usize,
    machine: String,
    device: TrackId,
    tracks: HashMap<TrackId, TrackId>,
    /// Each track's name and whether it is a host thread, for the merged
    /// picture.
    names: HashMap<TrackId, (String, bool)>,
    /// What was handed over: track, label, start, end, and a window's
    /// device duration and bound.
    slices: Vec<HandedOver>,
}

type HandedOver = (
    TrackId,
    &'static str,
    Instant,
    Instant,
    Option<(Duration, Duration)>,
);

impl Mirror {
    pub fn open(
        dir: &Path,
        index: usize,
        device: &str,
        simulated: Option<Simulated>,
    ) -> Result<Mirror, Box<dyn Error>> {
        std::fs::create_dir_all(dir)?;
        let mut perfetto = Perfetto::new(format!("device-events demo, process {index}"));
        let mut machine = hostname();
        if let Some(Simulated { offset_ns, error }) = simulated {
            perfetto = match error {
                Some(error) => perfetto.simulated_machine(offset_ns, error),
                None => perfetto.simulated_unsynchronised_machine(offset_ns),
            };
            machine = format!("{machine}, simulated machine {index}");
        }
        let writer = perfetto.create(dir.join(file_name(index)))?;
        let device = writer.device(device.to_owned());
        Ok(Mirror {
            writer,
            dir: dir.to_owned(),
            index,
            machine,
            device,
            tracks: HashMap::new(),
            names: HashMap::new(),
            slices: Vec::new(),
        })
    }

    pub fn host(&mut self, chrome: TrackId, name: &str) {
        let track = self.writer.host_thread(name.to_owned());
        self.tracks.insert(chrome, track);
        self.names.insert(chrome, (name.to_owned(), true));
    }

    pub fn stream(&mut self, chrome: TrackId, name: &str) {
        let track = self.writer.stream(self.device, name.to_owned());
        self.tracks.insert(chrome, track);
        self.names.insert(chrome, (name.to_owned(), false));
    }

    pub fn host_span(
        &mut self,
        chrome: TrackId,
        label: &'static str,
        start: Instant,
        end: Instant,
    ) {
        if let Some(track) = self.tracks.get(&chrome)
            && self.writer.host_span(*track, label, start, end)
        {
            self.slices.push((chrome, label, start, end, None));
        }
    }

    /// Whether the window was handed to the writer.
    pub fn window(&mut self, chrome: TrackId, label: &'static str, placed: &Placement) -> bool {
        let handed = self
            .tracks
            .get(&chrome)
            .is_some_and(|track| self.writer.window(*track, label, placed));
        if handed {
            let window = Some((placed.duration, placed.uncertainty));
            self.slices
                .push((chrome, label, placed.start, placed.end, window));
        }
        handed
    }

    /// Close the file, and write beside it what this process states of
    /// it: its machine, its host clock, and each window's true ends where
    /// known (`pairing_ns`: how far the truth's own pairing of clocks may
    /// be off).
    pub fn finish(
        self,
        pairing_ns: Option<u64>,
        windows: &[(&str, Option<(TrueEnd, TrueEnd)>)],
    ) -> Result<(), Box<dyn Error>> {
        let dropped = self.writer.finish()?;
        if dropped > 0 {
            eprintln!("demo: {dropped} windows or spans dropped, the writer behind");
        }
        let end = |end: &TrueEnd| serde_json::json!({ "boottime_ns": end.boottime_ns, "realtime_ns": end.realtime_ns });
        let windows: Vec<serde_json::Value> = windows
            .iter()
            .map(|(label, ends)| match ends {
                Some((start, stop)) => {
                    serde_json::json!({ "label": label, "start": end(start), "end": end(stop) })
                }
                None => serde_json::json!({ "label": label }),
            })
            .collect();
        let clock = self.writer.host_clock().map(|clock| {
            serde_json::json!({
                "synchronised": clock.synchronised,
                "max_error_ns": u64::try_from(clock.max_error.as_nanos()).unwrap_or(u64::MAX),
                "est_error_ns": u64::try_from(clock.est_error.as_nanos()).unwrap_or(u64::MAX),
            })
        });
        // On BOOTTIME, for the merged picture: to the microsecond.
        let (now, boottime) = (Instant::now(), crate::truth::boottime_ns());
        let on_boottime = |at: Instant| match at.checked_duration_since(now) {
            Some(after) => boottime.saturating_add(nanos(after)),
            None => boottime.saturating_sub(nanos(now.duration_since(at))),
        };
        let slices: Vec<serde_json::Value> = self
            .slices
            .iter()
            .filter_map(|(chrome, label, start, end, window)| {
                let (track, host) = self.names.get(chrome)?;
                Some(serde_json::json!({
                    "track": track,
                    "host": host,
                    "label": label,
                    "start_boottime_ns": on_boottime(*start),
                    "end_boottime_ns": on_boottime(*end),
                    "device_duration_ns": window.map(|(duration, _)| nanos(duration)),
                    "bound_ns": window.map(|(_, bound)| nanos(bound)),
                }))
            })
            .collect();
        let statement = serde_json::json!({
            "file": file_name(self.index),
            "slices": slices,
            "machine": self.machine,
            "host_clock": clock,
            "truth": pairing_ns.map(|pairing_ns| serde_json::json!({
                "pairing_ns": pairing_ns,
                "windows": windows,
            })),
        });
        std::fs::write(
            self.dir.join(statement_name(self.index)),
            serde_json::to_string_pretty(&statement)?,
        )?;
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
/// file, each on the machine and clock it states: all of this machine,
/// lined up on its BOOTTIME with no correction; else on REALTIME, refused
/// where a file's clock is unsynchronised.
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
    // Each file on the machine and clock its process states.
    let mut stated = Vec::new();
    for index in 0..processes {
        let path = dir.join(statement_name(index));
        let text =
            std::fs::read_to_string(&path).map_err(|err| format!("{}: {err}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|err| format!("{}: {err}", path.display()))?;
        let machine = value["machine"].as_str().unwrap_or("unnamed").to_owned();
        let clock = &value["host_clock"];
        let ns = |key: &str| Duration::from_nanos(clock[key].as_u64().unwrap_or(u64::MAX));
        let clock = clock["synchronised"]
            .as_bool()
            .map(|synchronised| HostClock {
                max_error: ns("max_error_ns"),
                est_error: ns("est_error_ns"),
                synchronised,
            });
        stated.push((file_name(index), machine, clock));
    }
    let files: Vec<(&str, &str, Option<HostClock>)> = stated
        .iter()
        .map(|(name, machine, clock)| (name.as_str(), machine.as_str(), *clock))
        .collect();
    let manifest = perfetto_manifest(&files)?;
    if manifest["perfetto_manifest"]["trace_time"]["clock"] == "BOOTTIME" {
        let svg = dir.join("merged_timeline.svg");
        std::fs::write(&svg, merged_timeline(dir, processes)?.to_svg())?;
        println!(
            "wrote {}: every process's tracks on one BOOTTIME",
            svg.display()
        );
    }
    let path = dir.join("perfetto_manifest.json");
    std::fs::write(&path, serde_json::to_string_pretty(&manifest)?)?;
    Ok(path)
}

/// This machine's name, as the kernel has it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "this machine".into())
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Every process's tracks and slices, as each stated them on this
/// machine's BOOTTIME, drawn on one timeline.
fn merged_timeline(dir: &Path, processes: usize) -> Result<Trace, Box<dyn Error>> {
    let mut trace = Trace::new();
    trace.set_title(format!(
        "device-events demo: {processes} processes merged on BOOTTIME"
    ));
    let (now, boottime) = (Instant::now(), crate::truth::boottime_ns());
    let at = |ns: u64| {
        now.checked_sub(Duration::from_nanos(boottime.saturating_sub(ns)))
            .unwrap_or(now)
    };
    for index in 0..processes {
        let path = dir.join(statement_name(index));
        let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .map_err(|err| format!("{}: {err}", path.display()))?;
        let mut tracks = HashMap::new();
        for slice in value["slices"].as_array().into_iter().flatten() {
            let (Some(name), Some(label)) = (slice["track"].as_str(), slice["label"].as_str())
            else {
                continue;
            };
            // The trace keeps `'static` labels: the demo's own, matched.
            let Some(label) = ["step", "load", "produce", "consume", "enqueue", "wait"]
                .into_iter()
                .find(|known| *known == label)
            else {
                continue;
            };
            let host = slice["host"].as_bool().unwrap_or(false);
            let track = *tracks.entry(name.to_owned()).or_insert_with(|| {
                let name = format!("process {index}: {name}");
                if host {
                    trace.host_track(name)
                } else {
                    trace.device_track(name)
                }
            });
            let ns = |key: &str| slice[key].as_u64();
            let (Some(start), Some(end)) = (ns("start_boottime_ns"), ns("end_boottime_ns")) else {
                continue;
            };
            match (ns("device_duration_ns"), ns("bound_ns")) {
                (Some(duration), Some(bound)) => trace.span(
                    track,
                    label,
                    &Placement {
                        duration: Duration::from_nanos(duration),
                        start: at(start),
                        end: at(end),
                        uncertainty: Duration::from_nanos(bound),
                    },
                ),
                _ => trace.host_span(track, label, at(start), at(end)),
            }
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn each_process_plays_its_entry_of_the_simulated_machines() {
        let list = Some("0:1000000,-3000000:unsynchronised");
        let first = simulated(list, 0).unwrap().unwrap();
        assert_eq!(
            (first.offset_ns, first.error),
            (0, Some(Duration::from_millis(1)))
        );
        let second = simulated(list, 1).unwrap().unwrap();
        assert_eq!((second.offset_ns, second.error), (-3_000_000, None));
    }

    #[test]
    fn a_process_past_the_list_or_without_one_is_this_machine() {
        assert!(simulated(Some("0:1000000"), 1).unwrap().is_none());
        assert!(simulated(None, 0).unwrap().is_none());
    }

    #[test]
    fn a_malformed_simulated_machine_is_an_error_not_a_panic() {
        for list in ["", "3", "x:1", "1:-5", "1:", ":1", "1:2:3"] {
            assert!(simulated(Some(list), 0).is_err(), "{list:?}");
        }
    }
}
