//! The conformance suite on the CUDA backend, on the driver under test.

mod support;

device_events_conformance::conformance_suite!(device_events_cuda::Cuda, support::suite());
