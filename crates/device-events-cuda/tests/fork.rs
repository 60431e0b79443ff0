//! `fork` while the library's threads work: a child made by `fork` has
//! none of the parent's threads, so a lock one of them held at the fork
//! would stay held there. Its own binary: a child of a process running
//! other tests could inherit a lock one of them held.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use device_events_conformance::fork::status_of;

use device_events_conformance::Workload as _;
use device_events_conformance::soft::SoftDriver;
use device_events_core::process::wait_for_calibrations;
use device_events_core::sim::Sim;
use device_events_core::{EventApi, EventProfiler};
use device_events_cuda::{Cuda, CudaStream};
use support::{bind, stream};

/// In the child: a profiler of the simulated device reads a window around
/// 1 ms of work within 2 s; the exit status says whether it did.
fn child_reads_a_window() -> ! {
    let mut profiler = EventProfiler::<Sim>::new();
    let s = Sim::stream_create_non_blocking().unwrap();
    let token = profiler.start(s);
    Sim::enqueue_work(s, Duration::from_millis(1));
    let window = profiler.stop(s, token).unwrap();
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sent.send(pollster::block_on(window.resolve()).is_some());
    });
    let read = answer.recv_timeout(Duration::from_secs(2)).unwrap_or(false);
    // SAFETY: leaves the child at once, with the outcome as its status.
    unsafe { libc::_exit(i32::from(!read)) }
}

/// Device 1's first calibration, held in flight behind a 2 s kernel on the
/// one hardware queue its anchor stream shares with the user's stream: the
/// profiler, its stream and the work.
fn calibration_in_flight(soft: &SoftDriver) -> (EventProfiler<Cuda>, CudaStream, support::Memset) {
    soft.set_hw_queues(1);
    bind(1);
    let s = stream();
    let mut profiler = EventProfiler::<Cuda>::new();
    soft.set_bandwidth(1e9);
    let work = support::Memset::new(2_000_000_000);
    work.enqueue_bytes(s, 2_000_000_000).unwrap();
    soft.set_bandwidth(10e9);
    soft.set_hw_queues(0);
    let token = profiler.start(s);
    profiler.abandon(token).unwrap();
    (profiler, s, work)
}

/// The README's promise after `fork`, every time: whatever the library's
/// threads are doing as the process forks (device 0's windows read one
/// after another, so that the calibrator and resolver threads are busy;
/// on the software driver, device 1's calibration in flight behind a long
/// kernel too), a child's own profiler of the simulated device reads its
/// window. 300 forks.
#[test]
fn a_child_forked_while_the_librarys_threads_work_reads_its_windows() {
    let soft = SoftDriver::unless_real();
    let stuck = soft.as_deref().map(calibration_in_flight);
    // Device 0: windows read one after another.
    let done = Arc::new(AtomicBool::new(false));
    let profiling = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            bind(0);
            let s0 = stream();
            let mut profiler = EventProfiler::<Cuda>::new();
            while !done.load(Ordering::Relaxed) {
                let token = profiler.start(s0);
                let window = profiler.stop(s0, token).unwrap();
                let _ = pollster::block_on(window.resolve());
            }
            drop(profiler);
            Cuda::stream_destroy(s0).unwrap();
        })
    };
    let (mut during_calibration, mut unread) = (0, Vec::new());
    for fork in 0..300 {
        during_calibration += u32::from(!wait_for_calibrations(Duration::ZERO));
        // SAFETY: the child only profiles the simulated device and leaves
        // with `_exit`; the library's locks are taken around the fork (the
        // backend's `pthread_atfork` handlers), and no other test runs in
        // this binary.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            child_reads_a_window();
        }
        match status_of(child, Duration::from_secs(10)) {
            Some(0) => {}
            status => unread.push((fork, status)),
        }
    }
    done.store(true, Ordering::Relaxed);
    profiling.join().unwrap();
    if let Some((profiler, s1, work)) = stuck {
        Cuda::stream_synchronize(s1).unwrap();
        drop(profiler);
        drop(work);
        assert!(wait_for_calibrations(Duration::from_secs(10)));
        Cuda::stream_destroy(s1).unwrap();
        assert!(
            during_calibration > 0,
            "no fork came during device 1's calibration"
        );
    }
    assert!(
        unread.is_empty(),
        "children that did not read their window (fork, status; None: hung, killed): {unread:?}"
    );
}
