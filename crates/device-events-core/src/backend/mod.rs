//! For backend authors: the raw seam a backend implements, [`RawApi`], its
//! driver calls alone, and what those calls name. Implementing it makes a
//! backend a [`Backend`](crate::Backend): the checked layer implements
//! [`EventApi`](crate::EventApi), [`EventQuery`], [`FenceApi`],
//! [`ThreadApi`] and [`AnchorApi`] over it once, with the checked handles,
//! the refusals, the context binding and the capture modes.
//!
//! Those traits are here too, for a type made over
//! [`EventApi`](crate::EventApi) directly (a test double, or a wrapper that
//! forwards to another backend), which implements each itself.
//! `docs/adding-a-backend.md` lists every place a new backend touches.

pub(crate) mod capture;
pub(crate) mod checked;
pub(crate) mod handle_table;
pub(crate) mod raw;
pub(crate) mod symbols;

pub use crate::anchoring::stamp_clock::StampClock;
pub use crate::anchoring::{AnchorApi, Gate, HostStamp};
pub use crate::api::EventQuery;
pub use crate::driver::elapsed_from_ms;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub use crate::driver::with_bound;
#[doc(inline)]
pub use crate::driver_functions;
pub use crate::fence::FenceApi;
pub use crate::threads::ThreadApi;
pub use checked::{CheckedEvent, CheckedStream, State};
pub use raw::{CallNames, HostWord, Permit, RawApi};
