//! What a profiling window promises its reader on cubecl-wgpu besides
//! CubeCL's own tests, published and patched alike: one read long after
//! its window ran still reads the time it ran.

use std::time::{Duration, Instant};

use cubecl::prelude::*;
use cubecl_core as cubecl;
use cubecl_runtime::runtime::Runtime;
use cubecl_wgpu::{AutoCompiler, WgpuDevice};

/// CubeCL's wgpu runtime, with its default compiler.
type WgpuRuntime = cubecl_wgpu::WgpuRuntime<AutoCompiler>;

#[cube(launch_unchecked)]
fn fill(out: &mut [f32]) {
    out[ABSOLUTE_POS] = f32::cast_from(ABSOLUTE_POS);
}

/// Past device-events' `max_anchor_distance` (60 s), the furthest a stamp
/// is placed from its anchor.
const LATE: Duration = Duration::from_secs(61);

#[test]
fn a_window_read_a_minute_after_it_ran_reads_the_time_it_ran() {
    let client = <WgpuRuntime as Runtime>::client(&WgpuDevice::default());
    let out = client.empty(64 * 4);
    let launched = Instant::now();
    let (_, reading) = client
        .profile(
            || {
                // SAFETY: `out` holds 64 f32s, one per unit of the cube.
                unsafe {
                    fill::launch_unchecked(
                        &client,
                        CubeCount::Static(1, 1, 1),
                        CubeDim::new_1d(64),
                        BufferArg::from_raw_parts(out.clone(), 64),
                    )
                }
            },
            "fill",
        )
        .expect("a profile");
    std::thread::sleep(LATE);
    let ticks = pollster::block_on(reading.resolve());
    let ticks = ticks.expect("a window read late still reads its time");
    assert!(
        ticks.duration() < launched.elapsed(),
        "the window lasted {:?}, longer than the host time around it",
        ticks.duration()
    );
}
