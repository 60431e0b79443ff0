//! `CubeFence` as the fence of CubeCL's drop queue (`cubecl-server`
//! feature): a backend writes `type Fence = CubeFence<Backend>`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use cubecl_server::memory_management::drop_queue::Fence;
use device_events_core::OwnedStream;
use device_events_core::sim::Sim;
use device_events_cubecl::CubeFence;

fn freed_after<F: Fence>(fence: F) -> bool {
    fence.sync()
}

#[test]
fn a_cube_fence_serves_the_drop_queue() {
    let s = OwnedStream::<Sim>::new().unwrap();
    Sim::enqueue_work(s.get(), std::time::Duration::from_millis(5));
    let fence = CubeFence::<Sim>::new(s.get());
    assert!(freed_after(fence));
    assert!(CubeFence::<Sim>::new(s.get()).is_complete().unwrap());
}
