//! The conformance suite on the CUDA backend, on the driver under test.

device_events_conformance::tests_run_on_the_software_driver!();

mod support;

device_events_conformance::conformance_suite!(device_events_cuda::Cuda, support::suite());

#[test]
fn a_fence_is_complete_only_once_the_device_passes_it() {
    device_events_conformance::a_fence_is_complete_only_once_the_device_passes_it(&support::suite());
}
