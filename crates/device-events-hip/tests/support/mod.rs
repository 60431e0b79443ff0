//! Shared by the HIP backend's test suites: the conformance crate's HIP
//! harness, which device-events-cubecl's server checks use too.
#![allow(unused_imports)]

pub use device_events_conformance::hip::*;
