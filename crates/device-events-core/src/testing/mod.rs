//! Backends for tests: a simulated device and a counting backend over the
//! raw seam (feature `sim`).

pub mod sim;
pub mod tally;
