//! What a GPU lease measures, around the spin kernel (`spin.rs`): device
//! work of a known length that stamps its own start and end. Each measure
//! runs the same on the machine's CUDA driver and on the software driver,
//! where `run.sh --soft` rehearses it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cubecl_common::profile::ProfileTicks;
use cudarc::driver::{result, sys};
use device_events_core::backend::ThreadApi;
use device_events_core::{AnchorConfig, EventApi, EventProfiler, ProfilerConfig};
use device_events_cuda::{Cuda, CudaStream};
use serde_json::{Value, json};

use crate::spin::{Spin, Stamps};

/// The driver's version, and the file its library was loaded from.
pub fn driver() -> Value {
    result::init().ok();
    let mut version = 0;
    // SAFETY: a writable output.
    unsafe { sys::cuDriverGetVersion(&mut version) };
    let library = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| {
            maps.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|path| path.contains("libcuda") || path.contains("soft_driver"))
                .map(str::to_owned)
        });
    json!({ "version": version, "library": library })
}

/// Where the host's `CLOCK_REALTIME` stood at an `Instant`: the tightest
/// of a few back-to-back reads, so that an `Instant` maps to nanoseconds
/// since the Unix epoch, which `%globaltimer` is observed to track (NVIDIA
/// documents only a global nanosecond timer): the spreads below do not
/// depend on it, the offset checks it.
struct Realtime {
    base: Instant,
    epoch_ns: i128,
}

impl Realtime {
    fn now() -> Self {
        let mut best = (Duration::MAX, Instant::now(), 0);
        for _ in 0..16 {
            let before = Instant::now();
            let real = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let after = Instant::now();
            if after - before < best.0 {
                best = (
                    after - before,
                    before + (after - before) / 2,
                    real.as_nanos() as i128,
                );
            }
        }
        Self {
            base: best.1,
            epoch_ns: best.2,
        }
    }

    fn at(&self, ticks: &ProfileTicks, end: bool) -> i128 {
        let since = if end {
            ticks.end_duration_since(self.base)
        } else {
            ticks.start_duration_since(self.base)
        };
        self.epoch_ns + since.as_nanos() as i128
    }
}

/// Signed nanoseconds, summarized: least, greatest, the median, and the spread about it
/// (the median and 99th percentile of the distance from the median).
fn spread(mut v: Vec<i128>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_unstable();
    let median = v[v.len() / 2];
    let mut off: Vec<i128> = v.iter().map(|x| (x - median).abs()).collect();
    off.sort_unstable();
    let at = |q: f64| off[((off.len() - 1) as f64 * q).round() as usize];
    json!({
        "n": v.len(),
        "min_ns": v[0],
        "max_ns": v[v.len() - 1],
        "median_ns": median,
        "spread_median_ns": at(0.5),
        "spread_p99_ns": at(0.99),
    })
}

/// One profiler side around spin kernels.
#[derive(Clone, Copy)]
pub enum Side {
    /// Ours with this configuration.
    Ours(&'static str, fn() -> ProfilerConfig),
    /// `cubecl-server`'s own profiler on the raw stream.
    Upstream,
}

/// The sides each kernel length is timed by: the fit and the gate on and
/// off, and CubeCL's own.
pub const SIDES: [Side; 4] = [
    Side::Ours("fit+gate", ProfilerConfig::default),
    Side::Ours("no fit", || ProfilerConfig {
        anchor: AnchorConfig {
            drift_correction: false,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    }),
    Side::Ours("no gate", || ProfilerConfig {
        anchor: AnchorConfig {
            gated_anchor: false,
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    }),
    Side::Upstream,
];

impl Side {
    /// Its name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Side::Ours(name, _) => name,
            Side::Upstream => "cubecl-server",
        }
    }
}

/// `windows` windows around spin kernels of `ns` each on `stream` (raw
/// `raw`), by `side`: each window's duration against the kernel's own
/// stamps, and its placement on the host clock against the stamps (as
/// `CLOCK_REALTIME`): the spread of the differences, which does not depend
/// on the two clocks' offset, and their median, which is that offset plus
/// the launch gaps.
///
/// # Errors
///
/// What the driver refused (the kernel, a window, the stamps), in words.
pub fn spin_windows(
    spin: &Spin,
    stream: CudaStream,
    raw: sys::CUstream,
    side: Side,
    ns: u64,
    windows: usize,
) -> Result<Value, String> {
    let stamps = Stamps::new(windows).map_err(|e| format!("stamps: {e}"))?;
    let clock = Realtime::now();
    let (mut length, mut start, mut end, mut unread) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let mut ours = match side {
        Side::Ours(_, config) => Some(EventProfiler::<Cuda>::with_config(config())),
        Side::Upstream => None,
    };
    let mut upstream =
        cubecl_server::device_events::EventProfiler::<crate::cubecl::Upstream>::default();
    // A first window, so that calibration is out of the way.
    if let Some(p) = ours.as_mut() {
        let token = p.start(stream);
        crate::resolve(
            p.stop(stream, token)
                .map_err(|e| format!("a window: {e}"))?,
        );
    }
    let launch = |at| {
        spin.launch(stream, ns, &stamps, at)
            .map_err(|e| format!("the spin kernel: {e}"))
    };
    for at in 0..windows {
        let ticks = match ours.as_mut() {
            Some(p) => {
                let token = p.start(stream);
                launch(at)?;
                crate::resolve(
                    p.stop(stream, token)
                        .map_err(|e| format!("a window: {e}"))?,
                )
                .map(|placed| ProfileTicks::from_start_end(placed.start, placed.end))
            }
            None => {
                let token = upstream
                    .start(raw)
                    .map_err(|e| format!("cubecl-server's window: {e:?}"))?;
                launch(at)?;
                crate::resolve(
                    upstream
                        .stop(raw, token)
                        .map_err(|e| format!("cubecl-server's window: {e:?}"))?
                        .into_future(),
                )
            }
        };
        Cuda::stream_synchronize(stream).map_err(|e| e.to_string())?;
        match (ticks, stamps.read(at)) {
            (Some(ticks), Some((s, e))) => {
                length.push(ticks.duration().as_nanos() as i128 - i128::from(e - s));
                start.push(clock.at(&ticks, false) - i128::from(s));
                end.push(clock.at(&ticks, true) - i128::from(e));
            }
            _ => unread += 1,
        }
    }
    Ok(json!({
        "side": side.name(),
        "kernel_ns": ns,
        "unread": unread,
        "duration_minus_kernel": spread(length),
        "start_minus_kernel": spread(start),
        "end_minus_kernel": spread(end),
    }))
}

/// A fresh non-blocking stream of the current context, its raw handle
/// beside it.
///
/// # Errors
///
/// What the driver refused, in words.
pub fn stream() -> Result<(CudaStream, sys::CUstream), String> {
    let s = Cuda::stream_create_non_blocking().map_err(|e| e.to_string())?;
    let raw = s.with_raw(|raw| raw).map_err(|e| e.to_string())?;
    Ok((s, raw))
}

/// The user's kernels on a hardware queue the anchor's stream shares
/// (`CUDA_DEVICE_MAX_CONNECTIONS=1`): `kernels` spin kernels of 10 µs back
/// to back on one stream, first alone, then while `calibrations` anchors
/// are taken on another stream; the gaps between one kernel's end and the
/// next one's start, by their stamps, in each phase.
///
/// # Errors
///
/// What the driver refused (a stream, the stamps, the kernel), in words.
pub fn gate(spin: &Spin, kernels: usize, calibrations: usize) -> Result<Value, String> {
    let (user, _) = stream()?;
    let (anchor, _) = stream()?;
    let phase = |calibrate: bool| -> Result<Value, String> {
        let stamps = Stamps::new(kernels).map_err(|e| format!("stamps: {e}"))?;
        let (calibrating, taken) = (AtomicBool::new(calibrate), AtomicUsize::new(0));
        let mut launched = 0;
        let mut refused = None;
        std::thread::scope(|scope| {
            if calibrate {
                scope.spawn(|| {
                    let bound = Cuda::in_context_of(anchor, || {
                        for _ in 0..calibrations {
                            // A new profiler's first window calibrates.
                            let mut profiler = EventProfiler::<Cuda>::new();
                            let token = profiler.start(anchor);
                            let _ = profiler.abandon(token);
                            // One that has not ended in 5 s ends the
                            // phase: the device is stuck, and the count
                            // says so.
                            if !device_events_core::process::wait_for_calibrations(
                                Duration::from_secs(5),
                            ) {
                                break;
                            }
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    if let Err(e) = bound {
                        eprintln!("the gate's calibrations: {e}");
                    }
                    calibrating.store(false, Ordering::Release);
                });
            }
            // Kept about 8 ahead, so that the queue never runs dry of the
            // user's work; alone, a fixed count, beside, until the
            // calibrations are done.
            while launched < kernels
                && (launched < kernels / 4 || !calibrate || calibrating.load(Ordering::Acquire))
            {
                if let Err(e) = spin.launch(user, 10_000, &stamps, launched) {
                    refused = Some(format!("the spin kernel: {e}"));
                    break;
                }
                if launched >= 8 {
                    // A kernel that never ends (a faulted context) ends the
                    // phase, not the run.
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while stamps.read(launched - 8).is_none() && Instant::now() < deadline {
                        std::thread::yield_now();
                    }
                    if stamps.read(launched - 8).is_none() {
                        break;
                    }
                }
                launched += 1;
            }
            if let Err(e) = Cuda::stream_synchronize(user) {
                refused.get_or_insert(e.to_string());
            }
        });
        if let Some(refused) = refused {
            return Err(refused);
        }
        let mut gaps: Vec<i128> = (1..launched)
            .filter_map(|at| Some((stamps.read(at - 1)?, stamps.read(at)?)))
            .map(|((_, end), (start, _))| i128::from(start) - i128::from(end))
            .collect();
        gaps.sort_unstable();
        let at = |q: f64| {
            gaps.get(((gaps.len().max(1) - 1) as f64 * q).round() as usize)
                .copied()
        };
        Ok(json!({
            "kernels": launched,
            "calibrations": taken.load(Ordering::Relaxed),
            "gap_median_ns": at(0.5),
            "gap_p99_ns": at(0.99),
            "gap_max_ns": at(1.0),
        }))
    };
    let alone = phase(false);
    let beside = alone.is_ok().then(|| phase(true));
    let destroyed = [Cuda::stream_destroy(user), Cuda::stream_destroy(anchor)];
    let (alone, beside) = (alone?, beside.unwrap_or(Ok(Value::Null))?);
    for destroyed in destroyed {
        destroyed.map_err(|e| e.to_string())?;
    }
    Ok(json!({ "alone": alone, "beside_calibrations": beside }))
}

/// What the driver answers to event calls from a thread with no context
/// current, on an event and a stream of this thread's context: whether
/// the library's context binding around each call (one
/// `cuCtxGetCurrent` per call) is needed by the driver, or only by the
/// guarantee the library states. Each call's status, 0 for success.
///
/// # Errors
///
/// What the driver refused (the event, the stream), in words.
pub fn unbound_calls() -> Result<Value, String> {
    let (s, raw) = stream()?;
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
        .map_err(|e| format!("cuEventCreate: {e}"))?;
    let (event_bits, raw_bits) = (event as usize, raw as usize);
    let statuses = std::thread::spawn(move || {
        let (event, raw) = (event_bits as sys::CUevent, raw_bits as sys::CUstream);
        // SAFETY: live handles of the spawning thread's context, which
        // outlive this thread (joined before they are destroyed); this
        // thread has no context current, which is the question.
        unsafe {
            [
                ("cuEventRecord", sys::cuEventRecord(event, raw)),
                ("cuEventSynchronize", sys::cuEventSynchronize(event)),
                ("cuEventQuery", sys::cuEventQuery(event)),
                ("cuStreamSynchronize", sys::cuStreamSynchronize(raw)),
            ]
            .map(|(name, status)| (name, status as i32))
        }
    })
    .join()
    .map_err(|_| "the unbound thread panicked".to_owned())?;
    // SAFETY: made above, destroyed once, no call in flight.
    let _ = unsafe { result::event::destroy(event) };
    Cuda::stream_destroy(s).map_err(|e| e.to_string())?;
    Ok(statuses
        .into_iter()
        .map(|(name, status)| (name.to_owned(), json!(status)))
        .collect::<serde_json::Map<_, _>>()
        .into())
}

/// What [`HANG_VAR`](crate::section::HANG_VAR) asks of a section: an hour
/// of the spin kernel on a fresh stream, then a wait for it. Returns only
/// if the driver refuses the kernel or the wait.
///
/// # Errors
///
/// What the driver refused, in words.
pub fn hang(spin: &Spin) -> Result<Value, String> {
    let (s, _) = stream()?;
    let stamps = Stamps::new(1).map_err(|e| format!("stamps: {e}"))?;
    eprintln!("hanging on purpose ({})", crate::section::HANG_VAR);
    spin.launch(s, 3_600_000_000_000, &stamps, 0)
        .map_err(|e| format!("the spin kernel: {e}"))?;
    Cuda::stream_synchronize(s).map_err(|e| e.to_string())?;
    Err("an hour passed".to_owned())
}
