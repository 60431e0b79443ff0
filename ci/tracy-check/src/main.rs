//! Placed windows as Tracy GPU zones, checked against a real Tracy server:
//! `iree-tracy-capture` (Tracy 0.11, protocol 66) captures this process to
//! a file through a relay that reads the client's side of the wire, where
//! every GPU zone must arrive on its stream's context, none lost, none
//! reordered, each end the window's placed time to the nanosecond (Tracy's
//! resolution at period 1), with no instrumentation failure.
//!
//! Usage: `tracy-check <iree-tracy-capture> <capture file>`.

mod wire;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use device_events_core::{EventProfiler, OwnedStream, Placement, sim::Sim};
use device_events_trace::{Tracy, TracyZone};
use wire::Wire;

type Error = Box<dyn std::error::Error>;

/// Whether the client re-syncs each context (0.18.4 and later).
const RESYNC: bool = cfg!(feature = "client-0-18");

/// Where Tracy's client listens.
const PORT: &str = "TRACY_PORT";

/// How long the capture may take to connect and receive everything.
const PATIENCE: Duration = Duration::from_secs(60);

/// A window as it was placed: its stream, its label, its placement
/// (`None`: no timing).
struct Placed {
    stream: &'static str,
    label: &'static str,
    placed: Option<Placement>,
}

fn main() -> ExitCode {
    match check() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tracy-check: {err}");
            ExitCode::FAILURE
        }
    }
}

fn check() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let (Some(capture), Some(file)) = (args.next(), args.next()) else {
        return Err("usage: tracy-check <iree-tracy-capture> <capture file>".into());
    };
    // Tracy's client reads its port as the program starts: the check runs
    // again with a port free now in its environment.
    let Some(client_port) = std::env::var(PORT).ok().and_then(|p| p.parse::<u16>().ok()) else {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let status = Command::new(std::env::current_exe()?)
            .args([&capture, &file])
            .env(PORT, port.to_string())
            .status()?;
        return if status.success() {
            Ok(())
        } else {
            Err(format!("the check failed ({status})").into())
        };
    };
    let relay = TcpListener::bind("127.0.0.1:0")?;
    let relay_port = relay.local_addr()?.port();

    let wire = Arc::new(Mutex::new(Wire::default()));
    let tracy = Tracy::new().start()?;
    let mut server = Command::new(&capture)
        .args([
            "-o",
            &file,
            "-f",
            "-a",
            "127.0.0.1",
            "-p",
            &relay_port.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("could not start {capture}: {err}"))?;
    relay_once(relay, client_port, Arc::clone(&wire))?;

    let windows = pipeline(&tracy)?;
    let dropped = tracy.finish();
    let expected = windows.iter().filter(|w| w.placed.is_some()).count();

    // Everything on the wire, then the capture told to stop and save.
    let deadline = Instant::now() + PATIENCE;
    while lock(&wire).times < 2 * expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid, which it has not reaped.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGINT) };
    let mut out = String::new();
    if let Some(mut stdout) = server.stdout.take() {
        stdout.read_to_string(&mut out)?;
    }
    let mut err_out = String::new();
    if let Some(mut stderr) = server.stderr.take() {
        stderr.read_to_string(&mut err_out)?;
    }
    let status = server.wait()?;
    let saved = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);

    let wire = lock(&wire);
    report(&windows, &wire);
    let mut problems = compare(&windows, &wire);
    problems.extend(wire.faults.iter().cloned());
    if dropped != 0 {
        problems.push(format!("the writer dropped {dropped} zones"));
    }
    let text = format!("{out}{err_out}");
    // Its progress line rewrites itself with carriage returns: the last.
    for line in text.lines() {
        let last = line.rsplit('\r').next().unwrap_or_default().trim();
        if !last.is_empty() {
            println!("capture: {}", last.replace("\x1b[", "").replace("[0m", ""));
        }
    }
    if text.contains("Instrumentation failure") {
        problems.push(format!("the capture reported a failure: {text}"));
    }
    if saved == 0 {
        problems.push(format!("the capture saved nothing to {file} ({status})"));
    }
    if problems.is_empty() {
        println!(
            "tracy-check: {expected} zones on {} contexts, each end its placed time to the ns; \
             capture saved to {file} ({saved} bytes)",
            wire.contexts.len()
        );
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

fn lock(wire: &Mutex<Wire>) -> std::sync::MutexGuard<'_, Wire> {
    wire.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Accept the capture's connection, connect it to the client, and copy
/// both ways, reading the client's side into `wire`.
fn relay_once(
    listener: TcpListener,
    client_port: u16,
    wire: Arc<Mutex<Wire>>,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("relay".into())
        .spawn(move || {
            let Ok((server, _)) = listener.accept() else {
                return;
            };
            let client = (0..500).find_map(|_| {
                TcpStream::connect(("127.0.0.1", client_port))
                    .inspect_err(|_| std::thread::sleep(Duration::from_millis(10)))
                    .ok()
            });
            let Some(client) = client else {
                lock(&wire).faults.push("the client never listened".into());
                return;
            };
            let (Ok(mut from_server), Ok(mut to_client)) = (server.try_clone(), client.try_clone())
            else {
                return;
            };
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut from_server, &mut to_client);
                let _ = to_client.shutdown(Shutdown::Write);
            });
            let (mut from_client, mut to_server) = (client, server);
            let mut buffer = vec![0; 1 << 16];
            while let Ok(n) = from_client.read(&mut buffer) {
                if n == 0 || to_server.write_all(&buffer[..n]).is_err() {
                    break;
                }
                lock(&wire).feed(&buffer[..n]);
            }
            let _ = to_server.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

/// The demo's shape on the simulated device: stream A a chain of kernels
/// (each boundary one record), stream B separate windows, one without
/// timing; each stream's zones placed last first, so that the earlier
/// ones, still pending, must hold the later ones back.
fn pipeline(tracy: &device_events_trace::TracyWriter) -> Result<Vec<Placed>, Error> {
    let a = OwnedStream::<Sim>::new()?;
    let b = OwnedStream::<Sim>::new()?;
    let track_a = tracy.stream("stream A");
    let track_b = tracy.stream("stream B");
    let mut profiler = EventProfiler::<Sim>::new();
    let mut pending = Vec::new();

    let mut token = profiler.start(a.get());
    for kernel in ["k0", "k1", "k2", "k3", "k4", "k5"] {
        Sim::enqueue_work(a.get(), Duration::from_micros(200));
        let (closed, next) = profiler.split(a.get(), token)?;
        pending.push((
            "stream A",
            kernel,
            tracy.zone(track_a, kernel),
            Some(closed),
        ));
        token = next;
    }
    profiler.abandon(token)?;
    for (i, label) in ["copy", "reduce", "untimed", "store"]
        .into_iter()
        .enumerate()
    {
        let zone = tracy.zone(track_b, label);
        if label == "untimed" {
            pending.push(("stream B", label, zone, None));
            continue;
        }
        let window = profiler.start(b.get());
        Sim::enqueue_work(b.get(), Duration::from_micros(100 * (i as u64 + 1)));
        pending.push((
            "stream B",
            label,
            zone,
            Some(profiler.stop(b.get(), window)?),
        ));
    }

    let mut resolved: Vec<(Placed, TracyZone)> = pending
        .into_iter()
        .map(|(stream, label, zone, window)| {
            let placed = window.and_then(pollster::block_on);
            (
                Placed {
                    stream,
                    label,
                    placed,
                },
                zone,
            )
        })
        .collect();
    let mut windows = Vec::new();
    while let Some((placed, zone)) = resolved.pop() {
        // Stream B's zones placed, last first; with a client that can
        // re-sync, stream A's go up after a sync of every context.
        if RESYNC
            && placed.stream == "stream A"
            && windows
                .last()
                .is_some_and(|w: &Placed| w.stream == "stream B")
        {
            std::thread::sleep(Duration::from_millis(1500));
        }
        if !zone.place(placed.placed.as_ref()) {
            return Err(format!("zone {} not handed over", placed.label).into());
        }
        windows.push(placed);
    }
    windows.reverse();
    drop(profiler);
    Ok(windows)
}

/// Nanoseconds from `origin` to `at`.
fn ns(origin: Placement, at: std::time::Instant) -> i64 {
    match at.checked_duration_since(origin.start) {
        Some(d) => d.as_nanos() as i64,
        None => -(origin.start.duration_since(at).as_nanos() as i64),
    }
}

/// Every window with timing must be its stream's context's next zone, its
/// ends the placed ones (as offsets from the first window's start, on both
/// sides: the same clock up to the writer's origin).
fn compare(windows: &[Placed], wire: &Wire) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(first) = windows.iter().find_map(|w| w.placed) else {
        return vec!["no window was placed".into()];
    };
    let context_of = |stream: &str| {
        wire.contexts
            .values()
            .find(|c| c.name.as_deref() == Some(stream))
    };
    let Some(first_zone) = context_of(windows[0].stream)
        .and_then(|c| c.zones.first())
        .and_then(|z| z.start)
    else {
        return vec!["the first window's zone never arrived".into()];
    };
    for stream in ["stream A", "stream B"] {
        let Some(context) = context_of(stream) else {
            problems.push(format!("no context named {stream}"));
            continue;
        };
        if context.period != 1.0 {
            problems.push(format!("{stream}: period {}", context.period));
        }
        if RESYNC && context.syncs == 0 {
            problems.push(format!("{stream}: its context was never re-synced"));
        }
        let placed: Vec<&Placed> = windows
            .iter()
            .filter(|w| w.stream == stream && w.placed.is_some())
            .collect();
        if placed.len() != context.zones.len() {
            problems.push(format!(
                "{stream}: {} windows placed, {} zones received",
                placed.len(),
                context.zones.len()
            ));
        }
        for (window, zone) in placed.iter().zip(&context.zones) {
            let Some(p) = window.placed else { continue };
            let want = (ns(first, p.start), ns(first, p.end));
            let got = (
                zone.start.map(|t| t - first_zone),
                zone.end.map(|t| t - first_zone),
            );
            if zone.label != window.label || got != (Some(want.0), Some(want.1)) {
                problems.push(format!(
                    "{stream}: window {} at {want:?} ns, zone {} at {got:?}",
                    window.label, zone.label
                ));
            }
        }
    }
    problems
}

/// Each window placed against the zone received, for the record.
fn report(windows: &[Placed], wire: &Wire) {
    let first = windows.iter().find_map(|w| w.placed);
    let first_zone = wire
        .contexts
        .values()
        .find(|c| c.name.as_deref() == Some(windows[0].stream))
        .and_then(|c| c.zones.first())
        .and_then(|z| z.start);
    println!(
        "{:<9} {:<8} {:>14} {:>14}   {:>14} {:>14}",
        "stream", "window", "placed start", "placed end", "zone start", "zone end"
    );
    let mut next: std::collections::BTreeMap<&str, usize> = Default::default();
    for window in windows {
        let (Some(first), Some(p)) = (first, window.placed) else {
            println!(
                "{:<9} {:<8} {:>14} {:>14}   (no timing: no zone)",
                window.stream, window.label, "-", "-"
            );
            continue;
        };
        let context = wire
            .contexts
            .values()
            .find(|c| c.name.as_deref() == Some(window.stream));
        let index = next.entry(window.stream).or_default();
        let zone = context.and_then(|c| c.zones.get(*index));
        *index += 1;
        let rel = |t: Option<i64>| match (t, first_zone) {
            (Some(t), Some(f)) => format!("{}", t - f),
            _ => "missing".into(),
        };
        println!(
            "{:<9} {:<8} {:>14} {:>14}   {:>14} {:>14}",
            window.stream,
            window.label,
            ns(first, p.start),
            ns(first, p.end),
            rel(zone.and_then(|z| z.start)),
            rel(zone.and_then(|z| z.end)),
        );
    }
    println!("(ns from the first window's start; zones as the server received them)");
    // Each pairing against the context's first: how far Tracy's clock
    // moved from `Instant`'s (a retaken pairing shows as two close ones).
    for context in wire.contexts.values() {
        let Some(&(gpu0, cpu0)) = context.pairings.first() else {
            continue;
        };
        let offsets: Vec<String> = context
            .pairings
            .iter()
            .map(|&(gpu, cpu)| {
                let (gpu, tracy) = ((gpu - gpu0) as f64, (cpu - cpu0) as f64 * wire.timer_mul);
                format!("{:.6} s {:+.2} µs", gpu / 1e9, (tracy - gpu) / 1e3)
            })
            .collect();
        println!(
            "{}: Tracy's clock against Instant's at each pairing: {}",
            context.name.as_deref().unwrap_or("?"),
            offsets.join(", ")
        );
    }
}
