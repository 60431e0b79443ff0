//! The conformance suite on this machine's OpenCL platform (PoCL in CI):
//! every check but graph capture, which OpenCL does not have, on the OpenCL
//! backend observed for the markers it records.

device_events_conformance::tests_need_an_installed_runtime!(
    "an OpenCL platform (PoCL)",
    "cargo xtask test-opencl"
);

mod support;

use support::Observed;

device_events_conformance::conformance_suite!(Observed, support::harness(), without capture);

#[test]
fn a_fence_is_complete_only_once_the_device_passes_it() {
    let plain = support::plain_harness::<device_events_opencl::OpenCl>();
    device_events_conformance::a_fence_is_complete_only_once_the_device_passes_it(&plain);
}
