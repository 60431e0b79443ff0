//! What answering a window costs, on the software driver through the CUDA
//! backend: how late a window's future is woken after the device reached
//! its end, with another window pending ahead of it, and the CPU the
//! process spends while many windows pend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use device_events_conformance::cpu::process_cpu;
use device_events_conformance::soft::SoftDriver;
use device_events_core::{EventApi, EventProfiler, PlacedWindow, Placement};
use device_events_cuda::{Cuda, CudaStream};

use crate::work;

/// Notes when it was woken.
struct Noted(Mutex<Option<Instant>>);

impl Wake for Noted {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(Instant::now);
    }
}

type Reading = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Placement>> + Send>>;

/// A window handed to the resolver: its future, polled once with a waker
/// that notes when it is woken.
struct HandedOver {
    future: Reading,
    woken: Arc<Noted>,
}

impl HandedOver {
    fn new(window: PlacedWindow<Cuda>) -> Self {
        let woken = Arc::new(Noted(Mutex::new(None)));
        let mut future: Reading = Box::pin(window.resolve());
        let waker = Waker::from(Arc::clone(&woken));
        assert!(
            future
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending(),
            "the window's end is not reached yet"
        );
        Self { future, woken }
    }

    /// Once woken: when, after the window's end as placed on the host
    /// clock. Its events are back in the pool by then (and may be recorded
    /// again), so the driver's truth is gone; the placement stands in for
    /// it, within its stated bound (about a microsecond, gated).
    fn late(mut self) -> Option<Duration> {
        let woken = (*self.woken.0.lock().unwrap_or_else(PoisonError::into_inner))?;
        let waker = Waker::from(Arc::clone(&self.woken));
        let std::task::Poll::Ready(Some(placed)) =
            self.future.as_mut().poll(&mut Context::from_waker(&waker))
        else {
            panic!("the window read");
        };
        let end = placed.end;
        Some(woken.saturating_duration_since(end))
    }
}

/// Head of line: a window on stream A behind 1 s of work is handed over
/// first, then 100 windows on stream B, each behind 1 ms more. How late
/// each B window's future is woken after its end, sorted.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn head_of_line(soft: &SoftDriver) -> Vec<Duration> {
    soft.set_bandwidth(1e9);
    // At 1 GB/s, a byte of memset is a nanosecond of work.
    let late = head_of_line_with(|s, ns| work(s, ns as usize));
    soft.set_bandwidth(10e9);
    late
}

/// [`head_of_line`] with `work(stream, ns)` queuing `ns` of device work.
///
/// # Panics
///
/// When the driver cannot run it.
pub fn head_of_line_with(work: impl Fn(CudaStream, u64)) -> Vec<Duration> {
    let (a, b) = (
        Cuda::stream_create_non_blocking().unwrap(),
        Cuda::stream_create_non_blocking().unwrap(),
    );
    let mut profiler = EventProfiler::<Cuda>::new();
    let token = profiler.start(a);
    work(a, 1_000_000_000);
    let window = profiler.stop(a, token).unwrap();
    let first = HandedOver::new(window);
    let mut handed: Vec<HandedOver> = (0..100)
        .map(|_| {
            let token = profiler.start(b);
            work(b, 1_000_000);
            let window = profiler.stop(b, token).unwrap();
            HandedOver::new(window)
        })
        .collect();
    let mut late = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !handed.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        let (woken, pending): (Vec<_>, Vec<_>) = handed.into_iter().partition(|h| {
            h.woken
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
        });
        late.extend(woken.into_iter().filter_map(HandedOver::late));
        handed = pending;
    }
    drop(first);
    drop(profiler);
    Cuda::stream_destroy(a).unwrap();
    Cuda::stream_destroy(b).unwrap();
    late.sort_unstable();
    late
}

/// The process's CPU time over 500 ms while 1000 windows pend behind 1 s
/// of work, as a share of one core.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn cpu_while_pending(soft: &SoftDriver) -> f64 {
    soft.set_bandwidth(1e9);
    let s = Cuda::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Cuda>::new();
    work(s, 1_000_000_000);
    let handed: Vec<HandedOver> = (0..1000)
        .map(|_| {
            let token = profiler.start(s);
            let window = profiler.stop(s, token).unwrap();
            HandedOver::new(window)
        })
        .collect();
    let (cpu, wall) = (process_cpu(), Instant::now());
    std::thread::sleep(Duration::from_millis(500));
    let share = (process_cpu() - cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
    drop(handed);
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
    soft.set_bandwidth(10e9);
    share
}

/// Windows on an idle stream, each read right after `stop`: how late each
/// future is answered after the window's end as placed, sorted. One the
/// device already passed reads at once.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn right_after_stop(n: usize) -> Vec<Duration> {
    let s = Cuda::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<Cuda>::new();
    let mut late: Vec<Duration> = (0..n)
        .map(|_| {
            std::thread::sleep(Duration::from_micros(200));
            let token = profiler.start(s);
            let window = profiler.stop(s, token).unwrap();
            let woken = Arc::new(Noted(Mutex::new(None)));
            let waker = Waker::from(Arc::clone(&woken));
            let mut future: Reading = Box::pin(window.resolve());
            let placed = loop {
                if let std::task::Poll::Ready(placed) =
                    future.as_mut().poll(&mut Context::from_waker(&waker))
                {
                    break placed.expect("the window read");
                }
                while woken
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_none()
                {
                    std::thread::yield_now();
                }
            };
            let now = Instant::now();
            let at = (*woken.0.lock().unwrap_or_else(PoisonError::into_inner)).unwrap_or(now);
            at.saturating_duration_since(placed.end)
        })
        .collect();
    drop(profiler);
    Cuda::stream_destroy(s).unwrap();
    late.sort_unstable();
    late
}

/// A server that times every kernel, on the core's simulated backend (no
/// driver threads of its own, so the process's CPU beyond the calling
/// thread is the library's): `n` kernels of `kernel` each, back to back,
/// spread over `streams` streams, one chained window per kernel, each read
/// with `pollster::block_on` once 32 more are queued behind it.
#[derive(Debug)]
pub struct EveryKernel {
    /// CPU time of every thread but the caller's, as a share of one core,
    /// over the run.
    pub cpu_share: f64,
    /// On-CPU time of the library's own threads (named `device-events-…`),
    /// from the scheduler's statistics, as a share of one core: the same
    /// as `cpu_share` where the backend has no threads of its own.
    pub library_cpu_share: f64,
    /// The library's threads' on-CPU time per window read, µs: the
    /// resolver's and the calibrators' together.
    pub library_cpu_us_per_window: f64,
    /// The resolver thread's alone, µs per window read.
    pub resolver_cpu_us_per_window: f64,
    /// The library's threads that were running at the start and had left
    /// by the end: their time is missing from `library_cpu_share`.
    pub library_threads_left: usize,
    /// The library's threads' context switches per window, voluntary (a
    /// sleep or a blocked wait ended: a wake-up) and involuntary: what a
    /// window costs the OS beside the instructions.
    pub library_wakeups_per_window: Switches,
    /// The reading thread's, likewise: a blocked read woken per window.
    pub reader_wakeups_per_window: Switches,
    /// How long after each window's end (as placed) its read returned,
    /// sorted.
    pub late: Vec<Duration>,
    /// Windows that read `None`.
    pub unread: usize,
}

/// See [`EveryKernel`].
///
/// # Panics
///
/// When a window cannot be chained.
pub fn every_kernel(streams: usize, kernel: Duration, n: usize) -> EveryKernel {
    use device_events_core::OwnedStream;
    use device_events_core::sim::Sim;
    let owned: Vec<OwnedStream<Sim>> = (0..streams).map(|_| OwnedStream::new().unwrap()).collect();
    let streams: Vec<_> = owned.iter().map(OwnedStream::get).collect();
    every_kernel_on::<Sim>(&streams, 1, |_, s| Sim::enqueue_work(s, kernel), n)
}

/// [`every_kernel`] on two simulated devices, `streams` on each, a
/// profiler per device (as a server per GPU has): each device's anchors
/// are taken on a calibrator thread of its own.
///
/// # Panics
///
/// When a window cannot be chained.
pub fn every_kernel_on_two_devices(streams: usize, kernel: Duration, n: usize) -> EveryKernel {
    use device_events_core::sim::Sim;
    // Device 0's and device 1's streams alternate, as the profilers do.
    let made: Vec<_> = (0..2 * streams)
        .map(|i| Sim::stream_create_on(i as u64 % 2).unwrap())
        .collect();
    let run = every_kernel_on::<Sim>(&made, 2, |_, s| Sim::enqueue_work(s, kernel), n);
    for s in made {
        Sim::stream_destroy(s).unwrap();
    }
    run
}

/// On-CPU nanoseconds of each of the library's threads now, by thread id,
/// with the thread's name, from `/proc/self/task/*/schedstat` (nanosecond
/// resolution, where `getrusage` of another thread is not to be had).
fn library_threads_cpu() -> HashMap<u64, (String, u64)> {
    library_threads(|path| {
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        on_cpu_ns(path).map(|ns| (name.trim().to_owned(), ns))
    })
}

/// On-CPU nanoseconds of the thread whose `/proc` folder is `task`, from
/// its `schedstat`.
fn on_cpu_ns(task: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(task.join("schedstat"))
        .ok()
        .and_then(|stat| stat.split_whitespace().next()?.parse().ok())
}

/// `read` of each of the library's threads, by thread id: those whose
/// name starts with `device-events` (the kernel keeps 15 bytes of it).
fn library_threads<T>(read: impl Fn(&std::path::Path) -> Option<T>) -> HashMap<u64, T> {
    let mut threads = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if !name.starts_with("device-events") {
            continue;
        }
        let tid = task.file_name().to_string_lossy().parse().ok();
        if let (Some(tid), Some(value)) = (tid, read(&path)) {
            threads.insert(tid, value);
        }
    }
    threads
}

/// Context switches per window, as `/proc` counts them.
#[derive(Clone, Copy, Debug, Default)]
pub struct Switches {
    /// The thread gave the CPU up (slept, blocked) and was woken again.
    pub voluntary: f64,
    /// The scheduler took the CPU away.
    pub involuntary: f64,
}

/// A thread's context switches so far, voluntary and involuntary, from
/// its `status` file under `/proc`.
fn switches(task: &std::path::Path) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(task.join("status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

/// Context switches of each of the library's threads now, by thread id.
fn library_threads_switches() -> HashMap<u64, (u64, u64)> {
    library_threads(switches)
}

/// The switches from `before` to `after`, per one of `windows` windows.
fn per_window(before: (u64, u64), after: (u64, u64), windows: usize) -> Switches {
    let n = windows.max(1) as f64;
    Switches {
        voluntary: after.0.saturating_sub(before.0) as f64 / n,
        involuntary: after.1.saturating_sub(before.1) as f64 / n,
    }
}

/// [`every_kernel`] on `streams` of any backend, `kernel(i, stream)`
/// queuing the `i`th kernel; `streams[j]` is profiled by the `j % devices`th
/// of `devices` profilers, one per device.
///
/// # Panics
///
/// When a window cannot be chained.
pub fn every_kernel_on<A: device_events_core::Backend>(
    streams: &[A::Stream],
    devices: usize,
    mut kernel: impl FnMut(usize, A::Stream),
    n: usize,
) -> EveryKernel {
    use device_events_conformance::cpu::thread_cpu;
    const BEHIND: usize = 32;
    let devices = devices.max(1);
    let mut profilers: Vec<_> = (0..devices).map(|_| EventProfiler::<A>::new()).collect();
    let mut tokens: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(j, s)| profilers[j % devices].start(*s))
        .collect();
    // A first window read, so that calibration is out of the way.
    for (j, (token, s)) in tokens.iter_mut().zip(streams).enumerate() {
        let (window, next) = profilers[j % devices].split(*s, *token).unwrap();
        *token = next;
        pollster::block_on(window.resolve());
    }
    let mut queued = std::collections::VecDeque::with_capacity(BEHIND + 1);
    let (mut late, mut unread) = (Vec::with_capacity(n), 0);
    let mut read = |window: PlacedWindow<A>, late: &mut Vec<Duration>| {
        let placed = pollster::block_on(window.resolve());
        let now = Instant::now();
        match placed {
            Some(placed) => {
                let end = placed.end;
                late.push(now.saturating_duration_since(end));
            }
            None => unread += 1,
        }
    };
    let library = library_threads_cpu();
    let library_switches = library_threads_switches();
    let reader = std::path::Path::new("/proc/thread-self");
    let reader_switches = switches(reader).unwrap_or_default();
    let (cpu, mine, wall) = (process_cpu(), thread_cpu(), Instant::now());
    for i in 0..n {
        let at = i % streams.len();
        let s = streams[at];
        kernel(i, s);
        let (window, next) = profilers[at % devices].split(s, tokens[at]).unwrap();
        tokens[at] = next;
        queued.push_back(window);
        if queued.len() > BEHIND
            && let Some(window) = queued.pop_front()
        {
            read(window, &mut late);
        }
    }
    while let Some(window) = queued.pop_front() {
        read(window, &mut late);
    }
    let others = (process_cpu() - cpu).saturating_sub(thread_cpu() - mine);
    let reader_switches = per_window(reader_switches, switches(reader).unwrap_or_default(), n);
    let library_after = library_threads_cpu();
    let sum = |counts: &HashMap<u64, (u64, u64)>, of: &HashMap<u64, (u64, u64)>| {
        counts
            .iter()
            .filter(|(tid, _)| of.contains_key(tid))
            .fold((0, 0), |(v, i), (_, (dv, di))| (v + dv, i + di))
    };
    let switches_after = library_threads_switches();
    // The threads there throughout: one that started meanwhile counts
    // from zero, one that left is missing, as for the CPU.
    let library_switches = per_window(
        sum(&library_switches, &switches_after),
        sum(&switches_after, &switches_after),
        n,
    );
    let elapsed = wall.elapsed().as_secs_f64();
    let cpu_share = others.as_secs_f64() / elapsed;
    let spent = |of: &dyn Fn(&str) -> bool| -> u64 {
        library_after
            .iter()
            .filter(|(_, (name, _))| of(name))
            .map(|(tid, (_, now))| now.saturating_sub(library.get(tid).map_or(0, |(_, ns)| *ns)))
            .sum()
    };
    let library_ns = spent(&|_| true);
    // The kernel keeps 15 bytes of a name: `device-events-r`(esolver).
    let resolver_ns = spent(&|name| name.starts_with("device-events-r"));
    let answered = late.len().max(1) as f64;
    let library_threads_left = library
        .keys()
        .filter(|tid| !library_after.contains_key(tid))
        .count();
    for (j, token) in tokens.into_iter().enumerate() {
        let _ = profilers[j % devices].abandon(token);
    }
    drop(profilers);
    late.sort_unstable();
    EveryKernel {
        cpu_share,
        library_cpu_share: library_ns as f64 / 1e9 / elapsed,
        library_cpu_us_per_window: library_ns as f64 / 1e3 / answered,
        resolver_cpu_us_per_window: resolver_ns as f64 / 1e3 / answered,
        library_threads_left,
        library_wakeups_per_window: library_switches,
        reader_wakeups_per_window: reader_switches,
        late,
        unread,
    }
}

/// What one answer costs the OS here, before any of the library's work: a
/// bare thread that sleeps `pace` (a timed condvar wait, as the resolver
/// does between asks) and then wakes another thread blocked on a condvar
/// (as an answer wakes its reader), `passes` times. Its on-CPU time per
/// pass, µs, from the scheduler's statistics: the floor under the
/// resolver's cost per pass.
///
/// # Panics
///
/// When no thread can be started.
pub fn wake_floor(pace: Duration, passes: usize) -> f64 {
    use std::sync::Condvar;
    // Answers so far: the blocked thread leaves once it has seen them all,
    // however many came while it was waking.
    let reader = Arc::new((Mutex::new(0usize), Condvar::new()));
    let woken = Arc::clone(&reader);
    let blocked = std::thread::spawn(move || {
        let (answers, cv) = &*woken;
        let mut seen = answers.lock().unwrap_or_else(PoisonError::into_inner);
        while *seen < passes {
            seen = cv.wait(seen).unwrap_or_else(PoisonError::into_inner);
        }
    });
    let on_cpu = || on_cpu_ns(std::path::Path::new("/proc/thread-self")).unwrap_or(0);
    let sleeper = (Mutex::new(()), Condvar::new());
    let before = on_cpu();
    for _ in 0..passes {
        let asleep = sleeper.0.lock().unwrap_or_else(PoisonError::into_inner);
        drop(sleeper.1.wait_timeout(asleep, pace));
        let (answers, cv) = &*reader;
        *answers.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        cv.notify_one();
    }
    let spent = on_cpu().saturating_sub(before);
    blocked.join().unwrap();
    spent as f64 / 1e3 / passes.max(1) as f64
}
