//! Placement truth on a real OpenCL runtime (PoCL in CI): each window's
//! placed start and end on the host clock against where the runtime says
//! its markers completed.
//!
//! PoCL's profiling times read the host's `CLOCK_MONOTONIC_RAW`; `Instant`
//! reads `CLOCK_MONOTONIC`, which NTP slews. The truth is the marker's
//! `CL_PROFILING_COMMAND_END`, mapped to `CLOCK_MONOTONIC` with paired clock
//! reads taken here, per window, outside the profiler.

use std::cell::Cell;
use std::time::{Duration, Instant};

use device_events_conformance::noting::{Note, Noting};
use device_events_core::{OwnedStream, ProfilerConfig};
use device_events_opencl::{OpenCl, OpenClEvent};

pub use crate::placement::Errors;

/// Notes the marker of each record, retained: the profiler's events go
/// back to its pool once read, and an anchor taken meanwhile on the
/// calibrator thread may record one again, releasing its old marker.
struct LastMarker;

thread_local! {
    /// The marker of this thread's last record, retained, until taken:
    /// per thread, since sessions on two threads (two tests of one binary)
    /// would otherwise take each other's markers.
    static LAST: Cell<usize> = const { Cell::new(0) };
}

impl Note<OpenCl> for LastMarker {
    fn recorded(event: &OpenClEvent) {
        let Some(slot) = event.raw() else { return };
        slot.with_marker(|marker| {
            if marker.is_null() {
                return;
            }
            // SAFETY: a live marker (the event holds it); this retain is
            // released by `release` once the marker is read, or here.
            if unsafe { cl3::event::retain_event(marker) }.is_ok() {
                release(LAST.replace(marker as usize));
            }
        });
    }
}

/// The marker of this thread's last record, retained; the caller releases
/// it with [`release`].
fn take_marker() -> usize {
    LAST.take()
}

/// Release a marker [`take_marker`] gave (0: none).
fn release(marker: usize) {
    if marker != 0 {
        // SAFETY: retained in `recorded`, released once here.
        let _ = unsafe { cl3::event::release_event(marker as cl3::types::cl_event) };
    }
}

/// The OpenCL backend, noting the marker of each record.
type Observed = Noting<OpenCl, LastMarker>;

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is writable; both clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut t) };
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

/// `CLOCK_MONOTONIC_RAW` minus `CLOCK_MONOTONIC`, now: the tightest of three
/// raw reads bracketed by monotonic ones.
fn raw_minus_monotonic() -> i128 {
    (0..3)
        .map(|_| {
            let before = clock_ns(libc::CLOCK_MONOTONIC);
            let raw = clock_ns(libc::CLOCK_MONOTONIC_RAW);
            let after = clock_ns(libc::CLOCK_MONOTONIC);
            (after - before, raw - (before + after) / 2)
        })
        .min()
        .map_or(0, |(_, offset)| offset)
}

fn marker_end_ns(marker: usize) -> Option<i128> {
    const CL_PROFILING_COMMAND_END: u32 = 0x1283;
    cl3::event::get_event_profiling_info(marker as cl3::types::cl_event, CL_PROFILING_COMMAND_END)
        .ok()
        .map(|v| i128::from(u64::from(v)))
}

/// Place windows for `seconds` on this thread's OpenCL device, about one
/// every 3 ms for each profiler, one profiler per entry of `configs`, taking
/// turns in one session so that each meets the same machine; measure each
/// end against the runtime's truth.
///
/// # Panics
///
/// When there is no OpenCL device, or a window cannot be read.
#[allow(
    clippy::expect_used,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub fn placement(seconds: u64, configs: &[ProfilerConfig]) -> Vec<Errors> {
    let stream = OwnedStream::<Observed>::new().expect("an OpenCL queue");
    // `Instant` and `CLOCK_MONOTONIC` are one clock; pair them once.
    let (epoch, epoch_ns) = (Instant::now(), clock_ns(libc::CLOCK_MONOTONIC));
    let to_monotonic = |at: Instant| epoch_ns + at.duration_since(epoch).as_nanos() as i128;
    crate::placement::take_turns::<Observed, usize>(
        stream.get(),
        seconds,
        Duration::from_micros(2500),
        configs,
        take_marker,
        |marker, at| {
            let end = marker_end_ns(marker);
            release(marker);
            let truth = end.expect("a completed marker's time") - raw_minus_monotonic();
            (to_monotonic(at) - truth).unsigned_abs() as u64
        },
        // The truth's own pairing is good to ~100 ns.
        200,
    )
}

/// A fence behind about 100 ms of buffer fills on this thread's OpenCL
/// device: OpenCL's waits block, so there is one mode. The wake-up is
/// measured against the marker's completion time.
///
/// # Panics
///
/// When there is no OpenCL device.
#[allow(
    clippy::expect_used,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub fn wait_cost() -> crate::wait::WaitCost {
    use crate::wait::{cl_buffer, cl_fill};
    use device_events_conformance::cpu::thread_cpu;
    const BYTES: usize = 64 << 20;
    let stream = OwnedStream::<Observed>::new().expect("an OpenCL queue");
    let queue = stream.get().with_raw(|q| q).expect("a live queue");
    let buffer = cl_buffer(queue, BYTES);
    // One warm fill timed from the host, to size 100 ms of them.
    cl_fill(queue, buffer, BYTES);
    cl3::command_queue::finish(queue).expect("clFinish");
    let started = Instant::now();
    cl_fill(queue, buffer, BYTES);
    cl3::command_queue::finish(queue).expect("clFinish");
    let fills = (Duration::from_millis(100).as_secs_f64() / started.elapsed().as_secs_f64())
        .ceil()
        .max(1.0) as usize;
    for _ in 0..fills {
        cl_fill(queue, buffer, BYTES);
    }
    let fence = device_events_core::EventFence::<Observed>::new(stream.get());
    let marker = take_marker();
    let (epoch, epoch_ns) = (Instant::now(), clock_ns(libc::CLOCK_MONOTONIC));
    let (cpu, started) = (thread_cpu(), Instant::now());
    fence.wait_sync().expect("a wait");
    let (returned, cpu) = (Instant::now(), thread_cpu() - cpu);
    let end = marker_end_ns(marker);
    release(marker);
    let truth = end.expect("a completed marker") - raw_minus_monotonic();
    let returned_ns = epoch_ns + returned.duration_since(epoch).as_nanos() as i128;
    drop(fence);
    // SAFETY: made above, its fills done.
    let _ = unsafe { cl3::memory::release_mem_object(buffer) };
    crate::wait::WaitCost {
        cpu,
        wall: returned - started,
        late: Duration::from_nanos((returned_ns - truth).max(0) as u64),
    }
}
