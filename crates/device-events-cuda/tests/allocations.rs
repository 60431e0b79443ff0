//! What the submitting thread pays in heap allocations for a window the
//! resolver thread answers, on the driver under test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

device_events_conformance::count_allocations!();

#[test]
fn a_window_handed_to_the_resolver_allocates_nothing() {
    let _suite = support::suite();
    device_events_conformance::a_window_handed_to_the_resolver_allocates_nothing::<
        device_events_cuda::Cuda,
    >(allocations);
}
