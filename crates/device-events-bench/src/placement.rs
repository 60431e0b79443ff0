//! Placement sessions: windows placed on the host clock, each end measured
//! against a driver's own truth, for several profiler settings taking turns
//! in one session so that each meets the same machine.

use std::time::{Duration, Instant};

use device_events_conformance::soft::SoftDriver;
use device_events_core::{Backend, EventProfiler, ProfilerConfig};
use device_events_cuda::{Cuda, CudaStream};

/// What a session measured: errors in ns, sorted, of both ends of every
/// window, and how many ends lay outside the window's stated bound.
#[derive(Debug, Default)]
pub struct Errors {
    /// Windows placed.
    pub windows: usize,
    /// |placed − truth| of each start and end, ns, sorted.
    pub ns: Vec<u64>,
    /// Ends further from the truth than the window's stated bound.
    pub outside_bound: usize,
    /// The bound stated for each end, ns, sorted.
    pub bounds_ns: Vec<u64>,
}

impl Errors {
    /// The `q`-quantile, in µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let i = ((self.ns.len() as f64 - 1.0) * q).round() as usize;
        self.ns.get(i).copied().unwrap_or(u64::MAX) as f64 / 1e3
    }

    /// The median bound stated, in µs: how tight the promise is.
    pub fn bound_median_us(&self) -> f64 {
        let i = self.bounds_ns.len().saturating_sub(1) / 2;
        self.bounds_ns.get(i).copied().unwrap_or(u64::MAX) as f64 / 1e3
    }

    /// One line: windows, median, p99, worst, the bound's median, ends
    /// outside their bound.
    pub fn summary(&self) -> String {
        format!(
            "{} windows, median {:.2} µs, p99 {:.2} µs, worst {:.2} µs, bound median {:.2} µs, \
             {} ends outside their bound",
            self.windows,
            self.quantile_us(0.5),
            self.quantile_us(0.99),
            self.quantile_us(1.0),
            self.bound_median_us(),
            self.outside_bound
        )
    }

    /// Count one end placed `error_ns` from the truth under `bound`; the
    /// truth's own clock pairing is good to `slack_ns`.
    pub fn add(&mut self, error_ns: u64, bound: Duration, slack_ns: u64) {
        if error_ns > bound.as_nanos() as u64 + slack_ns {
            self.outside_bound += 1;
        }
        self.ns.push(error_ns);
        self.bounds_ns.push(bound.as_nanos() as u64);
    }

    /// Sort, once the session is over.
    pub fn finish(mut self) -> Self {
        self.ns.sort_unstable();
        self.bounds_ns.sort_unstable();
        self
    }
}

/// Windows on `stream` for `seconds`, one profiler per entry of `configs`
/// taking turns (each round in another order, so that no profiler always
/// follows the same one), each profiler a window about every `period`.
/// `marker()` names the driver's record just made; `error_ns(marker, at)`
/// is how far `at`, where that record was placed, lies from the driver's
/// truth. An end further than its window's bound plus `slack_ns` (the
/// truth's own clock pairing) counts as outside it.
///
/// # Panics
///
/// When a window cannot be read.
pub fn take_turns<A: Backend, M: Copy>(
    stream: A::Stream,
    seconds: u64,
    period: Duration,
    configs: &[ProfilerConfig],
    marker: impl Fn() -> M,
    error_ns: impl Fn(M, Instant) -> u64,
    slack_ns: u64,
) -> Vec<Errors> {
    let mut profilers: Vec<_> = configs
        .iter()
        .map(|config| EventProfiler::<A>::with_config(*config))
        .collect();
    let mut errors: Vec<Errors> = configs.iter().map(|_| Errors::default()).collect();
    let gap = period / profilers.len().max(1) as u32;
    let session = Instant::now();
    let mut round = 0usize;
    while session.elapsed() < Duration::from_secs(seconds) {
        round += 1;
        for k in 0..profilers.len() {
            let i = (k + round) % profilers.len();
            std::thread::sleep(gap);
            let profiler = &mut profilers[i];
            let token = profiler.start(stream);
            let start = marker();
            let window = profiler.stop(stream, token).expect("a window");
            let end = marker();
            let placed = pollster::block_on(window.resolve()).expect("a window read");
            for (marker, at) in [(start, placed.start), (end, placed.end)] {
                errors[i].add(error_ns(marker, at), placed.uncertainty, slack_ns);
            }
            errors[i].windows += 1;
        }
    }
    errors.into_iter().map(Errors::finish).collect()
}

/// Place windows for `seconds` on the software driver's CUDA device 0 (its
/// clock offset and drifting 100 ppm, its default launch latency), one
/// profiler per entry of `configs` taking turns on `stream`, each end
/// against the driver's ground-truth stamp. With `blocking`, events wait
/// by sleeping (`CU_EVENT_BLOCKING_SYNC`).
///
/// # Panics
///
/// When a window cannot be read.
pub fn soft(
    soft: &SoftDriver,
    stream: CudaStream,
    seconds: u64,
    blocking: bool,
    configs: &[ProfilerConfig],
) -> Vec<Errors> {
    Cuda::set_blocking_sync(blocking);
    soft.set_clock(3_700_000_000_123, 100.0);
    let epoch = soft.host_instant(0);
    let errors = take_turns::<Cuda, usize>(
        stream,
        seconds,
        Duration::from_millis(3),
        configs,
        || soft.last_recorded_event(),
        |event, at| {
            let truth = epoch + Duration::from_nanos(soft.event_truth_ns(event).unwrap_or(0));
            let error = at
                .saturating_duration_since(truth)
                .max(truth.saturating_duration_since(at));
            error.as_nanos() as u64
        },
        1_000,
    );
    soft.set_clock(1_000_000_000_000, 0.0);
    Cuda::set_blocking_sync(false);
    errors
}
