//! The seam a backend implements: its driver calls, each turning a status
//! into a [`DriverError`], and nothing else. Liveness, binding, refusals
//! and capture modes are the checked layer's, written once (`checked.rs`),
//! whose handles ([`CheckedStream`],
//! [`CheckedEvent`](crate::backend::CheckedEvent)) and table of live
//! streams ([`State`]) these calls name.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::atomic::AtomicU32;

use std::time::Duration;

use crate::anchoring::{Gate, HostStamp};
use crate::backend::{CheckedStream, State};
use crate::driver::{CaptureStatus, DriverError};

/// Proof that a call comes from the checked layer, which only this crate
/// can make. A raw call's safety rests on what that layer guarantees: its
/// handles are live and of one context, the handle's context is bound (held
/// alive by [`RawApi::Held`]; a call whose binding fails is refused, except
/// a release, [`RawApi::destroy_event`], [`RawApi::destroy_stream`] and
/// [`HostWord::free`], which must happen whatever the binding does and is
/// then made unbound: a backend's release relies on its handle alone), and
/// each handle is destroyed exactly once. One call has the context current
/// on its caller's word instead of the layer's check:
/// [`ThreadApi::event_record_in_current`](crate::backend::ThreadApi::event_record_in_current),
/// a record, and only on a stream for which the backend says
/// [`RawApi::records_in_own_context`].
/// A user cannot reach a raw call around it.
pub struct Permit<R>(PhantomData<fn() -> R>);

impl<R> Clone for Permit<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Permit<R> {}

impl<R> Permit<R> {
    pub(crate) const fn new() -> Self {
        Self(PhantomData)
    }
}

/// The names of a backend's driver calls, for the errors the checked layer
/// raises before the driver is reached.
#[derive(Clone, Copy, Debug)]
pub struct CallNames {
    /// `cuEventCreate`, `hipEventCreateWithFlags`, ...
    pub create_event: &'static str,
    /// `cuEventDestroy_v2`, ...
    pub destroy_event: &'static str,
    /// `cuEventRecord`, ...
    pub record_event: &'static str,
    /// `cuEventSynchronize`, ...
    pub synchronize_event: &'static str,
    /// `cuEventQuery`, ...
    pub query_event: &'static str,
    /// `cuEventElapsedTime`, ...
    pub elapsed: &'static str,
    /// `cuStreamCreate`, ...
    pub create_stream: &'static str,
    /// `cuStreamDestroy_v2`, ...
    pub destroy_stream: &'static str,
    /// `cuStreamWaitEvent`, ...
    pub wait_event: &'static str,
    /// `cuStreamSynchronize`, ...
    pub synchronize_stream: &'static str,
    /// `cuCtxPushCurrent_v2`, `hipSetDevice`, ...: binding a context.
    pub bind: &'static str,
}

/// A backend's driver calls. Implementing it makes the backend an
/// [`EventApi`](crate::EventApi), [`EventQuery`](crate::backend::EventQuery),
/// [`FenceApi`](crate::backend::FenceApi), [`ThreadApi`](crate::backend::ThreadApi) and
/// [`AnchorApi`](crate::backend::AnchorApi), whose streams and events are the
/// checked [`CheckedStream`] and
/// [`CheckedEvent`](crate::backend::CheckedEvent).
///
/// # Soundness
///
/// A safe trait on purpose: nothing unsafe relies on an implementation
/// being right. This crate has no `unsafe` code (`forbid(unsafe_code)`), so
/// no implementation can make it unsound; the unsafe code is the backend's
/// own driver calls, and what those rely on is the [`Permit`] each raw call
/// receives, which only this crate's checked layer can make, and which
/// stands for its guarantees: live handles of one context, that context
/// bound and held, each handle destroyed once. A backend keeps each
/// `unsafe` block's `SAFETY:` comment to those guarantees, and never keeps
/// a permit past the call it came with.
///
/// Each call runs with its handle's context bound (a release, perhaps
/// not: see [`Permit`]), on live handles; it
/// issues its driver call and turns the status into a [`DriverError`]
/// naming the call. The optional calls default to "not here".
///
/// The counting backend of this crate's tests is one
/// (`tally::Tally`, feature `sim`): its calls see only live
/// handles with their own context bound, whatever the caller does.
///
/// ```
/// use device_events_core::{EventApi, EventFence, tally::Tally};
///
/// Tally::set_current(Some(1));
/// let stream = Tally::stream_create_non_blocking()?;
/// Tally::set_current(Some(2));
/// let mut event = Tally::event_create()?; // context 2's
/// assert!(Tally::event_record(&event, stream).is_err()); // refused: context 1's stream
/// EventFence::<Tally>::new(stream).wait_sync()?; // a fence takes its stream's context
/// Tally::set_current(None);
/// Tally::stream_synchronize(stream)?; // context 1 bound for the call
/// Tally::event_destroy(&mut event)?; // context 2 bound for the call
/// Tally::stream_destroy(stream)?;
/// // Every copy of a destroyed stream is refused before the driver.
/// assert!(Tally::stream_synchronize(stream).is_err());
/// assert_eq!(Tally::faults(), 0);
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub trait RawApi: Sized + Send + Sync + 'static {
    /// The backend's name, as a reader of a log line sees it.
    const BACKEND: &'static str;
    /// The driver calls' names.
    const CALLS: CallNames;
    /// Whether a stream may wait for an event of another context (CUDA and
    /// HIP allow it; OpenCL does not).
    const WAITS_ACROSS_CONTEXTS: bool = true;
    /// Whether a calibration polls its anchor before waiting for it.
    const POLLS_ANCHORS: bool = true;

    /// A context's identity: compared, never bound.
    type Context: Copy + Eq + std::hash::Hash + Debug + Send + Sync;
    /// A context kept alive for as long as a handle of it lives (a retain);
    /// binding takes one, so no torn-down context reaches the driver.
    type Held: Clone + Send + Sync;
    /// What [`unbind`](Self::unbind) needs to give the thread its context
    /// back.
    type Restore;
    /// A driver event.
    type Event: Send + Sync;
    /// A driver stream.
    type Stream: Send + Sync;
    /// The driver's own stream handle, for calls this crate does not wrap.
    type Handle: Copy;

    /// The backend's table of live streams and its settings.
    fn state() -> &'static State<Self>;

    /// The calling thread's current context, if any.
    ///
    /// # Errors
    ///
    /// When the driver is missing or refuses.
    fn current(permit: Permit<Self>) -> Result<Option<Self::Context>, DriverError>;
    /// The current context, held; refused when there is none.
    ///
    /// # Errors
    ///
    /// When no context is current, or it cannot be held.
    fn hold_current(permit: Permit<Self>, call: &'static str) -> Result<Self::Held, DriverError>;
    /// A held context's identity.
    fn context_of(held: &Self::Held) -> Self::Context;
    /// Make `held` current.
    ///
    /// # Errors
    ///
    /// When the driver refuses.
    fn bind(permit: Permit<Self>, held: &Self::Held) -> Result<Self::Restore, DriverError>;
    /// Undo a [`bind`](Self::bind): `previous` is what was current before.
    ///
    /// # Errors
    ///
    /// When the driver refuses.
    fn unbind(
        permit: Permit<Self>,
        restore: Self::Restore,
        previous: Option<Self::Context>,
    ) -> Result<(), DriverError>;

    /// Create an event in the current context, `held`; `blocking_sync` makes
    /// its waits sleep instead of spin. `timing`: for windows and anchors,
    /// whose elapsed times are read; a fence's event is made without
    /// (`CU_EVENT_DISABLE_TIMING`, `hipEventDisableTiming`), the kind the
    /// drivers document as fast to record, query and wait on.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn create_event(
        permit: Permit<Self>,
        held: &Self::Held,
        blocking_sync: bool,
        timing: bool,
    ) -> Result<Self::Event, DriverError>;
    /// Release an event.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn destroy_event(permit: Permit<Self>, event: Self::Event) -> Result<(), DriverError>;
    /// Record `event` on `stream`, both of the bound context.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn record_event(
        permit: Permit<Self>,
        event: &Self::Event,
        stream: &Self::Stream,
    ) -> Result<(), DriverError>;
    /// Block until the device has reached `event`.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn synchronize_event(permit: Permit<Self>, event: &Self::Event) -> Result<(), DriverError>;
    /// Whether the device has reached `event`, without waiting.
    ///
    /// # Errors
    ///
    /// The driver's, for anything but "not ready".
    fn query_event(permit: Permit<Self>, event: &Self::Event) -> Result<bool, DriverError>;
    /// Device time from `start` to `end`, negative readings as zero.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn elapsed(
        permit: Permit<Self>,
        start: &Self::Event,
        end: &Self::Event,
    ) -> Result<Duration, DriverError>;
    /// Create a non-blocking stream in the current context, `held`.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn create_stream(permit: Permit<Self>, held: &Self::Held) -> Result<Self::Stream, DriverError>;
    /// Release a stream made by [`stream_create`](Self::create_stream).
    ///
    /// # Errors
    ///
    /// The driver's.
    fn destroy_stream(permit: Permit<Self>, stream: Self::Stream) -> Result<(), DriverError>;
    /// Make `stream` wait for `event` on the device.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn wait_event(
        permit: Permit<Self>,
        stream: &Self::Stream,
        event: &Self::Event,
    ) -> Result<(), DriverError>;
    /// Block until `stream`'s work is done.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn synchronize_stream(permit: Permit<Self>, stream: &Self::Stream) -> Result<(), DriverError>;
    /// The driver's handle of a stream.
    fn stream_handle(stream: &Self::Stream) -> Self::Handle;

    /// Whether `stream` captures a graph; `None` where the driver cannot
    /// say.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn capture_status(
        permit: Permit<Self>,
        stream: &Self::Stream,
    ) -> Result<Option<CaptureStatus>, DriverError> {
        let _ = (permit, stream);
        Ok(None)
    }

    /// Whether a record on `stream` is made in the stream's own context,
    /// whatever context is current: so where a caller vouches that the
    /// stream's context is current
    /// ([`ThreadApi::event_record_in_current`](crate::backend::ThreadApi::event_record_in_current)),
    /// the checked layer records without asking the driver which is. Even
    /// on a caller's broken word the driver then gets a record of an event
    /// and a stream of one context, which its documentation allows
    /// (`cuEventRecord`: "hEvent and hStream must be from the same
    /// context"), not a stream named by whatever context is current.
    /// `false`, the default, has every record on `stream` bind its
    /// context: what a backend says for a handle that the current context
    /// resolves (CUDA's null, legacy and per-thread streams), and for any
    /// stream of a driver whose rule for a record on another context's
    /// stream is not settled (HIP's, for now).
    fn records_in_own_context(stream: &Self::Stream) -> bool {
        let _ = stream;
        false
    }

    /// Whether the driver reads `stream` when it takes an event last
    /// recorded there (a query, a wait, a destroy, a stream's wait on it),
    /// as ROCm's runtime does with no check that the stream still lives
    /// (clr `hipEventQuery`, `hipEventSynchronize`) or with a check and no
    /// lock (`hipEventDestroy`, `hipStreamWaitEvent`). The checked layer
    /// then holds the stream live across each such call; while the stream
    /// is being destroyed it answers "not yet" or waits for the destroy's
    /// end, and once it is gone it answers the event as reached without
    /// asking. So a backend that says `true` must also have a stream
    /// destroy that waits for the stream's work (`hipStreamDestroy` does,
    /// in clr, though HIP's reference does not promise it); a stream
    /// admitted from elsewhere is drained as it is forgotten.
    fn asking_reads_stream_of(stream: &Self::Stream) -> bool {
        let _ = stream;
        false
    }

    /// Whether asking an event last recorded on `stream` (a query or a
    /// wait) would invalidate `stream`'s capture if it captures now, as
    /// ROCm's runtime before 7.2 does even for a record made before the
    /// capture. The checked layer then asks the stream first: while it
    /// captures, a query reads not-ready and a wait is refused. Only
    /// asked where [`asking_reads_stream_of`](Self::asking_reads_stream_of)
    /// is `true` for the stream.
    fn asking_breaks_capture_of(stream: &Self::Stream) -> bool {
        let _ = stream;
        false
    }

    /// Swap the thread's capture interaction mode with `*mode`
    /// (`cuThreadExchangeStreamCaptureMode`); `Ok(false)` where the driver
    /// has no such call.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn exchange_capture_mode(permit: Permit<Self>, mode: &mut i32) -> Result<bool, DriverError> {
        let _ = (permit, mode);
        Ok(false)
    }

    /// A word of host memory mapped for the device, which the bound
    /// context's streams can wait on; `None` where the driver has none.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn host_word(
        permit: Permit<Self>,
        held: &Self::Held,
    ) -> Result<Option<Box<dyn HostWord<Self>>>, DriverError> {
        let _ = (permit, held);
        Ok(None)
    }

    /// A gate of the backend's own on `stream` (see
    /// [`AnchorApi::gate`](crate::backend::AnchorApi::gate)). `Ok(None)`, the
    /// default, has the checked layer make one over
    /// [`host_word`](Self::host_word), which gives none where that is
    /// `None` too.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn anchor_gate(
        permit: Permit<Self>,
        stream: CheckedStream<Self>,
    ) -> Result<Option<Box<dyn Gate>>, DriverError> {
        let _ = (permit, stream);
        Ok(None)
    }

    /// Where the device stamped `event` on the host clock, if the driver
    /// says (see [`AnchorApi::pairing`](crate::backend::AnchorApi::pairing)).
    ///
    /// # Errors
    ///
    /// The driver's.
    fn pairing(
        permit: Permit<Self>,
        event: &Self::Event,
        held: &Self::Held,
    ) -> Result<Option<HostStamp>, DriverError> {
        let _ = (permit, event, held);
        Ok(None)
    }
}

/// A mapped word of host memory made by [`RawApi::host_word`]. The checked
/// layer drains the stream before it keeps the word for another gate, and
/// frees it only in [`release_idle_events`](crate::process::release_idle_events).
pub trait HostWord<R: RawApi>: Send {
    /// The word, as the host writes it.
    fn word(&self) -> &AtomicU32;
    /// Queue on `stream` (its context bound) a wait until the word is at
    /// least `value`.
    ///
    /// # Errors
    ///
    /// The driver's; nothing is queued.
    fn wait_at_least(
        &self,
        permit: Permit<R>,
        stream: &R::Stream,
        value: u32,
    ) -> Result<(), DriverError>;
    /// Free the word, its context bound (or, where binding failed, not:
    /// the free relies on the pointer alone); no stream reads it any more.
    ///
    /// # Errors
    ///
    /// The driver's.
    fn free(self: Box<Self>, permit: Permit<R>) -> Result<(), DriverError>;
    /// As [`Gate::settle`].
    fn settle(&self) -> Duration;
}
