//! CubeCL's own device events (`cubecl-server` 0.12.0-pre.1's
//! `EventProfiler` and `EventFence`) on the software driver's CUDA ABI,
//! beside ours through `device-events-cubecl`: what each costs the
//! submitting thread, whether reading a window blocks the thread that
//! polls it, and how far each places a window from the driver's truth.

use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use cubecl_common::profile::ProfileDuration;
use cubecl_server::device_events::{EventApi, EventFence, EventProfiler};
use cubecl_server::driver::DriverError;
use cudarc::driver::{result, sys};
use device_events_conformance::soft::SoftDriver;
use device_events_cubecl::{CubeFence, CubeProfiler};
use device_events_cuda::{Cuda, CudaStream};

/// `cubecl-server`'s `EventApi` on the CUDA driver API through cudarc's
/// `result` layer, as `cubecl-cuda` writes it: raw `CUstream`s.
pub struct Upstream;

/// A CUDA event, as `cubecl-cuda` keeps one.
pub struct UpstreamEvent(sys::CUevent);

// SAFETY: a driver handle; the driver API is thread-safe, and the event
// is destroyed once, by its owner (cubecl-server's `Event`).
unsafe impl Send for UpstreamEvent {}
// SAFETY: as for `Send`: only the handle is shared, and the driver
// serialises calls on it.
unsafe impl Sync for UpstreamEvent {}

fn named<T>(op: &'static str, r: Result<T, result::DriverError>) -> Result<T, DriverError> {
    r.map_err(|err| DriverError::new(op, err.0 as u32))
}

// The trait is safe over raw `CUstream`s, as `cubecl-cuda` implements it:
// this is that implementation, for comparison, with its contract.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
impl EventApi for Upstream {
    type Event = UpstreamEvent;
    type Stream = sys::CUstream;
    const BACKEND: &'static str = "cuda (cubecl-server)";

    fn event_create() -> Result<Self::Event, DriverError> {
        named(
            "cuEventCreate",
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
        )
        .map(UpstreamEvent)
    }

    fn event_destroy(event: &mut Self::Event) -> Result<(), DriverError> {
        // SAFETY: made by `event_create`, destroyed once by its owner.
        named("cuEventDestroy", unsafe { result::event::destroy(event.0) })
    }

    fn event_record(event: &Self::Event, stream: Self::Stream) -> Result<(), DriverError> {
        // SAFETY: a live event and stream of the current context.
        named("cuEventRecord", unsafe {
            result::event::record(event.0, stream)
        })
    }

    fn event_wait(event: &Self::Event) -> Result<(), DriverError> {
        // SAFETY: a live event.
        named("cuEventSynchronize", unsafe {
            result::event::synchronize(event.0)
        })
    }

    fn event_elapsed(
        start: &Self::Event,
        end: &Self::Event,
    ) -> Result<cubecl_common::profile::Duration, DriverError> {
        // SAFETY: live events, both reached (the caller's rule).
        let ms = named("cuEventElapsedTime", unsafe {
            result::event::elapsed(start.0, end.0)
        })?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn stream_wait_event(stream: Self::Stream, event: &Self::Event) -> Result<(), DriverError> {
        // SAFETY: a live stream and event.
        named("cuStreamWaitEvent", unsafe {
            result::stream::wait_event(
                stream,
                event.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        })
    }

    fn stream_synchronize(stream: Self::Stream) -> Result<(), DriverError> {
        // SAFETY: a live stream.
        named("cuStreamSynchronize", unsafe {
            result::stream::synchronize(stream)
        })
    }

    fn stream_create_non_blocking() -> Result<Self::Stream, DriverError> {
        named(
            "cuStreamCreate",
            result::stream::create(result::stream::StreamKind::NonBlocking),
        )
    }

    fn stream_destroy(stream: Self::Stream) -> Result<(), DriverError> {
        // SAFETY: made by `stream_create_non_blocking`, destroyed once.
        named("cuStreamDestroy", unsafe {
            result::stream::destroy(stream)
        })
    }
}

/// Both sides on one raw stream of the current context: CubeCL's on the
/// `CUstream`, ours on its admitted twin.
pub struct Sides {
    /// CubeCL's profiler.
    pub upstream: EventProfiler<Upstream>,
    /// Ours.
    pub ours: CubeProfiler<Cuda>,
    /// The stream, raw.
    pub raw: sys::CUstream,
    /// The stream, admitted.
    pub stream: CudaStream,
}

impl Sides {
    /// Both profilers on `raw`, `stream` its admitted twin.
    pub fn new(raw: sys::CUstream, stream: CudaStream) -> Self {
        Self {
            upstream: EventProfiler::default(),
            ours: CubeProfiler::new(),
            raw,
            stream,
        }
    }

    /// CubeCL's window opened and closed.
    pub fn upstream_window(&mut self) -> ProfileDuration {
        let token = self.upstream.start(self.raw).unwrap();
        self.upstream.stop(self.raw, token).unwrap()
    }

    /// Ours opened and closed.
    pub fn our_window(&mut self) -> ProfileDuration {
        let token = self.ours.start(self.stream).unwrap();
        self.ours.stop(self.stream, token).unwrap()
    }

    /// CubeCL's fence made and dropped.
    pub fn upstream_fence(&self) {
        drop(EventFence::<Upstream>::new(self.raw));
    }

    /// Ours.
    pub fn our_fence(&self) {
        drop(CubeFence::<Cuda>::new(self.stream));
    }
}

/// How long the first poll of a window's future takes while the device
/// has `busy` of work left inside it: a future that blocks its thread
/// takes that long, one that asks without waiting returns at once.
pub fn first_poll(duration: ProfileDuration) -> (Duration, bool) {
    let mut future = duration.into_future();
    let mut cx = Context::from_waker(Waker::noop());
    let began = Instant::now();
    let ready = matches!(future.as_mut().poll(&mut cx), Poll::Ready(_));
    (began.elapsed(), ready)
}

/// A window around `work` bytes of memset on `raw`, read by its first
/// poll: (CubeCL's first poll, ours).
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn blocking_reads(sides: &mut Sides, work: usize) -> [(Duration, bool); 2] {
    // SAFETY: a device allocation only these memsets use; leaked (one).
    let ptr = unsafe { result::malloc_sync(work).unwrap() };
    let mut read = |upstream: bool| {
        let token_up = upstream.then(|| sides.upstream.start(sides.raw).unwrap());
        let token_ours = (!upstream).then(|| sides.ours.start(sides.stream).unwrap());
        // SAFETY: `ptr` holds `work` bytes; the stream is live.
        unsafe { result::memset_d8_async(ptr, 0, work, sides.raw).unwrap() };
        let duration = match (token_up, token_ours) {
            (Some(t), _) => sides.upstream.stop(sides.raw, t).unwrap(),
            (_, Some(t)) => sides.ours.stop(sides.stream, t).unwrap(),
            _ => unreachable!(),
        };
        let polled = first_poll(duration);
        // SAFETY: a live stream.
        unsafe { result::stream::synchronize(sides.raw).unwrap() };
        polled
    };
    [read(true), read(false)]
}

/// Each side's placement error against the driver's truth, ns, sorted:
/// `windows` empty windows each, taking turns, every `period`. The
/// driver's clock is set by the caller, before either side's first
/// window: a clock that jumps under an anchor places nothing.
///
/// # Panics
///
/// When the software driver cannot run it.
pub fn placement(
    soft: &SoftDriver,
    sides: &mut Sides,
    windows: usize,
    period: Duration,
) -> [Vec<u64>; 2] {
    let epoch = soft.host_instant(0);
    let reference = Instant::now();
    let error = |event: usize, at: Instant| {
        let truth = epoch + Duration::from_nanos(soft.event_truth_ns(event).unwrap_or(0));
        at.saturating_duration_since(truth)
            .max(truth.saturating_duration_since(at))
            .as_nanos() as u64
    };
    let mut errors = [Vec::new(), Vec::new()];
    for _ in 0..windows {
        for (side, errors) in errors.iter_mut().enumerate() {
            std::thread::sleep(period);
            let (duration, start, end) = if side == 0 {
                let token = sides.upstream.start(sides.raw).unwrap();
                let start = soft.last_recorded_event();
                let duration = sides.upstream.stop(sides.raw, token).unwrap();
                (duration, start, soft.last_recorded_event())
            } else {
                let token = sides.ours.start(sides.stream).unwrap();
                let start = soft.last_recorded_event();
                let duration = sides.ours.stop(sides.stream, token).unwrap();
                (duration, start, soft.last_recorded_event())
            };
            let ticks = pollster::block_on(duration.resolve()).expect("a window read");
            errors.push(error(
                start,
                reference + ticks.start_duration_since(reference),
            ));
            errors.push(error(end, reference + ticks.end_duration_since(reference)));
        }
    }
    for errors in &mut errors {
        errors.sort_unstable();
    }
    errors
}
