//! What a backend may offer to place its anchor better than a bracket
//! around a record and a wait: a gate the anchor's stream waits behind, and
//! the host clock its device already stamps on.

pub(crate) mod anchor;
pub(crate) mod bracket;
pub(crate) mod calibrator;
pub(crate) mod drift;
pub(crate) mod line;
pub(crate) mod polling;
pub(crate) mod refresh;
pub(crate) mod stamp_clock;

use std::time::{Duration, Instant};

use crate::driver::DriverError;
use crate::threads::ThreadApi;
use crate::tunables::calibrator::{DRAIN_FIRST_SLEEP, DRAIN_SLEEP_UP_TO};

/// The optional anchoring calls of a backend, for the profiler. Every
/// [`RawApi`](crate::backend::RawApi) backend has it from the checked
/// layer, over the raw seam's optional calls. A type made over
/// [`EventApi`](crate::EventApi) directly (a test double, a wrapper) implements it itself,
/// beside its [`ThreadApi`](crate::backend::ThreadApi); every method has a
/// default that says "not here", and the profiler then falls back to the
/// bracket every driver allows.
///
/// Kept apart from [`EventApi`](crate::EventApi), whose shape is fixed.
///
/// ```
/// use device_events_core::{EventApi, backend::AnchorApi, sim::Sim};
///
/// let stream = Sim::stream_create_non_blocking()?;
/// // The simulated backend offers neither: its profiler brackets.
/// assert!(Sim::gate(stream)?.is_none());
/// # Sim::stream_destroy(stream)?;
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub trait AnchorApi: ThreadApi {
    /// A gate on `stream`: a host-written value the stream can be made to
    /// wait on (`cuStreamWaitValue32`, `hipStreamWaitValue32`, an OpenCL
    /// user event). `Ok(None)` where the driver or device has none.
    ///
    /// With it the anchor is recorded behind a closed gate, and the host
    /// reads its clock just before opening it: the record call and the
    /// launch latency fall before the bracket opens, not inside it.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver has gates but refused this one; the
    /// profiler logs it and brackets without.
    fn gate(stream: Self::Stream) -> Result<Option<Box<dyn Gate>>, DriverError> {
        let _ = stream;
        Ok(None)
    }

    /// Whether the device has reached `event`, asked without waiting;
    /// `None` where the backend cannot ask. A calibration polls this for a
    /// short while before it waits, so that a wait created for blocking
    /// synchronization, which wakes tens of microseconds late, does not
    /// widen the bracket.
    ///
    /// # Errors
    ///
    /// Inside the `Some`: the driver's error for anything but "not ready".
    fn poll(event: &Self::Event) -> Option<Result<bool, DriverError>> {
        let _ = event;
        None
    }

    /// The driver's own pairing of its clock with the host's: where it
    /// stamped `event` (reached) on the host's [`Instant`] clock, when the
    /// driver stamps events on a host clock it can name (PoCL:
    /// `CLOCK_MONOTONIC_RAW`), with its stated deviation; `Ok(None)` where
    /// it does not. The profiler holds it against a bracket taken beside it
    /// ([`DriverPairing`](crate::DriverPairing)).
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the stamp could not be read.
    fn pairing(event: &Self::Event) -> Result<Option<HostStamp>, DriverError> {
        let _ = event;
        Ok(None)
    }

    /// Whether `event` and `stream` are of one context; `None` where the
    /// backend cannot tell (or has no contexts). A profiler refuses an
    /// event it has just made on another context than its anchor's.
    fn same_context(event: &Self::Event, stream: Self::Stream) -> Option<bool> {
        let _ = (event, stream);
        None
    }
}

/// Wait until `stream` has done its work, by recording `event` behind it
/// and asking, from sleeps of at most [`DRAIN_SLEEP_UP_TO`], whether the device got there: `Some(true)` once
/// it has, `Some(false)` when the process began exiting first
/// ([`stop_driver_calls`](crate::process::stop_driver_calls)), `None` where the
/// backend cannot ask without waiting. A release drains so rather than by
/// a stream synchronize, which holds the thread in the driver for as long
/// as the work takes, the process's exit included. The caller has the
/// stream's context bound.
pub(crate) fn drained<A: AnchorApi>(
    event: &A::Event,
    stream: A::Stream,
) -> Result<Option<bool>, DriverError> {
    // Outside the library thread's piece of work, as an anchor's record is.
    crate::fork_gate::outside_library_work(|| A::event_record(event, stream))?;
    let mut interval = DRAIN_FIRST_SLEEP;
    loop {
        if crate::threads::stopping() {
            return Ok(Some(false));
        }
        match A::poll(event) {
            None => return Ok(None),
            Some(reached) => {
                if reached? {
                    return Ok(Some(true));
                }
            }
        }
        crate::fork_gate::outside_library_work(|| std::thread::sleep(interval));
        interval = (interval * 2).min(DRAIN_SLEEP_UP_TO);
    }
}

/// An event's stamp on the host clock, and how far the mapping between the
/// driver's clock and [`Instant`]'s can be off.
#[derive(Clone, Copy, Debug)]
pub struct HostStamp {
    /// The stamp, on the host clock.
    pub at: Instant,
    /// A bound on `at`'s error.
    pub uncertainty: Duration,
}

impl HostStamp {
    /// Where a stamp `stamp_ns` of a host clock a driver names
    /// (`CLOCK_MONOTONIC_RAW`, `CLOCK_MONOTONIC`) lies as an [`Instant`]:
    /// `now_ns` reads that clock, and is paired with [`Instant`] by the
    /// tightest of three reads between two `Instant` reads. Its bound is
    /// half that pair's width, and 1 ns for the stamp's own rounding.
    /// `None` for a stamp outside `Instant`'s range.
    ///
    /// ```
    /// use device_events_core::backend::HostStamp;
    /// use std::time::{Duration, Instant};
    ///
    /// // A clock counting nanoseconds from `origin`.
    /// let origin = Instant::now();
    /// let now_ns = || origin.elapsed().as_nanos() as i128;
    /// let stamp = HostStamp::on_clock(5_000, now_ns).expect("in range");
    /// let off = stamp.at.duration_since(origin).as_nanos().abs_diff(5_000);
    /// assert!(off <= stamp.uncertainty.as_nanos());
    /// ```
    pub fn on_clock(stamp_ns: i128, now_ns: impl Fn() -> i128) -> Option<Self> {
        let sample = || {
            let before = Instant::now();
            let ns = now_ns();
            let width = before.elapsed();
            (width, ns, before + width / 2)
        };
        let mut best = sample();
        for _ in 0..2 {
            let next = sample();
            if next.0 < best.0 {
                best = next;
            }
        }
        let (width, now, at_now) = best;
        let ago = now - stamp_ns;
        let by = Duration::from_nanos(u64::try_from(ago.unsigned_abs()).unwrap_or(u64::MAX));
        let at = if ago >= 0 {
            at_now.checked_sub(by)
        } else {
            at_now.checked_add(by)
        }?;
        Some(Self {
            at,
            uncertainty: width / 2 + Duration::from_nanos(1),
        })
    }
}

/// A host-written value one stream waits on, made by [`AnchorApi::gate`].
///
/// Each [`close`](Self::close) queues a wait on the stream that the next
/// [`open`](Self::open) satisfies. Dropping a gate must leave its stream
/// waiting on nothing and release what it holds only once the stream no
/// longer reads it.
pub trait Gate: Send {
    /// Queue, on the gate's stream, a wait until the next `open`.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refused the wait; nothing is queued.
    fn close(&mut self) -> Result<(), DriverError>;

    /// Let the stream past every wait queued so far.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver refused; the stream may still wait.
    fn open(&mut self) -> Result<(), DriverError>;

    /// The longest a stream takes to reach a gate just closed on it when
    /// no other work is ahead: a bound on the driver's launch latency. The
    /// host opens the gate as soon as the stream is there (a mark recorded
    /// ahead of it), or after this. Zero opens it at once, for a runtime
    /// whose worker threads fall asleep during any host wait (PoCL).
    fn settle(&self) -> Duration;

    /// Whether the queue has reached the wait queued last, for a gate that
    /// queues its own mark ahead of it (a stamp clock's); `None` (default):
    /// an event backend's anchor records a mark of its own.
    ///
    /// # Errors
    ///
    /// [`DriverError`] when the driver could not say; the gate is opened.
    fn reached(&mut self) -> Option<Result<bool, DriverError>> {
        None
    }
}
