//! What a backend over a C ABI of the software driver (CUDA, HIP) promises
//! about statuses, checked handles and bound contexts, written once: each
//! check takes the ABI's names, and [`contract_suite!`](crate::contract_suite)
//! makes each a named `#[test]` of the backend's suite.

use device_events_core::{
    AnchorConfig, Backend, ErrorKind, EventFence, EventProfiler, ProfilerConfig,
};

use crate::soft::SoftDriver;

/// An ABI's names and context calls, for the checks below.
#[derive(Clone, Copy)]
pub struct Abi {
    /// Make device `n`'s context current on this thread.
    pub bind: fn(i32),
    /// The device whose context is current on this thread.
    pub current: fn() -> Option<i32>,
    /// The event create.
    pub create: &'static str,
    /// The event record.
    pub record: &'static str,
    /// The event wait.
    pub synchronize: &'static str,
    /// The stream synchronize.
    pub stream_synchronize: &'static str,
    /// The stream's wait on an event.
    pub stream_wait: &'static str,
    /// The stream destroy.
    pub stream_destroy: &'static str,
    /// A status that poisons the device, and its name.
    pub poisoning: (i32, &'static str),
}

/// A status becomes a `DriverError` naming the backend, the call, the
/// status's name and number, and its class: a poisoning fault is
/// `DevicePoisoned`, out of memory (2 in both ABIs) `OutOfResources`.
pub fn a_status_becomes_a_driver_error_with_call_code_name_and_class<A: Backend>(
    soft: &SoftDriver,
    abi: Abi,
) {
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let fence = EventFence::<A>::new(s);
    let (code, name) = abi.poisoning;
    assert!(soft.fail_call_here(abi.synchronize, 1, code));
    let err = fence.wait_sync().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: {} failed: {name} ({code})",
            A::BACKEND,
            abi.synchronize
        )
    );
    assert_eq!(
        (err.kind(), err.status()),
        (ErrorKind::DevicePoisoned, Some(i64::from(code)))
    );
    assert!(soft.fail_call_here(abi.record, 1, 2));
    let err = EventFence::<A>::new(s).wait_sync().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfResources, "{err}");
    drop(fence);
    A::stream_destroy(s).unwrap();
}

/// Calls on an event bind its own context (device), whatever the calling
/// thread's is, and give the caller's back.
pub fn an_event_is_bound_to_its_context_and_the_callers_restored<A: Backend>(
    _: &SoftDriver,
    abi: Abi,
) {
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let (start, end) = (A::event_create().unwrap(), A::event_create().unwrap());
    A::event_record(&start, s).unwrap();
    A::event_record(&end, s).unwrap();
    let after = std::thread::spawn(move || {
        (abi.bind)(1);
        let (mut start, mut end) = (start, end);
        A::event_wait(&end).unwrap();
        A::event_elapsed(&start, &end).unwrap();
        A::event_destroy(&mut start).unwrap();
        A::event_destroy(&mut end).unwrap();
        (abi.current)()
    })
    .join()
    .unwrap();
    assert_eq!(after, Some(1), "the caller's context is current again");
    A::stream_destroy(s).unwrap();
}

/// A record of an event on a stream of another context (device) is refused
/// before the driver sees it.
pub fn recording_on_another_contexts_stream_is_refused_before_the_driver<A: Backend>(
    soft: &SoftDriver,
    abi: Abi,
) {
    (abi.bind)(1);
    let foreign = A::stream_create_non_blocking().unwrap();
    (abi.bind)(0);
    let mut event = A::event_create().unwrap();
    soft.reset();
    let err = A::event_record(&event, foreign).unwrap_err();
    assert!(err.to_string().contains("different"), "{err}");
    assert!(!soft.called().contains(&abi.record.to_owned()));
    A::event_destroy(&mut event).unwrap();
    A::stream_destroy(foreign).unwrap();
}

/// Every copy of a destroyed stream is refused before the driver: no
/// synchronize, no second destroy, no record reaches it.
pub fn a_destroyed_stream_is_refused_before_the_driver<A: Backend>(soft: &SoftDriver, abi: Abi) {
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    A::stream_destroy(s).unwrap();
    soft.reset();
    let err = A::stream_synchronize(s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    let err = A::stream_destroy(s).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle, "{err}");
    let fence = EventFence::<A>::new(s);
    let err = fence.error().unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidHandle);
    // The call a fence makes on its stream, as a pooled fence names it:
    // not an event creation that never happened.
    assert_eq!(err.call(), abi.record, "{err}");
    drop(fence);
    let pool = device_events_core::FencePool::<A>::new();
    let pooled = pool.fence(s);
    assert_eq!(pooled.error().unwrap().call(), abi.record);
    drop(pooled);
    let called = soft.called();
    for call in [abi.stream_synchronize, abi.stream_destroy, abi.record] {
        assert!(
            !called.contains(&call.to_owned()),
            "{call} reached the driver"
        );
    }
    assert_eq!(soft.counts().misuses, 0);
}

/// A dropped fence's event is kept, and the next fence on a stream of its
/// context records it again: one event created for a fence made again and
/// again. Kept ones are few, and all are released on demand.
pub fn a_dropped_fences_event_serves_the_next_fence<A: Backend>(soft: &SoftDriver, abi: Abi) {
    (abi.bind)(0);
    let s = A::stream_create_non_blocking().unwrap();
    let base = soft.counts().events;
    soft.reset();
    for _ in 0..3 {
        let fence = EventFence::<A>::new(s);
        fence.wait_sync().unwrap();
    }
    assert_eq!(soft.call_count(abi.create), 1, "one event for three fences");
    let many: Vec<_> = (0..100).map(|_| EventFence::<A>::new(s)).collect();
    drop(many);
    assert_eq!(
        soft.counts().events,
        base,
        "kept events are released on demand (counts() releases them)"
    );
    A::stream_destroy(s).unwrap();
}

/// A fence's event is of its stream's context, whichever context the
/// thread has current: a fence on a device-1 stream made with device 0
/// current works, and device 0 is current again afterwards.
pub fn a_fence_follows_its_streams_context<A: Backend>(soft: &SoftDriver, abi: Abi) {
    (abi.bind)(1);
    let s = A::stream_create_non_blocking().unwrap();
    (abi.bind)(0);
    for _ in 0..2 {
        let fence = EventFence::<A>::new(s);
        assert!(fence.error().is_none(), "{:?}", fence.error());
        fence.wait_sync().unwrap();
    }
    assert_eq!((abi.current)(), Some(0));
    A::stream_destroy(s).unwrap();
    assert_eq!(soft.counts().misuses, 0);
}

/// The anchor's gate is closed on the device only until the host sees
/// the anchor's stream reach it (a mark recorded ahead of it), not for a
/// fixed settle time: here, with the gate's bound set to 5 s, the
/// user's records on the one hardware queue the anchor's stream shares wait
/// behind it for well under that, in every calibration sample.
pub fn a_closed_gate_holds_work_on_its_hardware_queue_only_until_the_stream_reaches_it<
    A: Backend,
>(
    soft: &SoftDriver,
    abi: Abi,
) {
    use std::time::{Duration, Instant};
    (abi.bind)(0);
    soft.set_hw_queues(1);
    let s = A::stream_create_non_blocking().unwrap();
    let mut profiler = EventProfiler::<A>::with_config(ProfilerConfig {
        anchor: AnchorConfig {
            gate_settle: Some(Duration::from_secs(5)),
            ..AnchorConfig::default()
        },
        ..ProfilerConfig::default()
    });
    /// Stops the user's records however the scope ends, a failed
    /// assertion included, so the test fails instead of hanging.
    struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stop = Stop(&done);
        scope.spawn(|| {
            (abi.bind)(0);
            let mut e = A::event_create().unwrap();
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                A::event_record(&e, s).unwrap();
                std::thread::sleep(Duration::from_micros(20));
            }
            A::event_wait(&e).unwrap();
            A::event_destroy(&mut e).unwrap();
        });
        // The first calibration, on the library's thread.
        let token = profiler.start(s);
        profiler.abandon(token).unwrap();
        let begun = Instant::now();
        assert!(device_events_core::process::wait_for_calibrations(
            Duration::from_secs(30)
        ));
        // The user's records went on past the calibration.
        std::thread::sleep(Duration::from_millis(5));
        drop(stop);
        assert!(begun.elapsed() < Duration::from_secs(30));
    });
    let held = soft.value_waits_held();
    drop(profiler);
    A::stream_synchronize(s).unwrap();
    A::stream_destroy(s).unwrap();
    soft.set_hw_queues(0);
    assert!(held.waits >= 5, "the gate held {} samples", held.waits);
    // Against a bound of 5 s: a busy machine's scheduling delays are far
    // below it; a gate kept closed for its bound is at it.
    assert!(
        held.delayed_max_ns < 1_000_000_000,
        "a user's record waited {} ms behind the closed gate",
        held.delayed_max_ns / 1_000_000
    );
    assert!(
        held.held_max_ns < 1_000_000_000,
        "the gate held its stream {} ms",
        held.held_max_ns / 1_000_000
    );
}

/// Makes each contract check a named `#[test]` of a backend's suite on the
/// software driver, given the ABI's [`Abi`].
#[macro_export]
macro_rules! contract_suite {
    ($backend:ty, $abi:expr) => {
        $crate::contract_suite!(@tests $backend, $abi,
            a_status_becomes_a_driver_error_with_call_code_name_and_class,
            an_event_is_bound_to_its_context_and_the_callers_restored,
            recording_on_another_contexts_stream_is_refused_before_the_driver,
            a_destroyed_stream_is_refused_before_the_driver,
            a_dropped_fences_event_serves_the_next_fence,
            a_fence_follows_its_streams_context,
            a_closed_gate_holds_work_on_its_hardware_queue_only_until_the_stream_reaches_it
        );
    };
    (@tests $backend:ty, $abi:expr, $($check:ident),+) => {
        $(
            #[test]
            fn $check() {
                let soft = $crate::soft::SoftDriver::exclusive();
                $crate::contract::$check::<$backend>(&soft, $abi);
            }
        )+
    };
}
