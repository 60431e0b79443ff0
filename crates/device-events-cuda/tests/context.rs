//! A handle keeps its context alive: in a process of its own, so that no
//! other test's retain of the primary context hides a torn-down one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

use device_events_conformance::soft::{SoftDriver, skip};
use device_events_core::{EventFence, OwnedStream};
use device_events_cuda::Cuda;

#[test]
fn a_fence_outliving_its_cudarc_context_is_released_in_a_live_context() {
    let Some(soft) = SoftDriver::unless_real() else {
        // What it checks (no call reached a torn-down context, every
        // retain released) only the software driver's counts can say.
        skip("needs the software driver's counts of misuses and contexts");
        return;
    };
    Cuda::probe().unwrap();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    ctx.bind_to_thread().unwrap();
    let stream = OwnedStream::<Cuda>::new().unwrap();
    let fence = EventFence::<Cuda>::new(stream.get());
    fence.wait_sync().unwrap();
    // The user's context goes first; the fence and stream still hold it.
    drop(ctx);
    drop(fence);
    drop(stream);
    let counts = soft.counts();
    assert_eq!(counts.misuses, 0, "no call reached a torn-down context");
    assert_eq!((counts.events, counts.streams), (0, 0));
    assert_eq!(counts.contexts, 0, "the last handle released its retain");
}
