//! The operations `cargo xtask bench` measures, each written once and timed,
//! counted and traced by the harnesses around it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod answer;
pub mod placement;
pub mod pocl;
pub mod server;
pub mod wait;

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use cudarc::driver::{CudaContext, CudaStream as CudarcStream, sys};
use device_events_core::profile::{Duration, ProfileDuration, ProfileTicks};
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

impl device_events_core::AnchorApi for Null {}

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
pub fn resolve(duration: ProfileDuration) -> Option<ProfileTicks> {
    let mut future = duration.into_future();
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(ticks) => ticks,
        Poll::Pending => pollster::block_on(future),
    }
}

/// A fence lifecycle: create (record), host wait, drop (release).
pub fn fence<A: EventApi>(stream: A::Stream) {
    let fence = EventFence::<A>::new(stream);
    fence.wait_sync().unwrap();
}

/// The same with a pooled event.
pub fn pooled_fence<A: EventApi>(pool: &FencePool<A>, stream: A::Stream) {
    pool.fence(stream).wait_sync().unwrap();
}

/// A profiling window: start, stop, resolve.
pub fn window<A: device_events_core::AnchorApi>(
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
}

impl Drop for CudaPair {
    fn drop(&mut self) {
        // Forget the admitted stream before cudarc's is destroyed.
        let _ = Cuda::stream_destroy(self.ours);
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
            profiler: EventProfiler::new(),
        }
    }

    /// A fence lifecycle as a cudarc user writes it.
    pub fn cudarc_fence(&self) {
        let event = self
            .ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .unwrap();
        event.record(&self.stream).unwrap();
        event.synchronize().unwrap();
    }

    /// A timed window as a cudarc user writes it.
    pub fn cudarc_window(&self) {
        let flags = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let (start, end) = (
            self.ctx.new_event(flags).unwrap(),
            self.ctx.new_event(flags).unwrap(),
        );
        start.record(&self.stream).unwrap();
        end.record(&self.stream).unwrap();
        start.elapsed_ms(&end).unwrap();
    }

    /// A fence lifecycle through `EventFence<Cuda>`.
    pub fn our_fence(&self) {
        fence::<Cuda>(self.ours);
    }

    /// A fence lifecycle through a `FencePool<Cuda>`.
    pub fn our_pooled_fence(&self) {
        pooled_fence::<Cuda>(&self.pool, self.ours);
    }

    /// A window through `EventProfiler<Cuda>`.
    pub fn our_window(&mut self) {
        window::<Cuda>(&mut self.profiler, self.ours);
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
