//! Waiting for a closed window: reading it when its device is past its
//! end, else handing it to the resolver thread, which asks without waiting.

pub(crate) mod placed_window;
pub(crate) mod reading;
pub(crate) mod resolver;
