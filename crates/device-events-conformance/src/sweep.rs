//! The fault sweep and the stress run, on the software driver.
//!
//! The sweep runs each scenario once to learn which driver functions it
//! calls and how often, then again for every one of those calls, with that
//! call made to fail with each status its function can return. After each
//! run it counts panics, leaks (the driver's live events and streams, and
//! releases of dead handles) and lost errors: an injected status that
//! reached neither the scenario's caller nor the log; and whether the
//! scenario then runs clean, the failed call's resource back.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use device_events_core::{
    AnchorConfig, Backend, EventFence, EventProfiler, OwnedStream, ProfilerConfig,
};

use crate::Streams;
use crate::soft::{Counts, SoftDriver};

static LOGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LOGS.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(record.args().to_string());
    }
    fn flush(&self) {}
}

fn capture_logs() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if log::set_logger(&Capture).is_ok() {
            log::set_max_level(log::LevelFilter::Trace);
        }
    });
}

fn take_logs() -> Vec<String> {
    std::mem::take(&mut *LOGS.lock().unwrap_or_else(PoisonError::into_inner))
}

/// Errors a scenario was handed, as text.
pub type Seen = Vec<String>;

/// A scenario: driver calls a user makes, returning the errors it was handed.
pub type Scenario = fn() -> Seen;

fn note<T, E: std::fmt::Display>(seen: &mut Seen, result: Result<T, E>) -> Option<T> {
    result.map_err(|e| seen.push(e.to_string())).ok()
}

fn streams<A: Backend>(n: usize, seen: &mut Seen) -> Option<Streams<A>> {
    let mut made = Streams::<A>(Vec::new());
    for _ in 0..n {
        made.0.push(note(seen, OwnedStream::new())?);
    }
    Some(made)
}

fn resolve_all<A: Backend>(pending: Vec<device_events_core::PlacedWindow<A>>) {
    for timing in pending {
        // `None` is reported through the log, which the sweep reads.
        let _ = pollster::block_on(timing.resolve());
    }
}

/// A fence made, waited on by the host, dropped.
pub fn fence_lifecycle<A: Backend>() -> Seen {
    let mut seen = Seen::new();
    if let Some(s) = streams::<A>(1, &mut seen) {
        let fence = EventFence::<A>::new(s.get(0));
        note(&mut seen, fence.wait_sync());
    }
    seen
}

/// One stream made to wait for another's point, then the host for it.
pub fn cross_stream_fence<A: Backend>() -> Seen {
    let mut seen = Seen::new();
    if let Some(s) = streams::<A>(2, &mut seen) {
        let fence = EventFence::<A>::new(s.get(0));
        note(&mut seen, fence.wait_async(s.get(1)));
        note(&mut seen, EventFence::<A>::new(s.get(1)).wait_sync());
    }
    seen
}

/// A profiler with a window nested in another, both read.
pub fn nested_windows<A: Backend>() -> Seen {
    let mut seen = Seen::new();
    if let Some(s) = streams::<A>(1, &mut seen) {
        let s = s.get(0);
        let mut profiler = EventProfiler::<A>::new();
        let outer = profiler.start(s);
        let inner = profiler.start(s);
        let mut pending = Vec::new();
        for token in [inner, outer] {
            pending.extend(note(&mut seen, profiler.stop(s, token)));
        }
        resolve_all(pending);
    }
    seen
}

/// Two windows with a fresh anchor each, chained by the drift fit.
pub fn anchor_refresh<A: Backend>() -> Seen {
    let mut seen = Seen::new();
    if let Some(s) = streams::<A>(1, &mut seen) {
        let s = s.get(0);
        let mut profiler = EventProfiler::<A>::with_config(ProfilerConfig {
            anchor: AnchorConfig {
                anchor_max_age: Duration::ZERO,
                calibration_samples: 2,
                ..AnchorConfig::default()
            },
            ..ProfilerConfig::default()
        });
        let mut pending = Vec::new();
        for _ in 0..2 {
            let token = profiler.start(s);
            std::thread::sleep(Duration::from_micros(50));
            pending.extend(note(&mut seen, profiler.stop(s, token)));
        }
        resolve_all(pending);
    }
    seen
}

/// A profiler dropped with windows open and a reading never awaited.
pub fn teardown_with_windows_open<A: Backend>() -> Seen {
    let mut seen = Seen::new();
    if let Some(s) = streams::<A>(1, &mut seen) {
        let s = s.get(0);
        let mut profiler = EventProfiler::<A>::new();
        let _open = profiler.start(s);
        let _also_open = profiler.start(s);
        let stopped = profiler.start(s);
        let unread = note(&mut seen, profiler.stop(s, stopped));
        drop(profiler);
        drop(unread);
    }
    seen
}

/// The scenarios of the sweep, by name.
pub fn scenarios<A: Backend>() -> [(&'static str, Scenario); 5] {
    [
        ("fence lifecycle", fence_lifecycle::<A>),
        ("cross-stream fence", cross_stream_fence::<A>),
        ("nested windows", nested_windows::<A>),
        ("anchor refresh", anchor_refresh::<A>),
        (
            "teardown with windows open",
            teardown_with_windows_open::<A>,
        ),
    ]
}

/// What a sweep found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Runs with one call made to fail.
    pub points: usize,
    /// Runs that panicked.
    pub panics: usize,
    /// Runs after which an event or stream was left live.
    pub leaks: usize,
    /// Runs in which the driver was handed a handle that was not live.
    pub misuses: usize,
    /// Injected statuses that reached neither the caller nor the log, and
    /// clean runs after an injection that failed all the same.
    pub lost: usize,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Self) {
        self.points += other.points;
        self.panics += other.panics;
        self.leaks += other.leaks;
        self.misuses += other.misuses;
        self.lost += other.lost;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} injection points, {} panics, {} leaks, {} misuses, {} lost errors",
            self.points, self.panics, self.leaks, self.misuses, self.lost
        )
    }
}

/// Sweep `scenario`: every call it makes, failed in turn with each status
/// `statuses` gives for its function.
pub fn sweep(
    driver: &SoftDriver,
    scenario: Scenario,
    statuses: fn(&str) -> &'static [i32],
) -> Tally {
    capture_logs();
    let baseline = driver.counts();
    driver.reset();
    let clean = scenario();
    settle();
    let called: Vec<(String, u64)> = driver
        .called()
        .into_iter()
        .map(|name| {
            let count = driver.call_count(&name);
            (name, count)
        })
        .collect();
    let mut tally = Tally::default();
    if !clean.is_empty() {
        eprintln!("the scenario fails with no fault injected: {clean:?}");
        tally.lost += 1;
    }
    for (function, count) in called {
        for nth in 1..=count {
            for &status in statuses(&function) {
                driver.reset();
                take_logs();
                if !driver.fail_call(&function, u32::try_from(nth).unwrap_or(u32::MAX), status) {
                    continue;
                }
                tally.points += 1;
                let outcome = catch_unwind(AssertUnwindSafe(scenario));
                settle();
                let logs = take_logs();
                // The injection fired only if the scenario made the call
                // that often. Then none is left for the counting's own calls
                // (it releases the idle events and gate words first).
                let fired = driver.call_count(&function) >= nth;
                driver.reset();
                let Ok(seen) = outcome else {
                    tally.panics += 1;
                    continue;
                };
                let what = format!("after {function} #{nth} failed with {status}");
                count_leaks_and_misuses(driver, &baseline, &mut tally, &what);
                if !fired {
                    continue;
                }
                // A `DriverError` reads `<backend>: <call> failed: <name> (<status>)`.
                let (call, code) = (format!("{function} failed: "), format!("({status})"));
                if !seen
                    .iter()
                    .chain(&logs)
                    .any(|line| line.contains(&call) && line.contains(&code))
                {
                    eprintln!("lost: {call}{code}");
                    tally.lost += 1;
                }
                // The refusal was one call's: with the resource back, the
                // scenario runs clean.
                runs_clean_again(driver, scenario, &mut tally, &what);
            }
        }
    }
    tally
}

/// Whether none of the library's threads is up, waiting at most `limit`.
fn threads_gone_within(limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while device_events_core::process::library_threads_running() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Count a leak and a misuse against `baseline`, if any, naming `what`.
fn count_leaks_and_misuses(driver: &SoftDriver, baseline: &Counts, tally: &mut Tally, what: &str) {
    let after = driver.counts();
    if (after.events, after.streams) != (baseline.events, baseline.streams) {
        eprintln!("leak {what}: {after:?}");
        tally.leaks += 1;
    }
    if after.misuses != baseline.misuses {
        eprintln!("misuse {what}: {after:?}");
        tally.misuses += 1;
    }
}

/// Run `scenario` again with nothing injected: it must run clean. Counted
/// as a lost error when it does not.
fn runs_clean_again(driver: &SoftDriver, scenario: Scenario, tally: &mut Tally, what: &str) {
    driver.reset();
    let again = scenario();
    settle();
    // Each run starts as the learning run did: no fence event kept from
    // the one before.
    device_events_core::process::release_idle_events();
    if !again.is_empty() {
        eprintln!("{what}, a clean run fails: {again:?}");
        tally.lost += 1;
    }
}

/// Every scenario with none of the library's threads able to start (a
/// process at its thread limit), then each again once they can. With
/// starts refused: no panic, leak or misuse, and a refusal that happened
/// reaches the caller or the log; once allowed: the scenario runs clean.
pub fn sweep_thread_starts(driver: &SoftDriver, scenarios: &[(&'static str, Scenario)]) -> Tally {
    capture_logs();
    let baseline = driver.counts();
    let mut tally = Tally::default();
    for &(name, scenario) in scenarios {
        // An idle thread lingers a few seconds; a start is refused only
        // once it is gone.
        if !threads_gone_within(Duration::from_secs(10)) {
            eprintln!("the library's threads did not go within 10 s, before {name}");
            tally.lost += 1;
            continue;
        }
        driver.reset();
        take_logs();
        device_events_core::process::refuse_thread_starts(true);
        tally.points += 1;
        let outcome = catch_unwind(AssertUnwindSafe(scenario));
        settle();
        let refused = device_events_core::process::refuse_thread_starts(false);
        let logs = take_logs();
        let Ok(seen) = outcome else {
            tally.panics += 1;
            continue;
        };
        let what = format!("in {name} with thread starts refused");
        count_leaks_and_misuses(driver, &baseline, &mut tally, &what);
        let said = seen
            .iter()
            .chain(&logs)
            .any(|line| line.contains("could be started"));
        if refused > 0 && !said {
            eprintln!("lost: {refused} refused thread start(s) in {name}");
            tally.lost += 1;
        }
        // The threads can start again: the scenario runs as if nothing
        // had happened.
        runs_clean_again(driver, scenario, &mut tally, &what);
    }
    tally
}

/// Let calibrations in flight end: a profiler dropped meanwhile releases
/// its anchor's events and stream as its calibration ends.
fn settle() {
    if !device_events_core::process::wait_for_calibrations(Duration::from_secs(30)) {
        eprintln!("a calibration did not end within 30 s");
    }
}

/// The stress run: `threads` threads each make `each` fences and windows on
/// a stream of their own and hand them to another thread, which waits on
/// and reads them. Returns how long it took, or what went wrong.
///
/// # Errors
///
/// A sentence naming what was lost, leaked or stuck.
pub fn stress<A: Backend>(
    threads: usize,
    each: usize,
    prepare_thread: fn(),
    counts: fn() -> (u64, u64),
) -> Result<Duration, String> {
    // A profiler dropped just before releases its anchor's handles on the
    // calibrator thread: counted before, not during.
    settle();
    let started = Instant::now();
    let before = counts();
    let (done, results) = mpsc::channel();
    let mut workers = Vec::new();
    for _ in 0..threads {
        let done = done.clone();
        let (hand_off, received) = mpsc::sync_channel::<(EventFence<A>, _)>(256);
        workers.push(std::thread::spawn(move || {
            let (mut waited, mut read) = (0usize, 0usize);
            for (fence, timing) in received {
                waited += usize::from(fence.wait_sync().is_ok());
                let timing: device_events_core::PlacedWindow<A> = timing;
                read += usize::from(pollster::block_on(timing.resolve()).is_some());
            }
            let _ = done.send((waited, read));
        }));
        workers.push(std::thread::spawn(move || {
            prepare_thread();
            let Ok(owned) = OwnedStream::<A>::new() else {
                return;
            };
            let stream = owned.get();
            let mut profiler = EventProfiler::<A>::new();
            for _ in 0..each {
                let token = profiler.start(stream);
                let fence = EventFence::<A>::new(stream);
                let Ok(timing) = profiler.stop(stream, token) else {
                    return;
                };
                if hand_off.send((fence, timing)).is_err() {
                    return;
                }
            }
            drop(hand_off);
            drop(profiler);
            drop(owned);
        }));
    }
    drop(done);
    let deadline = started + Duration::from_secs(60);
    let (mut waited, mut read) = (0, 0);
    for _ in 0..threads {
        let left = deadline.saturating_duration_since(Instant::now());
        let (w, r) = results
            .recv_timeout(left)
            .map_err(|_| "a waiting thread did not finish within a minute".to_owned())?;
        waited += w;
        read += r;
    }
    for worker in workers {
        worker.join().map_err(|_| "a thread panicked".to_owned())?;
    }
    settle();
    let total = threads * each;
    if (waited, read) != (total, total) {
        return Err(format!(
            "{waited} of {total} fences waited, {read} of {total} windows read"
        ));
    }
    let after = counts();
    if after.0 != before.0 {
        return Err(format!(
            "{} events leaked",
            after.0.saturating_sub(before.0)
        ));
    }
    if after.1 != before.1 {
        return Err(format!("{} misuses", after.1.saturating_sub(before.1)));
    }
    Ok(started.elapsed())
}

/// The body of a backend's `fault_sweep` test binary: sweep every scenario,
/// run the stress test, print one line for each, and exit non-zero unless
/// the sweep found no panic, leak or lost error and the stress run passed.
///
/// # Panics
///
/// When the software driver cannot be loaded.
pub fn main<A: Backend>(statuses: fn(&str) -> &'static [i32], prepare_thread: fn()) {
    let driver = SoftDriver::exclusive();
    prepare_thread();
    let mut total = Tally::default();
    for (name, scenario) in scenarios::<A>() {
        let tally = sweep(&driver, scenario, statuses);
        eprintln!("{} fault sweep, {name}: {tally}", A::BACKEND);
        total += tally;
    }
    let starts = sweep_thread_starts(&driver, &scenarios::<A>());
    eprintln!(
        "{} fault sweep, thread starts refused: {starts}",
        A::BACKEND
    );
    total += starts;
    println!("{} fault sweep: {total}", A::BACKEND);
    let stressed = stress::<A>(8, 10_000, prepare_thread, crate::soft::events_and_misuses);
    match &stressed {
        Ok(took) => println!(
            "{} stress: 8 threads x 10000 fences and windows, read on other threads, in {:.1} s",
            A::BACKEND,
            took.as_secs_f64()
        ),
        Err(why) => println!("{} stress failed: {why}", A::BACKEND),
    }
    let clean = total.points > 0 && total.panics + total.leaks + total.misuses + total.lost == 0;
    if !clean || stressed.is_err() {
        std::process::exit(1);
    }
}
