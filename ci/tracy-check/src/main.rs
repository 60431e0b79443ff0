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
/// (`None`: no timing), and whether it must make a zone (a window
/// starting before an earlier-closed one of its stream ended makes none).
struct Placed {
    stream: &'static str,
    label: &'static str,
    placed: Option<Placement>,
    zone: bool,
}

/// The streams, and the `Instant`s just before and after each was made.
const STREAMS: [&str; 3] = ["stream A", "stream B", "stream C"];

/// How far (per second between two pairings, plus a fixed part for a
/// retaken one) Tracy's clock may drift from `Instant`'s: its rate is
/// measured once, over 200 ms, at its start.
const DRIFT_PPM: f64 = 500.0;
const DRIFT_FIXED_NS: f64 = 20_000.0;

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

    let (windows, made) = pipeline(&tracy)?;
    let dropped = tracy.finish();
    let expected = windows
        .iter()
        .filter(|w| w.placed.is_some() && w.zone)
        .count();
    let refused = windows
        .iter()
        .filter(|w| w.placed.is_some() && !w.zone)
        .count();

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
    problems.extend(pairings(&windows, &wire, &made));
    problems.extend(wire.faults.iter().cloned());
    if dropped != refused as u64 {
        problems.push(format!(
            "the writer dropped {dropped} zones, {refused} windows overlapping an earlier-closed one"
        ));
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
            "tracy-check: {expected} zones on {} contexts, each end its placed time to the ns, \
             {refused} overlapping windows dropped and counted; capture saved to {file} ({saved} bytes)",
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
/// timing, stream C nested and overlapping windows; each stream's zones
/// placed last first, so that the earlier ones, still pending, must hold
/// the later ones back. Also returns each stream's name with the
/// `Instant`s read just before and after it was made.
fn pipeline(tracy: &device_events_trace::TracyWriter) -> Result<(Vec<Placed>, Made), Error> {
    let a = OwnedStream::<Sim>::new()?;
    let b = OwnedStream::<Sim>::new()?;
    let c = OwnedStream::<Sim>::new()?;
    let mut made = Vec::new();
    let mut tracks = Vec::new();
    for name in STREAMS {
        let before = Instant::now();
        tracks.push(tracy.stream(name));
        made.push((name, before, Instant::now()));
    }
    let (track_a, track_b, track_c) = (tracks[0], tracks[1], tracks[2]);
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
            true,
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
            pending.push(("stream B", label, zone, None, true));
            continue;
        }
        let window = profiler.start(b.get());
        Sim::enqueue_work(b.get(), Duration::from_micros(100 * (i as u64 + 1)));
        pending.push((
            "stream B",
            label,
            zone,
            Some(profiler.stop(b.get(), window)?),
            true,
        ));
    }

    // Stream C: an inner window closes (and is reserved) before the one
    // enclosing it, then two windows overlap, then one stands alone.
    let c = c.get();
    let work = |micros| Sim::enqueue_work(c, Duration::from_micros(micros));
    let outer = profiler.start(c);
    work(100);
    let inner = profiler.start(c);
    work(100);
    let inner = profiler.stop(c, inner)?;
    pending.push((
        "stream C",
        "inner",
        tracy.zone(track_c, "inner"),
        Some(inner),
        true,
    ));
    work(100);
    let outer = profiler.stop(c, outer)?;
    pending.push((
        "stream C",
        "outer",
        tracy.zone(track_c, "outer"),
        Some(outer),
        false,
    ));
    let first = profiler.start(c);
    work(100);
    let second = profiler.start(c);
    work(100);
    let first = profiler.stop(c, first)?;
    pending.push((
        "stream C",
        "first",
        tracy.zone(track_c, "first"),
        Some(first),
        true,
    ));
    work(100);
    let second = profiler.stop(c, second)?;
    pending.push((
        "stream C",
        "second",
        tracy.zone(track_c, "second"),
        Some(second),
        false,
    ));
    let alone = profiler.start(c);
    work(100);
    let alone = profiler.stop(c, alone)?;
    pending.push((
        "stream C",
        "alone",
        tracy.zone(track_c, "alone"),
        Some(alone),
        true,
    ));

    let mut resolved: Vec<(Placed, TracyZone)> = pending
        .into_iter()
        .map(|(stream, label, zone, window, makes_zone)| {
            let placed = window.and_then(pollster::block_on);
            (
                Placed {
                    stream,
                    label,
                    placed,
                    zone: makes_zone,
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
    Ok((windows, made))
}

/// Each stream's name, with the `Instant`s just before and after it was
/// made.
type Made = Vec<(&'static str, Instant, Instant)>;

/// Every context's first pairing (its creation's) must give the GPU time
/// of a moment after its stream was asked for and before the relay read it
/// (`Instant`s turned into the writer's ticks through the first zone), and
/// its later pairings must agree with each other to within Tracy's clock's
/// drift, except one the client took again at once, before any GPU time
/// came, because preemption made its call wide (the creation's included):
/// no zone's time was read through it.
fn pairings(windows: &[Placed], wire: &Wire, made: &Made) -> Vec<String> {
    let mut problems = Vec::new();
    let (Some(first), Some(first_zone)) = (
        windows.iter().find_map(|w| w.placed),
        first_zone(windows, wire),
    ) else {
        return vec!["no zone to read the writer's clock from".into()];
    };
    let tick = |at: Instant| first_zone + ns(first, at);
    for &(name, before, after) in made {
        let Some(context) = wire
            .contexts
            .values()
            .find(|c| c.name.as_deref() == Some(name))
        else {
            continue;
        };
        let Some(seen) = context.seen else {
            continue;
        };
        let (gpu, _) = context.created;
        let (low, high) = (tick(before), tick(seen.max(after)));
        println!(
            "{name}: first pairing's GPU time {} ns after its stream was asked for, {} ns before \
             the relay read it (stream() itself took {} ns)",
            gpu - low,
            high - gpu,
            tick(after) - low
        );
        if !(low..=high).contains(&gpu) {
            problems.push(format!(
                "{name}: first pairing's GPU time {gpu} outside [{low}, {high}]"
            ));
        }
        for pair in context.pairings.windows(2) {
            let (gpu, cpu) = (
                (pair[1].0 - pair[0].0) as f64,
                (pair[1].1 - pair[0].1) as f64,
            );
            let off = cpu * wire.timer_mul - gpu;
            let bound = DRIFT_FIXED_NS + gpu.abs() * DRIFT_PPM / 1e6;
            if off.abs() > bound {
                problems.push(format!(
                    "{name}: two pairings {:.6} s apart disagree by {:.1} µs (bound {:.1} µs)",
                    gpu / 1e9,
                    off / 1e3,
                    bound / 1e3
                ));
            }
        }
    }
    problems
}

/// The first window's zone's start, in the writer's ticks.
fn first_zone(windows: &[Placed], wire: &Wire) -> Option<i64> {
    let stream = windows.first()?.stream;
    wire.contexts
        .values()
        .find(|c| c.name.as_deref() == Some(stream))
        .and_then(|c| c.zones.first())
        .and_then(|z| z.start)
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
    for stream in STREAMS {
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
            .filter(|w| w.stream == stream && w.placed.is_some() && w.zone)
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
        if !window.zone {
            println!(
                "{:<9} {:<8} {:>14} {:>14}   (starts before an earlier-closed window ended: no zone, counted)",
                window.stream,
                window.label,
                ns(first, p.start),
                ns(first, p.end),
            );
            continue;
        }
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
    // moved from `Instant`'s.
    for context in wire.contexts.values() {
        let (gpu0, cpu0) = context.created;
        let offsets = |pairings: &[(i64, i64)]| {
            let offsets: Vec<String> = pairings
                .iter()
                .map(|&(gpu, cpu)| {
                    let (gpu, tracy) = ((gpu - gpu0) as f64, (cpu - cpu0) as f64 * wire.timer_mul);
                    format!("{:.6} s {:+.2} µs", gpu / 1e9, (tracy - gpu) / 1e3)
                })
                .collect();
            offsets.join(", ")
        };
        let name = context.name.as_deref().unwrap_or("?");
        println!(
            "{name}: Tracy's clock against Instant's at each pairing: {}",
            offsets(&context.pairings)
        );
        if !context.unused.is_empty() {
            println!(
                "{name}: taken again at once, before any GPU time came (not held to the bound): {}",
                offsets(&context.unused)
            );
        }
    }
}
