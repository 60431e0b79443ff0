//! The software driver holds a backend to what the CUDA documentation says
//! a real driver does, through cudarc's `result` API: asynchronous records,
//! misuse refused and counted, implicit stream synchronization, contexts
//! that really go away. Each test names the documented behaviour it follows.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use std::time::{Duration, Instant};

use cudarc::driver::result::{self, DriverError, stream::StreamKind};
use cudarc::driver::sys::{self, CUresult};
use device_events_conformance::cpu::thread_cpu;
use device_events_conformance::soft::SoftDriver;
use support::{Hold, SURELY, WHILE_HELD, event, mapped_word, reached_within};

const LEGACY: sys::CUstream = 0x1 as sys::CUstream;
const PER_THREAD: sys::CUstream = 0x2 as sys::CUstream;

/// Initialise, and make device 0's primary context current here.
fn context() -> sys::CUcontext {
    support::context(0)
}

/// 15 ms of work on `stream`, at 1 GB/s.
fn fifteen_ms(soft: &SoftDriver, stream: sys::CUstream) {
    soft.set_bandwidth(1e9);
    // SAFETY: the allocation is only used for this memset.
    unsafe {
        let ptr = result::malloc_sync(15_000_000).unwrap();
        result::memset_d8_async(ptr, 0, 15_000_000, stream).unwrap();
    }
    soft.set_bandwidth(10e9);
}

/// `cuEventRecord`: "the event is recorded after all preceding operations
/// in the stream have been completed": the call only queues it. Until the
/// device gets there, after its launch latency, `cuEventQuery` says
/// `CUDA_ERROR_NOT_READY`, on an idle stream too.
#[test]
fn a_record_on_an_idle_stream_is_not_complete_when_the_call_returns() {
    let soft = SoftDriver::exclusive();
    context();
    soft.set_launch_latency(2_000_000, 0, 0, 0); // 2 ms, to see it
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let e = event();
    // SAFETY: live handles, released once here.
    unsafe {
        result::event::record(e, s).unwrap();
        let queried = result::event::query(e);
        soft.set_launch_latency(2000, 3000, 1, 40_000);
        assert_eq!(queried, Err(DriverError(CUresult::CUDA_ERROR_NOT_READY)));
        result::event::synchronize(e).unwrap();
        assert_eq!(result::event::query(e), Ok(()));
        result::event::destroy(e).unwrap();
        result::stream::destroy(s).unwrap();
    }
}

/// A real driver does not validate handles: using a destroyed one is
/// undefined behaviour there. Here it is refused with
/// `CUDA_ERROR_INVALID_HANDLE` and counted as a misuse, on every call, not
/// only on releases.
#[test]
fn using_a_destroyed_handle_is_a_counted_misuse() {
    let soft = SoftDriver::exclusive();
    context();
    let (s, e) = (
        result::stream::create(StreamKind::NonBlocking).unwrap(),
        event(),
    );
    let before = soft.counts().misuses;
    // SAFETY: each is destroyed once, then used on purpose.
    unsafe {
        result::stream::destroy(s).unwrap();
        assert_eq!(
            result::event::record(e, s),
            Err(DriverError(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
        result::event::destroy(e).unwrap();
        assert_eq!(
            result::event::query(e),
            Err(DriverError(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
    }
    assert_eq!(soft.counts().misuses, before + 2);
    soft.allow_misuses(2);
}

/// CUDA programming guide, "Implicit Synchronization" and the legacy
/// default stream: work on the legacy stream waits for prior work on every
/// blocking stream of the context.
#[test]
fn the_legacy_stream_waits_for_blocking_streams_not_non_blocking_ones() {
    let _soft = SoftDriver::exclusive();
    context();
    let blocking = result::stream::create(StreamKind::Default).unwrap();
    let hold = Hold::on(blocking);
    assert!(!reached_within(LEGACY, WHILE_HELD));
    hold.release(LEGACY);

    let non_blocking = result::stream::create(StreamKind::NonBlocking).unwrap();
    let hold = Hold::on(non_blocking);
    assert!(reached_within(LEGACY, SURELY));
    hold.release(non_blocking);
    // SAFETY: made here, destroyed once.
    unsafe {
        result::stream::destroy(blocking).unwrap();
        result::stream::destroy(non_blocking).unwrap();
    }
}

/// The other direction, from the same section: work on a blocking stream
/// waits for prior work on the legacy stream.
#[test]
fn a_blocking_stream_waits_for_the_legacy_stream() {
    let _soft = SoftDriver::exclusive();
    context();
    let blocking = result::stream::create(StreamKind::Default).unwrap();
    let non_blocking = result::stream::create(StreamKind::NonBlocking).unwrap();
    let hold = Hold::on(LEGACY);
    assert!(reached_within(non_blocking, SURELY));
    assert!(!reached_within(blocking, WHILE_HELD));
    hold.release(blocking);
    // SAFETY: made here, destroyed once.
    unsafe {
        result::stream::destroy(blocking).unwrap();
        result::stream::destroy(non_blocking).unwrap();
    }
}

/// `CU_STREAM_PER_THREAD` is each thread's own default stream, not the
/// legacy one: one thread's work there does not hold up another thread's
/// per-thread stream. It is a blocking stream, so the legacy stream waits
/// for it ("per-thread default stream ... synchronizes with the legacy
/// default stream").
#[test]
fn each_thread_has_its_own_per_thread_stream() {
    let _soft = SoftDriver::exclusive();
    let ctx = context();
    let hold = Hold::on(PER_THREAD);
    let ctx = ctx as usize;
    let other = std::thread::spawn(move || {
        // SAFETY: the primary context retained above.
        unsafe { result::ctx::set_current(ctx as sys::CUcontext).unwrap() };
        reached_within(PER_THREAD, SURELY)
    })
    .join()
    .unwrap();
    assert!(other, "another thread's per-thread stream waited");
    assert!(!reached_within(LEGACY, WHILE_HELD));
    hold.release(LEGACY);
}

/// `cuStreamDestroy`: "in case the device is still doing work in the stream
/// when cuStreamDestroy() is called, the function will return immediately
/// and the resources associated with the stream will be released
/// automatically once the device has completed all work": that work still
/// runs, and the legacy stream still waits for it.
#[test]
fn a_destroyed_blocking_stream_with_work_pending_still_holds_the_legacy_stream() {
    let soft = SoftDriver::exclusive();
    context();
    let blocking = result::stream::create(StreamKind::Default).unwrap();
    let hold = Hold::on(blocking);
    // SAFETY: made here, destroyed once.
    unsafe { result::stream::destroy(blocking).unwrap() };
    assert!(!reached_within(LEGACY, WHILE_HELD));
    hold.release(LEGACY);
    assert_eq!(soft.counts().streams, 0);
}

/// `cuDevicePrimaryCtxRelease`: once the last reference is released the
/// primary context is destroyed, and with it everything it held; calls on
/// its old handles then fail with `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
#[test]
fn releasing_the_last_reference_tears_the_context_down() {
    let soft = SoftDriver::exclusive();
    result::init().unwrap();
    let device = result::device::get(1).unwrap();
    // SAFETY: retained here, released once below; its handles are used after
    // on purpose.
    unsafe {
        let ctx = result::primary_ctx::retain(device).unwrap();
        result::ctx::set_current(ctx).unwrap();
        let events = soft.counts().events;
        let e = event();
        assert_eq!(soft.counts().events, events + 1);
        result::primary_ctx::release(device).unwrap();
        assert_eq!(soft.counts().events, events, "freed with its context");
        assert_eq!(
            result::event::query(e),
            Err(DriverError(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED))
        );
        result::ctx::set_current(std::ptr::null_mut()).unwrap();
    }
    soft.allow_misuses(1);
}

/// Graph capture, as the CUDA programming guide's "Cross-stream
/// Dependencies and Events" describes it: a stream that waits on an event
/// recorded in a capturing stream is forked into the capture, and ending
/// the capture before it joins back (the origin waiting on an event
/// recorded in it) fails with `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`.
#[test]
fn a_forked_stream_must_join_before_the_capture_ends() {
    let _soft = SoftDriver::exclusive();
    context();
    let (origin, forked) = (
        result::stream::create(StreamKind::NonBlocking).unwrap(),
        result::stream::create(StreamKind::NonBlocking).unwrap(),
    );
    let (fork, join) = (event(), event());
    let capturing = |s| {
        // SAFETY: a live stream.
        unsafe { result::stream::is_capturing(s) }.unwrap()
    };
    let active = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    let none = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: live handles, released once at the end.
    unsafe {
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        result::stream::begin_capture(origin, mode).unwrap();
        result::event::record(fork, origin).unwrap();
        result::stream::wait_event(forked, fork, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .unwrap();
        assert_eq!(capturing(forked), active, "forked into the capture");
        assert_eq!(
            result::stream::end_capture(origin).unwrap_err(),
            DriverError(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
        );
        assert_eq!((capturing(origin), capturing(forked)), (none, none));

        result::stream::begin_capture(origin, mode).unwrap();
        result::event::record(fork, origin).unwrap();
        result::stream::wait_event(forked, fork, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .unwrap();
        result::event::record(join, forked).unwrap();
        result::stream::wait_event(origin, join, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .unwrap();
        let graph = result::stream::end_capture(origin).unwrap();
        assert!(!graph.is_null(), "joined: the capture makes its graph");
        assert_eq!(capturing(forked), none);
        sys::cuGraphDestroy(graph).result().unwrap();
        for e in [fork, join] {
            result::event::destroy(e).unwrap();
        }
        result::stream::destroy(origin).unwrap();
        result::stream::destroy(forked).unwrap();
    }
}

/// The two ways a release fails, as documented: `CUDA_ERROR_INVALID_HANDLE`
/// means the handle was not released (nothing is freed); any other status
/// reports an earlier asynchronous error ("this function may also return
/// error codes from previous, asynchronous launches") from a release that
/// still happened.
#[test]
fn a_release_refused_as_invalid_frees_nothing_and_one_reporting_an_earlier_error_frees() {
    let soft = SoftDriver::exclusive();
    context();
    let e = event();
    let live = soft.counts().events;
    assert!(soft.fail_call("cuEventDestroy_v2", 1, 400));
    // SAFETY: a live event; the injected refusal leaves it live, and the
    // second release frees it.
    unsafe {
        assert_eq!(
            result::event::destroy(e),
            Err(DriverError(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
        assert_eq!(soft.counts().events, live, "nothing freed");
        assert!(soft.fail_call("cuEventDestroy_v2", 1, 700));
        assert_eq!(
            result::event::destroy(e),
            Err(DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS))
        );
    }
    assert_eq!(soft.counts().events, live - 1, "freed, the error reported");
}

/// A wait of about 50 ms on an event made with `flags`: the CPU time it
/// took, its length, and how late it returned after the device got there.
fn wait_on(soft: &SoftDriver, flags: sys::CUevent_flags) -> (Duration, Duration, Duration) {
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let e = result::event::create(flags).unwrap();
    soft.set_bandwidth(1e9);
    // SAFETY: live handles, released once here; the allocation is only
    // used for this memset.
    unsafe {
        let ptr = result::malloc_sync(50_000_000).unwrap();
        result::memset_d8_async(ptr, 0, 50_000_000, s).unwrap();
        result::event::record(e, s).unwrap();
        let (cpu, started) = (thread_cpu(), Instant::now());
        result::event::synchronize(e).unwrap();
        let (returned, cpu) = (Instant::now(), thread_cpu() - cpu);
        let truth =
            soft.host_instant(0) + Duration::from_nanos(soft.event_truth_ns(e as usize).unwrap());
        soft.set_bandwidth(10e9);
        result::event::destroy(e).unwrap();
        result::stream::destroy(s).unwrap();
        result::free_sync(ptr).unwrap();
        (
            cpu,
            returned - started,
            returned.saturating_duration_since(truth),
        )
    }
}

/// `cuEventSynchronize`: "If the event was created with the
/// CU_EVENT_BLOCKING_SYNC flag, then the calling CPU thread will block until
/// the event has been completed by the device. If the flag was not set,
/// then the CPU thread will busy-wait." A default wait burns its core for
/// the whole wait; a blocking one sleeps and wakes the configured latency
/// late.
#[test]
fn a_default_wait_spins_and_a_blocking_sync_wait_sleeps_and_wakes_late() {
    let soft = SoftDriver::exclusive();
    context();
    soft.set_blocking_wake_ns(2_000_000);
    let (spin_cpu, spin_wall, _) = wait_on(&soft, sys::CUevent_flags::CU_EVENT_DEFAULT);
    let (block_cpu, block_wall, block_late) =
        wait_on(&soft, sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC);
    soft.set_blocking_wake_ns(30_000);
    // Against the sleeping wait, not the wall clock: on a loaded machine a
    // spinning thread gets only its share of a core, but it still burns
    // many times what a sleeping one does.
    assert!(
        spin_cpu >= (block_cpu * 10).max(Duration::from_millis(1)),
        "spinning: {spin_cpu:?} of CPU in {spin_wall:?}, against {block_cpu:?} sleeping"
    );
    assert!(
        block_cpu <= block_wall / 10,
        "blocking: {block_cpu:?} of CPU in {block_wall:?}"
    );
    assert!(
        block_late >= Duration::from_millis(2),
        "woke {block_late:?} late"
    );
}

/// Stream memory operations (CUDA driver API, "Stream Memory Operations"):
/// `cuStreamWaitValue32` makes the stream wait until the 32-bit value at a
/// device address satisfies the test; host memory from `cuMemHostAlloc`
/// with `CU_MEMHOSTALLOC_DEVICEMAP` is reached through
/// `cuMemHostGetDevicePointer`. Work behind the wait runs once the host
/// writes the value, and not before: here an event behind it is stamped
/// after the write, within the driver's wait latency (1 µs) and the
/// worker's poll.
#[test]
fn a_stream_waits_on_host_mapped_memory_until_the_host_writes_it() {
    let soft = SoftDriver::exclusive();
    context();
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let e = event();
    let (supported, host, device) = mapped_word();
    // SAFETY: live handles; the host word outlives the stream's wait
    // (freed after the synchronize).
    unsafe {
        assert_eq!(
            sys::cuStreamWaitValue32_v2(s, device, 1, 0),
            CUresult::CUDA_SUCCESS
        );
        result::event::record(e, s).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(
            result::event::query(e),
            Err(DriverError(CUresult::CUDA_ERROR_NOT_READY))
        );
        assert_eq!(soft.blocked_value_waits(), 1);
        let written = soft.host_now_ns();
        std::sync::atomic::AtomicU32::from_ptr(host.cast())
            .store(1, std::sync::atomic::Ordering::Release);
        result::event::synchronize(e).unwrap();
        let stamped = soft.event_truth_ns(e as usize).unwrap();
        assert_eq!(soft.blocked_value_waits(), 0);
        assert!(
            stamped >= written + 1_000,
            "stamped {} ns after the write",
            stamped - written
        );
        result::event::destroy(e).unwrap();
        result::stream::destroy(s).unwrap();
        assert_eq!(sys::cuMemFreeHost(host), CUresult::CUDA_SUCCESS);
    }
    assert!(supported);
}

/// A GPU with fewer hardware queues than streams runs each queue in order
/// (false dependencies): work another stream queues behind a stream
/// waiting on a value waits for it too, until the host writes the value.
/// With one queue per stream it does not.
#[test]
fn a_wait_on_a_value_holds_other_streams_work_on_its_hardware_queue() {
    let soft = SoftDriver::exclusive();
    context();
    let held_behind = |queues: u32| {
        soft.set_hw_queues(queues);
        let a = result::stream::create(StreamKind::NonBlocking).unwrap();
        let b = result::stream::create(StreamKind::NonBlocking).unwrap();
        let e = event();
        let (_, host, device) = mapped_word();
        let before = soft.value_waits_held();
        // SAFETY: live handles; the host word outlives the wait (freed
        // after both streams are drained).
        unsafe {
            assert_eq!(
                sys::cuStreamWaitValue32_v2(a, device, 1, 0),
                CUresult::CUDA_SUCCESS
            );
            result::event::record(e, b).unwrap();
            // Held: still not done after 20 ms. Apart: done, however long
            // a loaded host takes to run the device's thread.
            let patience = if queues == 1 {
                Duration::from_millis(20)
            } else {
                Duration::from_secs(10)
            };
            let asked = std::time::Instant::now();
            let mut done = false;
            while !done && asked.elapsed() < patience {
                std::thread::sleep(Duration::from_millis(1));
                done = result::event::query(e).is_ok();
            }
            std::sync::atomic::AtomicU32::from_ptr(host.cast())
                .store(1, std::sync::atomic::Ordering::Release);
            result::stream::synchronize(a).unwrap();
            result::event::synchronize(e).unwrap();
            result::event::destroy(e).unwrap();
            result::stream::destroy(a).unwrap();
            result::stream::destroy(b).unwrap();
            assert_eq!(sys::cuMemFreeHost(host), CUresult::CUDA_SUCCESS);
            let after = soft.value_waits_held();
            (
                done,
                after.delayed - before.delayed,
                after.delayed_max_ns + after.driver_late_max_ns,
            )
        }
    };
    let (done_shared, delayed_shared, max_ns) = held_behind(1);
    let (done_apart, delayed_apart, _) = held_behind(0);
    soft.set_hw_queues(0);
    assert!(!done_shared, "the other stream's record ran past the wait");
    assert_eq!(delayed_shared, 1);
    // Held from its start, which falls up to a launch latency (45 µs at
    // most) into the 20 ms the host waited before writing: the wait's and
    // the driver's own lateness in getting there (on a loaded host), apart.
    assert!(
        max_ns >= 19_000_000,
        "held {max_ns} ns, the driver's lateness included"
    );
    assert!(done_apart, "a stream of its own queue waited");
    assert_eq!(delayed_apart, 0);
}

/// A GPU's in-order queue goes on the moment a wait on a value passes: work
/// another stream queued behind the wait on the same hardware queue is
/// reached at the same instant as the waiting stream's own next record,
/// however late the driver's host thread for the other stream wakes.
#[test]
fn work_behind_a_value_wait_goes_on_the_moment_the_wait_passes() {
    let soft = SoftDriver::exclusive();
    context();
    soft.set_hw_queues(1);
    let a = result::stream::create(StreamKind::NonBlocking).unwrap();
    let b = result::stream::create(StreamKind::NonBlocking).unwrap();
    let (after_wait, behind_it) = (event(), event());
    let (_, host, device) = mapped_word();
    // SAFETY: live handles; the host word outlives the wait (freed after
    // both streams are drained).
    let truths = unsafe {
        assert_eq!(
            sys::cuStreamWaitValue32_v2(a, device, 1, 0),
            CUresult::CUDA_SUCCESS
        );
        result::event::record(after_wait, a).unwrap();
        result::event::record(behind_it, b).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::sync::atomic::AtomicU32::from_ptr(host.cast())
            .store(1, std::sync::atomic::Ordering::Release);
        result::stream::synchronize(a).unwrap();
        result::stream::synchronize(b).unwrap();
        let truth = |e: sys::CUevent| soft.event_truth_ns(e as usize).unwrap();
        let truths = (truth(after_wait), truth(behind_it));
        for e in [after_wait, behind_it] {
            result::event::destroy(e).unwrap();
        }
        result::stream::destroy(a).unwrap();
        result::stream::destroy(b).unwrap();
        assert_eq!(sys::cuMemFreeHost(host), CUresult::CUDA_SUCCESS);
        truths
    };
    soft.set_hw_queues(0);
    let (after_wait, behind_it) = truths;
    assert_eq!(
        behind_it,
        after_wait,
        "the work behind the wait went on {} ns after it passed",
        i128::from(behind_it) - i128::from(after_wait)
    );
}

/// Rule `cuStreamWaitValue32` (CUDA driver API, `CU_STREAM_WAIT_VALUE_GEQ`):
/// the test is cyclic, `(int32_t)(*addr - value) >= 0`: a value just past
/// a wrap satisfies a wait for one just before it, and a value just before
/// the wrap does not satisfy a wait for one just after.
#[test]
fn a_wait_for_a_value_compares_cyclically_across_the_wrap() {
    let soft = SoftDriver::exclusive();
    context();
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let (_, host, device) = mapped_word();
    // SAFETY: `host` is live, mapped host memory of four bytes, aligned by
    // the driver, freed only at the end.
    let word = unsafe { std::sync::atomic::AtomicU32::from_ptr(host.cast()) };
    // Whether the stream passes a wait for `wait_for` with the word at
    // `at`: its event completes, or the driver holds the stream on the
    // wait (never both).
    let passes = |at: u32, wait_for: u32| -> bool {
        word.store(at, std::sync::atomic::Ordering::Release);
        let e = event();
        // SAFETY: live handles; the word outlives the wait.
        unsafe {
            assert_eq!(
                sys::cuStreamWaitValue32_v2(s, device, wait_for, 0),
                CUresult::CUDA_SUCCESS
            );
            result::event::record(e, s).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let passed = loop {
            // SAFETY: a live event.
            if unsafe { result::event::query(e) }.is_ok() {
                break true;
            }
            if soft.blocked_value_waits() == 1 {
                break false;
            }
            assert!(Instant::now() < deadline, "neither passed nor held");
            std::thread::sleep(Duration::from_micros(100));
        };
        // Let the stream go on whatever the test said.
        word.store(wait_for, std::sync::atomic::Ordering::Release);
        // SAFETY: a live event, destroyed once.
        unsafe {
            result::event::synchronize(e).unwrap();
            result::event::destroy(e).unwrap();
        }
        passed
    };
    assert!(passes(1, u32::MAX), "1 is past u32::MAX, cyclically");
    assert!(!passes(u32::MAX, 1), "u32::MAX is before 1, cyclically");
    assert!(passes(7, 7) && !passes(6, 7));
    // SAFETY: live stream and host memory, released once.
    unsafe {
        result::stream::destroy(s).unwrap();
        assert_eq!(sys::cuMemFreeHost(host), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(soft.blocked_value_waits(), 0);
}

/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS` reads 0 on a device
/// without stream memory operations, and a wait on a value there is
/// refused (`CUDA_ERROR_NOT_SUPPORTED`): switched off, the software driver
/// says both, for a backend's fallback to be tested.
#[test]
fn switched_off_stream_memory_operations_are_not_supported() {
    let soft = SoftDriver::exclusive();
    context();
    soft.set_stream_mem_ops(false);
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let (supported, host, device) = mapped_word();
    // SAFETY: live handles; the word is freed once, here.
    let refused = unsafe {
        let refused = sys::cuStreamWaitValue32_v2(s, device, 1, 0);
        result::stream::destroy(s).unwrap();
        assert_eq!(sys::cuMemFreeHost(host), CUresult::CUDA_SUCCESS);
        refused
    };
    soft.set_stream_mem_ops(true);
    assert!(!supported);
    assert_eq!(refused, CUresult::CUDA_ERROR_NOT_SUPPORTED);
}

/// `cuEventDestroy`: "in case event has been recorded but has not yet been
/// completed, [...] resources will be released automatically once the
/// device has completed event", and `cuStreamWaitEvent` waits on the
/// event's state when called: a wait queued before the event is destroyed
/// still holds its stream until the device passes the record.
#[test]
fn destroying_an_event_releases_no_wait_queued_on_it() {
    let soft = SoftDriver::exclusive();
    context();
    let (a, b) = (
        result::stream::create(StreamKind::NonBlocking).unwrap(),
        result::stream::create(StreamKind::NonBlocking).unwrap(),
    );
    let (e, after) = (event(), event());
    let started = Instant::now();
    fifteen_ms(&soft, a);
    // SAFETY: live events and streams of the current context.
    unsafe {
        result::event::record(e, a).unwrap();
        result::stream::wait_event(b, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT).unwrap();
        result::event::destroy(e).unwrap();
        result::event::record(after, b).unwrap();
        result::event::synchronize(after).unwrap();
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(15),
        "the waiting stream went on after {waited:?}, before the 15 ms of work it waited for"
    );
}

/// `cuMemHostAlloc` / `cuMemHostGetDevicePointer`: flags are PORTABLE,
/// DEVICEMAP and WRITECOMBINED; only a block allocated with DEVICEMAP has a
/// device pointer, and the pointer call takes flags 0.
#[test]
fn only_host_memory_mapped_at_allocation_has_a_device_pointer() {
    let _soft = SoftDriver::exclusive();
    context();
    let (mut plain, mut mapped, mut device) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    // SAFETY: writable outputs; each block made is freed once.
    unsafe {
        assert_eq!(
            sys::cuMemHostAlloc(&mut plain, 4, 0x8),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            sys::cuMemHostAlloc(&mut plain, 4, 0x1),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemHostGetDevicePointer_v2(&mut device, plain, 0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            sys::cuMemHostAlloc(&mut mapped, 4, 0x2),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemHostGetDevicePointer_v2(&mut device, mapped, 1),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            sys::cuMemHostGetDevicePointer_v2(&mut device, mapped, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuMemFreeHost(plain), CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuMemFreeHost(mapped), CUresult::CUDA_SUCCESS);
    }
}

/// The spin kernel the GPU bundle carries, as PTX text.
const SPIN_PTX: &str = concat!(include_str!("../../device-events-bench/src/spin.ptx"), "\0");

/// The spin kernel loaded into the current context: (module, function).
fn spin_kernel() -> (sys::CUmodule, sys::CUfunction) {
    // SAFETY: NUL-terminated PTX; the module is unloaded by the caller.
    unsafe {
        let module = result::module::load_data(SPIN_PTX.as_ptr().cast()).unwrap();
        let function = result::module::get_function(module, c"spin_stamp".into()).unwrap();
        (module, function)
    }
}

/// Launch `function` (the spin kernel) for `ns`, stamping at `out`.
///
/// # Safety
///
/// `stream` is live or a default stream; `out` is mapped host memory of
/// 16 bytes at least.
unsafe fn launch(
    function: sys::CUfunction,
    stream: sys::CUstream,
    ns: u64,
    out: u64,
) -> Result<(), DriverError> {
    let (mut ns, mut out) = (ns, out);
    let mut params = [
        (&raw mut ns).cast::<std::ffi::c_void>(),
        (&raw mut out).cast::<std::ffi::c_void>(),
    ];
    // SAFETY: the kernel's two u64 parameters, read during the call.
    unsafe { result::launch_kernel(function, (1, 1, 1), (1, 1, 1), 0, stream, &mut params) }
}

/// Mapped host memory of `bytes`, and its device address.
fn mapped(bytes: usize) -> (*mut u64, u64) {
    let mut device = 0;
    // SAFETY: freed by the caller; `device` is writable.
    unsafe {
        let host = result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP).unwrap();
        assert_eq!(
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0),
            CUresult::CUDA_SUCCESS
        );
        (host.cast(), device)
    }
}

/// `cuLaunchKernel` of the bench's spin kernel (the one kernel this driver
/// runs): the stream is busy for the length asked, and the kernel writes
/// its first and last `%globaltimer` reads, that far apart, to its buffer.
#[test]
fn the_spin_kernel_occupies_its_stream_for_its_length_and_stamps_its_start_and_end() {
    let _soft = SoftDriver::exclusive();
    context();
    let (module, function) = spin_kernel();
    let (host, device) = mapped(16);
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    let began = Instant::now();
    // SAFETY: live handles; `host` holds 16 bytes, read once the stream is
    // done; each handle is released once.
    unsafe {
        launch(function, s, 5_000_000, device).unwrap();
        result::stream::synchronize(s).unwrap();
        assert!(began.elapsed() >= Duration::from_millis(5));
        let (start, end) = (host.read_volatile(), host.add(1).read_volatile());
        assert!(start > 0 && end - start >= 5_000_000, "{start} {end}");
        result::stream::destroy(s).unwrap();
        result::free_host(host.cast()).unwrap();
        result::module::unload(module).unwrap();
    }
}

/// `cuModuleLoadData`: a current context is needed (INVALID_CONTEXT), the
/// image must not be null (INVALID_VALUE) and must be one the JIT takes
/// (INVALID_IMAGE for text that is not PTX).
#[test]
fn a_module_loads_only_in_a_current_context_from_a_ptx_image() {
    let _soft = SoftDriver::exclusive();
    context();
    let mut module = std::ptr::null_mut();
    // SAFETY: writable output; NUL-terminated images.
    unsafe {
        assert_eq!(
            sys::cuModuleLoadData(&mut module, std::ptr::null()),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            sys::cuModuleLoadData(&mut module, c"not a module".as_ptr().cast()),
            CUresult::CUDA_ERROR_INVALID_IMAGE
        );
    }
    let elsewhere = std::thread::spawn(|| {
        let mut module = std::ptr::null_mut();
        // SAFETY: writable output; NUL-terminated PTX.
        unsafe { sys::cuModuleLoadData(&mut module, SPIN_PTX.as_ptr().cast()) }
    });
    assert_eq!(
        elsewhere.join().unwrap(),
        CUresult::CUDA_ERROR_INVALID_CONTEXT
    );
}

/// The header of a 64-bit ELF image of machine `machine` whose flags name
/// SASS architecture `arch`, padded as a cubin's: what the driver reads
/// of a cubin to tell whether it is the device's.
fn cubin_header(machine: u16, arch: u32) -> Vec<u8> {
    let mut image = vec![0u8; 256];
    image[..4].copy_from_slice(b"\x7fELF");
    image[4] = 2; // 64-bit
    image[5] = 1; // little-endian
    image[18..20].copy_from_slice(&machine.to_le_bytes());
    // ptxas 12.9 writes 0x5a055a for sm_90: the architecture in the low
    // byte, repeated above.
    image[48..52].copy_from_slice(&(arch | (arch << 16) | 0x500).to_le_bytes());
    image
}

/// `cuModuleLoadData` "may be a cubin or fatbin as output by nvcc, or a
/// NULL-terminated PTX": a cubin for the device's architecture (the
/// driver reports compute capability 9.0) loads and its kernel is found;
/// one for another architecture is NO_BINARY_FOR_GPU; an ELF image of
/// another machine is INVALID_IMAGE.
#[test]
fn a_cubin_loads_only_for_the_devices_architecture() {
    let _soft = SoftDriver::exclusive();
    context();
    let load = |image: &[u8]| {
        let mut module = std::ptr::null_mut();
        // SAFETY: writable output; a whole image of its header's size.
        let status = unsafe { sys::cuModuleLoadData(&mut module, image.as_ptr().cast()) };
        (status, module)
    };
    let (status, module) = load(&cubin_header(190, 90));
    assert_eq!(status, CUresult::CUDA_SUCCESS);
    // SAFETY: a live module, unloaded once.
    unsafe {
        result::module::get_function(module, c"spin_stamp".into()).unwrap();
        result::module::unload(module).unwrap();
    }
    for arch in [80, 89, 100, 120] {
        assert_eq!(
            load(&cubin_header(190, arch)).0,
            CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
            "sm_{arch}"
        );
    }
    assert_eq!(
        load(&cubin_header(62, 90)).0,
        CUresult::CUDA_ERROR_INVALID_IMAGE,
        "an x86-64 ELF"
    );
}

/// `cuModuleGetFunction`: a name the module lacks is NOT_FOUND.
#[test]
fn a_function_the_module_lacks_is_not_found() {
    let _soft = SoftDriver::exclusive();
    context();
    let (module, _) = spin_kernel();
    // SAFETY: a live module, unloaded once.
    unsafe {
        assert_eq!(
            result::module::get_function(module, c"no_such_kernel".into()),
            Err(DriverError(CUresult::CUDA_ERROR_NOT_FOUND))
        );
        result::module::unload(module).unwrap();
    }
}

/// `cuLaunchKernel`: every grid and block dimension is at least 1, and a
/// kernel with parameters needs them (INVALID_VALUE); a function of an
/// unloaded module is not live, which a real driver does not check: here
/// it is refused and counted as a misuse.
#[test]
fn a_launch_needs_its_dimensions_its_parameters_and_a_loaded_module() {
    let soft = SoftDriver::exclusive();
    context();
    let (module, function) = spin_kernel();
    let (host, device) = mapped(16);
    let s = result::stream::create(StreamKind::NonBlocking).unwrap();
    // SAFETY: live handles, released once; the unloaded module's function
    // is used on purpose.
    unsafe {
        let (mut ns, mut out) = (1000u64, device);
        let mut params = [
            (&raw mut ns).cast::<std::ffi::c_void>(),
            (&raw mut out).cast::<std::ffi::c_void>(),
        ];
        assert_eq!(
            result::launch_kernel(function, (0, 1, 1), (1, 1, 1), 0, s, &mut params),
            Err(DriverError(CUresult::CUDA_ERROR_INVALID_VALUE))
        );
        assert_eq!(
            sys::cuLaunchKernel(
                function,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                s,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        result::module::unload(module).unwrap();
        let before = soft.counts().misuses;
        assert_eq!(
            launch(function, s, 1000, device),
            Err(DriverError(CUresult::CUDA_ERROR_INVALID_HANDLE))
        );
        assert_eq!(soft.counts().misuses, before + 1);
        soft.allow_misuses(1);
        result::stream::destroy(s).unwrap();
        result::free_host(host.cast()).unwrap();
    }
}
