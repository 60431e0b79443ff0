//! A backend's state, one `static` of its own ([`RawApi::state`]): its table
//! of live streams, how its events wait, and what it keeps for reuse.

use std::sync::atomic::{AtomicBool, Ordering};

use super::idle::Idle;
use super::stream::Live;
use crate::backend::handle_table::{Handle, HandleTable};
use crate::backend::raw::RawApi;

/// A backend's live streams and settings, kept in a `static` of its own
/// ([`RawApi::state`]).
pub struct State<R: RawApi> {
    pub(crate) streams: HandleTable<Live<R>>,
    pub(crate) blocking_sync: AtomicBool,
    /// Fences' events and gates' words kept for reuse.
    pub(crate) idle: Idle<R>,
    /// Events dropped while the stream of their last record was being
    /// destroyed, where the driver reads that stream as it destroys an
    /// event: destroyed by that stream's destroy, once it has returned.
    #[allow(clippy::type_complexity)]
    pub(crate) after_close: parking_lot::Mutex<Vec<(Handle, R::Event, R::Held)>>,
}

impl<R: RawApi> State<R> {
    /// No streams yet; events spin while they wait.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self {
            streams: HandleTable::new(),
            blocking_sync: AtomicBool::new(false),
            idle: Idle::new(),
            after_close: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Whether events made from now on wait by sleeping rather than
    /// spinning: a sleeping wait costs no core and wakes tens of
    /// microseconds late. Events made before keep their mode.
    pub fn set_blocking_sync(&self, blocking: bool) {
        if self.blocking_sync.swap(blocking, Ordering::Relaxed) != blocking {
            // Idle events wait the old way.
            self.idle.release_events();
        }
    }

    /// How many streams are live (made or admitted, not yet destroyed).
    pub fn live_streams(&self) -> usize {
        self.streams.len()
    }

    /// Destroy this backend's idle fence events, and free its idle gate
    /// words.
    pub fn release_idle(&self) {
        self.idle.release_events();
        self.idle.release_words();
    }
}
