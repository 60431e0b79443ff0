//! `fork` right after a window was handed to the resolver thread: the
//! child never asks the parent's events, nor releases them. Its own
//! binary: a child of a process running other tests could inherit a lock
//! one of them held.
#![allow(clippy::unwrap_used, clippy::expect_used)]

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

use device_events_conformance::soft::SoftDriver;
use device_events_core::EventApi;
use device_events_cuda::Cuda;

/// The check of `device_events_conformance::fork`, on the software driver,
/// which counts a fork child's driver calls (a real driver cannot be asked
/// in the child).
#[test]
fn a_child_forked_right_after_a_hand_over_asks_none_of_its_parents_events() {
    let Some(soft) = SoftDriver::unless_real() else {
        eprintln!("skipped: only the software driver counts a fork child's driver calls");
        return;
    };
    support::bind(0);
    let s = support::stream();
    let work = support::Memset::new(64 << 20);
    device_events_conformance::fork::a_child_forked_right_after_a_hand_over_asks_none_of_its_parents_events::<Cuda>(
        &soft, s, &work,
    );
    drop(work);
    Cuda::stream_destroy(s).unwrap();
}
