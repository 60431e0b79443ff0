//! Checks that count the process's live events, or make contexts: their
//! own binary, apart from the tests that make and release events in
//! parallel, whose handles such a count would see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_need_an_installed_runtime!(
    "an OpenCL platform (PoCL)",
    "cargo xtask test-opencl"
);

use std::sync::{Mutex, MutexGuard, PoisonError};

use device_events_core::{EventFence, EventProfiler, OwnedStream};
use device_events_opencl::OpenCl;

/// One counting check at a time: each counts the whole process's events.
fn counting() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A dropped fence's event is kept, and the next fence records it again:
/// one event for fences made again and again, released on demand.
#[test]
fn a_dropped_fences_event_serves_the_next_fence() {
    let _one = counting();
    OpenCl::probe().expect("an OpenCL platform with a device");
    let s = OwnedStream::<OpenCl>::new().unwrap();
    device_events_core::process::release_idle_events();
    let before = OpenCl::live_events();
    for _ in 0..3 {
        EventFence::<OpenCl>::new(s.get()).wait_sync().unwrap();
    }
    assert_eq!(
        OpenCl::live_events(),
        before + 1,
        "one kept, none made again"
    );
    device_events_core::process::release_idle_events();
    assert_eq!(OpenCl::live_events(), before);
}

/// The device a thread uses is the one it selected, whichever is listed
/// first: what the demo names. (PoCL in CI lists one device; each listed
/// one is checked.)
#[test]
fn the_current_device_is_the_threads_selection() {
    for listed in OpenCl::devices().unwrap() {
        let current = std::thread::spawn(move || {
            OpenCl::select(listed.platform, listed.device).unwrap();
            OpenCl::current_device().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(
            (current.platform, current.device, &current.name),
            (listed.platform, listed.device, &listed.name)
        );
    }
}

/// Every path releases: fences waited, fences dropped unwaited, windows read
/// and abandoned, profilers and pools dropped, on 8 threads x 10,000 each.
/// Fault injection is not possible on a real runtime; this is what can be
/// swept there.
#[test]
fn stress_on_the_real_runtime_releases_everything() {
    let _one = counting();
    OpenCl::probe().expect("an OpenCL platform with a device");
    device_events_core::process::release_idle_events();
    let before = OpenCl::live_events();
    {
        let s = OwnedStream::<OpenCl>::new().unwrap();
        let pool = device_events_core::FencePool::<OpenCl>::new();
        let mut profiler = EventProfiler::<OpenCl>::new();
        let abandoned = profiler.start(s.get());
        let read = profiler.start(s.get());
        drop(EventFence::<OpenCl>::new(s.get()));
        pool.fence(s.get()).wait_sync().unwrap();
        let read = profiler.stop(s.get(), read).unwrap();
        profiler.abandon(abandoned).unwrap();
        assert!(pollster::block_on(read.resolve()).is_some());
    }
    let took = device_events_conformance::sweep::stress::<OpenCl>(
        8,
        10_000,
        || {},
        || {
            device_events_core::process::release_idle_events();
            (OpenCl::live_events(), 0)
        },
    )
    .unwrap();
    eprintln!(
        "opencl stress: 8 threads x 10000 fences and windows, read on other threads, in {:.1} s",
        took.as_secs_f64()
    );
    device_events_core::process::release_idle_events();
    assert_eq!(OpenCl::live_events(), before, "every event released");
}
