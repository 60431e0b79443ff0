//! The conformance suite on the HIP backend, on the runtime under test.

mod support;

device_events_conformance::conformance_suite!(device_events_hip::Hip, support::suite());
