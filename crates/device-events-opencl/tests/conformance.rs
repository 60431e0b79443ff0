//! The conformance suite on this machine's OpenCL platform (PoCL in CI):
//! every check but graph capture, which OpenCL does not have, on the OpenCL
//! backend observed for the markers it records.

mod support;

use support::Observed;

device_events_conformance::conformance_suite!(Observed, support::harness(), without capture);
