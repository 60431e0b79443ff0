//! The events fences, windows and anchors are made of: owned events
//! released once (`owned`), pooled events reused rather than made per
//! window (`pool`), and the points a window records (`point`).

pub(crate) mod owned;
pub(crate) mod point;
pub(crate) mod pool;
