//! The operations `cargo xtask bench` measures, each written once and timed,
//! counted and traced by the harnesses around it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod answer;
pub mod cubecl;
pub mod fence_cost;
pub mod gpu;
pub mod lavapipe;
pub mod placement;
pub mod pocl;
pub mod preflight;
pub mod section;
pub mod server;
pub mod spin;
pub mod wait;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use cudarc::driver::{CudaContext, CudaStream as CudarcStream, sys};
use std::time::Duration;

use cubecl_common::profile::ProfileDuration;
use device_events_core::PlacedWindow;
use device_events_core::{DriverError, EventApi, EventFence, EventProfiler, FencePool};
use device_events_cuda::{Cuda, CudaStream};

/// A backend whose calls do nothing: what is left is the core's own cost.
#[derive(Debug)]
pub struct Null;

/// [`Null`]'s event.
#[derive(Debug)]
pub struct NullEvent;

/// [`Null`]'s stream.
#[derive(Clone, Copy, Debug)]
pub struct NullStream;

impl device_events_core::backend::AnchorApi for Null {}
impl device_events_core::backend::ThreadApi for Null {}
impl device_events_core::backend::FenceApi for Null {}

impl EventApi for Null {
    type Event = NullEvent;
    type Stream = NullStream;
    const BACKEND: &'static str = "null";

    fn event_create() -> Result<NullEvent, DriverError> {
        Ok(NullEvent)
    }
    fn event_destroy(_: &mut NullEvent) -> Result<(), DriverError> {
        Ok(())
    }
    fn event_record(_: &NullEvent, _: NullStream) -> Result<(), DriverError> {
        Ok(())
    }
    fn event_wait(_: &NullEvent) -> Result<(), DriverError> {
        Ok(())
    }
    fn event_elapsed(_: &NullEvent, _: &NullEvent) -> Result<Duration, DriverError> {
        Ok(Duration::ZERO)
    }
    fn stream_wait_event(_: NullStream, _: &NullEvent) -> Result<(), DriverError> {
        Ok(())
    }
    fn stream_synchronize(_: NullStream) -> Result<(), DriverError> {
        Ok(())
    }
    fn stream_create_non_blocking() -> Result<NullStream, DriverError> {
        Ok(NullStream)
    }
    fn stream_destroy(_: NullStream) -> Result<(), DriverError> {
        Ok(())
    }
}

/// Resolve a window's reading. A window the device already passed reads on
/// its first poll, for which a no-op waker serves and costs no allocation;
/// one not yet reached is waited for with the thread parked, as an
/// executor would.
pub fn resolve<F: Future + Unpin>(mut future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut future).poll(&mut cx) {
        Poll::Ready(ticks) => ticks,
        Poll::Pending => pollster::block_on(future),
    }
}

/// A profiler in its steady state: its anchor fresh for `anchor_max_age`,
/// as once a device's rate is known, so that a window costs what it costs
/// for the rest of a session. The null backend's readings are all zero,
/// which never give a rate, and under callgrind the anchors a rate needs
/// come too slowly: with the default settings either would stay in the
/// first milliseconds' state, refreshing every 5 ms.
pub fn steady() -> device_events_core::ProfilerConfig {
    device_events_core::ProfilerConfig {
        anchor: device_events_core::AnchorConfig {
            drift_correction: false,
            ..device_events_core::AnchorConfig::default()
        },
        ..device_events_core::ProfilerConfig::default()
    }
}

/// A fence lifecycle: create (record), host wait, drop (release).
pub fn fence<A: device_events_core::backend::FenceApi>(stream: A::Stream) {
    let fence = EventFence::<A>::new(stream);
    fence.wait_sync().unwrap();
}

/// The same with a pooled event.
pub fn pooled_fence<A: device_events_core::backend::FenceApi>(
    pool: &FencePool<A>,
    stream: A::Stream,
) {
    pool.fence(stream).wait_sync().unwrap();
}

/// A profiling window: start, stop, resolve.
pub fn window<A: device_events_core::backend::AnchorApi>(
    profiler: &mut EventProfiler<A>,
    stream: A::Stream,
) {
    let token = profiler.start(stream);
    let timing = profiler.stop(stream, token).unwrap();
    resolve(timing).unwrap();
}

/// The CUDA side of the comparison: a context and a stream of cudarc's,
/// the same stream as this crate sees it, and the pools and profiler.
pub struct CudaPair {
    /// cudarc's context.
    pub ctx: Arc<CudaContext>,
    /// cudarc's stream.
    pub stream: Arc<CudarcStream>,
    /// The same stream, for `Cuda`.
    pub ours: CudaStream,
    /// A fence pool for `Cuda`.
    pub pool: FencePool<Cuda>,
    /// A profiler for `Cuda`.
    pub profiler: EventProfiler<Cuda>,
    /// CubeCL's own profiler (`cubecl-server`), on the raw stream.
    pub upstream: cubecl_server::device_events::EventProfiler<crate::cubecl::Upstream>,
    /// Ours, as a CubeCL server uses it (`device-events-cubecl`).
    pub cube: device_events_cubecl::CubeProfiler<Cuda>,
    /// Device memory for work of a known length inside a window.
    scratch: sys::CUdeviceptr,
    /// The spin kernel, where [`hold_with_the_spin_kernel`] asked for it:
    /// a memset's length is known only on the software driver.
    spin: Option<(spin::Spin, spin::Stamps)>,
}

static SPIN_HOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make each [`CudaPair`] made from now keep its device busy with the spin
/// kernel, as on a GPU, rather than a memset.
pub fn hold_with_the_spin_kernel() {
    SPIN_HOLD.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The bytes [`CudaPair`]'s work inside a window sets: about 6.5 µs at the
/// software driver's bandwidth, so a window's span never reads zero, and a
/// batch of 200 windows keeps the device busy for only about a millisecond.
const WORK: usize = 1 << 16;

/// The device memory [`CudaPair`] holds, all of it set by
/// [`hold`](CudaPair::hold): about 1.7 ms at the software driver's
/// bandwidth, longer than any submit batch.
const SCRATCH: usize = 16 << 20;

impl Drop for CudaPair {
    fn drop(&mut self) {
        // Forget the admitted stream before cudarc's is destroyed.
        let _ = Cuda::stream_destroy(self.ours);
        let _ = self.stream.synchronize();
        self.spin = None;
        // SAFETY: allocated in `new`, freed once, the stream past its use.
        let _ = unsafe { cudarc::driver::result::free_sync(self.scratch) };
    }
}

impl CudaPair {
    /// Device 0, bound to this thread.
    pub fn new() -> Self {
        let ctx = CudaContext::new(0).unwrap();
        let stream = ctx.new_stream().unwrap();
        // SAFETY: cudarc's stream of `ctx` (a primary context), kept alive
        // by `self.stream` until `Drop` forgets it first.
        let ours = unsafe { Cuda::stream_from_raw(stream.cu_stream(), ctx.cu_ctx()) }.unwrap();
        Self {
            ctx,
            stream,
            ours,
            pool: FencePool::new(),
            profiler: EventProfiler::with_config(steady()),
            upstream: cubecl_server::device_events::EventProfiler::default(),
            cube: device_events_cubecl::CubeProfiler::with_config(steady()),
            // SAFETY: a plain device allocation, `ctx` current.
            scratch: unsafe { cudarc::driver::result::malloc_sync(SCRATCH) }.unwrap(),
            spin: SPIN_HOLD
                .load(std::sync::atomic::Ordering::Relaxed)
                .then(|| (spin::Spin::load().unwrap(), spin::Stamps::new(1).unwrap())),
        }
    }

    /// An event made and recorded on the stream, as a cudarc user does.
    fn cudarc_recorded(&self) -> cudarc::driver::CudaEvent {
        let event = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        event.record(&self.stream).unwrap();
        event
    }
}

/// A window a case closed: CubeCL's boxed duration (CubeCL's own
/// profiler's, or ours as a CubeCL server returns it), or ours as the
/// core hands it out.
pub enum Closed {
    /// A `ProfileDuration`.
    Cube(ProfileDuration),
    /// The core's window.
    Ours(PlacedWindow<Cuda>),
}

impl Closed {
    /// Read it: whether it was measured.
    pub fn read(self) -> bool {
        match self {
            Self::Cube(duration) => resolve(duration.into_future()).is_some(),
            Self::Ours(window) => resolve(window).is_some(),
        }
    }
}

/// What a submit-only case left for its completion: windows to read,
/// cudarc event pairs to time.
#[derive(Default)]
pub struct Pending {
    /// Our windows, stopped.
    pub ours: Vec<Closed>,
    /// cudarc's event pairs, recorded.
    pub cudarc: Vec<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
    /// cudarc's events of a chain: each window from one to the next.
    pub cudarc_chain: Vec<cudarc::driver::CudaEvent>,
    /// Our chain's open window.
    pub chain: Option<device_events_core::profile::ProfileToken>,
    /// Our fences, plain or pooled, made and not waited on.
    pub fences: Vec<EventFence<Cuda>>,
    /// cudarc's fence events, recorded and not waited on.
    pub cudarc_fences: Vec<cudarc::driver::CudaEvent>,
}

impl Pending {
    /// Complete every case: read our windows, time cudarc's pairs (its
    /// `elapsed_ms` waits for the end first).
    pub fn complete(&mut self) {
        for window in self.ours.drain(..) {
            assert!(window.read(), "a window read");
        }
        for fence in self.fences.drain(..) {
            fence.wait_sync().unwrap();
        }
        for event in self.cudarc_fences.drain(..) {
            event.synchronize().unwrap();
        }
        for (start, end) in self.cudarc.drain(..) {
            start.elapsed_ms(&end).unwrap();
        }
        for pair in self.cudarc_chain.windows(2) {
            pair[0].elapsed_ms(&pair[1]).unwrap();
        }
        self.cudarc_chain.clear();
    }
}

/// The submitting thread's part of each case: what a server pays where it
/// launches work. A fence is made (recorded) and dropped without a wait; a
/// window is opened and closed, its reading left to [`Pending::complete`].
impl CudaPair {
    /// `EventFence::new` and drop.
    pub fn our_fence_submit(&self) {
        drop(EventFence::<Cuda>::new(self.ours));
    }

    /// A pooled fence, made and dropped.
    pub fn our_pooled_fence_submit(&self) {
        drop(self.pool.fence(self.ours));
    }

    /// cudarc's event made, recorded and dropped.
    pub fn cudarc_fence_submit(&self) {
        drop(self.cudarc_recorded());
    }

    /// CubeCL's own fence (`cubecl-server`) on the raw stream, made and
    /// dropped.
    pub fn upstream_fence_submit(&self) {
        drop(cubecl_server::device_events::EventFence::<
            crate::cubecl::Upstream,
        >::new(self.stream.cu_stream()));
    }

    /// Ours as a CubeCL server uses it, made and dropped.
    pub fn cube_fence_submit(&self) {
        drop(device_events_cubecl::CubeFence::<Cuda>::new(self.ours));
    }

    /// A window of CubeCL's own profiler, opened and closed.
    pub fn upstream_window_submit(&mut self, pending: &mut Pending) {
        let raw = self.stream.cu_stream();
        let token = self.upstream.start(raw).unwrap();
        pending
            .ours
            .push(Closed::Cube(self.upstream.stop(raw, token).unwrap()));
    }

    /// A window of ours as a CubeCL server uses it, opened and closed.
    pub fn cube_window_submit(&mut self, pending: &mut Pending) {
        let token = self.cube.start(self.ours).unwrap();
        pending
            .ours
            .push(Closed::Cube(self.cube.stop(self.ours, token).unwrap()));
    }

    /// A window opened and closed.
    pub fn our_window_submit(&mut self, pending: &mut Pending) {
        let token = self.profiler.start(self.ours);
        pending
            .ours
            .push(Closed::Ours(self.profiler.stop(self.ours, token).unwrap()));
    }

    /// The next window of a chain: one record closes a window and opens
    /// the next, as a server timing every kernel does.
    pub fn our_chain_submit(&mut self, pending: &mut Pending) {
        let open = match pending.chain.take() {
            Some(open) => open,
            None => self.profiler.start(self.ours),
        };
        let (closed, next) = self.profiler.split(self.ours, open).unwrap();
        pending.ours.push(Closed::Ours(closed));
        pending.chain = Some(next);
    }

    /// The same chain as a cudarc user writes it: one event per kernel,
    /// each window from one event to the next.
    pub fn cudarc_chain_submit(&self, pending: &mut Pending) {
        pending.cudarc_chain.push(self.cudarc_recorded());
    }

    /// cudarc's two events made and recorded.
    pub fn cudarc_window_submit(&self, pending: &mut Pending) {
        let (start, end) = (self.cudarc_recorded(), self.cudarc_recorded());
        pending.cudarc.push((start, end));
    }
}

/// The completing side of each case, with the device already past the
/// work: a fence waited on and dropped, a window read. The device's own
/// timing is then out of the count, which makes the same calls every time.
impl CudaPair {
    /// Wait for everything queued on the stream; not part of any case.
    pub fn drain(&self) {
        self.stream.synchronize().unwrap();
    }

    /// One of our fences made by a submit case, waited on and dropped.
    pub fn our_fence_complete(pending: &mut Pending) {
        if let Some(fence) = pending.fences.pop() {
            fence.wait_sync().unwrap();
        }
    }

    /// One of cudarc's fence events, waited on and dropped.
    pub fn cudarc_fence_complete(pending: &mut Pending) {
        if let Some(event) = pending.cudarc_fences.pop() {
            event.synchronize().unwrap();
        }
    }

    /// One of our windows, read.
    pub fn our_window_complete(pending: &mut Pending) {
        if let Some(window) = pending.ours.pop() {
            assert!(window.read(), "a window read");
        }
    }

    /// One of cudarc's event pairs, timed and dropped.
    pub fn cudarc_window_complete(pending: &mut Pending) {
        if let Some((start, end)) = pending.cudarc.pop() {
            start.elapsed_ms(&end).unwrap();
        }
    }

    /// A fence made for [`our_fence_complete`](Self::our_fence_complete).
    pub fn our_fence_kept(&self, pending: &mut Pending) {
        pending.fences.push(EventFence::<Cuda>::new(self.ours));
    }

    /// A pooled fence made for the same.
    pub fn our_pooled_fence_kept(&self, pending: &mut Pending) {
        pending.fences.push(self.pool.fence(self.ours));
    }

    /// Work of a known length on the stream.
    fn busy(&self) {
        self.memset(WORK);
    }

    /// Keep the device busy past a submit batch, as a server submits while
    /// its device works. The software driver's stream thread then sleeps
    /// through the batch; with the device idle it woke for every record and
    /// took its lock against the submitting thread, so a submit row's wall
    /// ratio depended on how the two threads met (0.56 in one run, 0.69 in
    /// another).
    pub fn hold(&self) {
        match &self.spin {
            // Past any submit batch on a GPU too.
            Some((spin, stamps)) => spin.launch(self.ours, 5_000_000, stamps, 0).unwrap(),
            None => self.memset(SCRATCH),
        }
    }

    fn memset(&self, bytes: usize) {
        // SAFETY: `scratch` is this pair's allocation, `SCRATCH` bytes, at
        // least `bytes`; the stream is live.
        unsafe {
            cudarc::driver::result::memset_d8_async(self.scratch, 0, bytes, self.stream.cu_stream())
        }
        .unwrap();
    }

    /// A window around work, for [`our_window_complete`](Self::our_window_complete).
    pub fn our_window_kept(&mut self, pending: &mut Pending) {
        let token = self.profiler.start(self.ours);
        self.busy();
        pending
            .ours
            .push(Closed::Ours(self.profiler.stop(self.ours, token).unwrap()));
    }

    /// cudarc's event pair around the same work, for
    /// [`cudarc_window_complete`](Self::cudarc_window_complete).
    pub fn cudarc_window_kept(&self, pending: &mut Pending) {
        let start = self.cudarc_recorded();
        self.busy();
        pending.cudarc.push((start, self.cudarc_recorded()));
    }

    /// A cudarc event made for [`cudarc_fence_complete`](Self::cudarc_fence_complete).
    pub fn cudarc_fence_kept(&self, pending: &mut Pending) {
        pending.cudarc_fences.push(self.cudarc_recorded());
    }
}

impl Default for CudaPair {
    fn default() -> Self {
        Self::new()
    }
}

/// `bytes` of memset on `stream` at the software driver's bandwidth: work
/// of a known length.
///
/// # Panics
///
/// When the driver refuses the allocation or the memset.
pub fn work(stream: CudaStream, bytes: usize) {
    // SAFETY: a device allocation only this memset uses; the software
    // driver's allocations cost no host memory. Leaked: a few per run.
    unsafe {
        let ptr = cudarc::driver::result::malloc_sync(bytes).unwrap();
        stream
            .with_raw(|raw| cudarc::driver::result::memset_d8_async(ptr, 0, bytes, raw).unwrap())
            .unwrap();
    }
}
