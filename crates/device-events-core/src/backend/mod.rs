//! The part only a backend author reads: the raw seam a backend
//! implements, and the checked layer that makes any such backend an
//! [`EventApi`](crate::EventApi), written once.

pub(crate) mod capture;
pub(crate) mod checked;
pub(crate) mod handle_table;
pub(crate) mod raw;
pub(crate) mod symbols;
