//! What a window's reading is checked against: on the floor, as a
//! profiler's event pool carries them for its windows, and placement
//! reads them.

use std::time::Duration;

/// What a window's reading is checked against.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_distance: Duration,
    pub(crate) resolution: Duration,
}

impl Limits {
    /// For a pool whose events no window is read with (a fence pool's, an
    /// anchor's): none is placed under them.
    pub(crate) const NONE: Self = Self {
        max_distance: Duration::ZERO,
        resolution: Duration::ZERO,
    };
}
