//! The error a driver call returns, and the conversions every backend shares.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, Mutex};

use std::time::Duration;

/// What a caller can do about a [`DriverError`]: the only part of it the core
/// branches on. Backends map their raw status codes onto these.
///
/// Non-exhaustive: a newer driver can bring a class worth telling apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The event or stream has not been reached yet; asking again later may
    /// succeed.
    NotReady,
    /// A sticky fault (illegal address, launch failure, ...): the context is
    /// unusable and every later call on it fails.
    DevicePoisoned,
    /// The driver ran out of memory, handles or another resource.
    OutOfResources,
    /// No driver library could be loaded, or it reports no usable device
    /// (AMD's runtime on a machine without an AMD GPU says "invalid device").
    NoDevice,
    /// The driver is not initialised, is shutting down (statuses seen at
    /// process exit), or the device is taken by another process.
    Unavailable,
    /// A handle that is not live: destroyed, never created, of a torn-down
    /// context, or not this backend's. Refused before the driver is reached
    /// wherever the backend can tell, since a real driver does not check.
    InvalidHandle,
    /// A stream capturing a graph is in the way: records and waits there are
    /// graph nodes, not timestamps.
    Capture,
    /// Anything else, including invalid values and statuses this crate does
    /// not know (a newer driver's), which keep their number.
    Other,
}

impl ErrorKind {
    /// The class of a CUDA driver (`CUresult`) or HIP runtime (`hipError_t`)
    /// status. HIP numbers its statuses as CUDA does, so one table serves
    /// both backends.
    ///
    /// ```
    /// use device_events_core::ErrorKind;
    ///
    /// assert_eq!(ErrorKind::of_status(600), ErrorKind::NotReady);
    /// assert_eq!(ErrorKind::of_status(700), ErrorKind::DevicePoisoned); // illegal address
    /// assert_eq!(ErrorKind::of_status(907), ErrorKind::Capture); // captured event
    /// assert_eq!(ErrorKind::of_status(101), ErrorKind::NoDevice); // hipInit, no AMD GPU
    /// assert_eq!(ErrorKind::of_status(4), ErrorKind::Unavailable); // deinitialized
    /// assert_eq!(ErrorKind::of_status(919), ErrorKind::Other); // newer than the table
    /// ```
    pub fn of_status(status: i64) -> Self {
        match status {
            600 => Self::NotReady,
            // ECC uncorrectable, illegal address, launch timeout, assert,
            // hardware stack error, illegal instruction, misaligned address,
            // invalid address space, invalid PC, launch failed: the context
            // is lost for good.
            214 | 700 | 702 | 710 | 714..=719 => Self::DevicePoisoned,
            // Unknown internal error: nothing says the context survived it,
            // so it is treated as lost.
            999 => Self::DevicePoisoned,
            // Out of memory, launch out of resources, HIP's runtime memory.
            2 | 701 | 1052 => Self::OutOfResources,
            // Stub library, insufficient driver, no device, invalid device
            // (an ordinal that does not exist; what `hipInit` returns on a
            // machine with no AMD GPU), system driver mismatch, not
            // supported on this device.
            34 | 35 | 100 | 101 | 803 | 804 => Self::NoDevice,
            // Not initialized, deinitialized (process exit), device
            // unavailable (exclusive-process mode, busy elsewhere).
            3 | 4 | 46 => Self::Unavailable,
            // Invalid context, invalid handle, context is destroyed.
            201 | 400 | 709 => Self::InvalidHandle,
            900..=908 => Self::Capture,
            _ => Self::Other,
        }
    }
}

/// A failed driver call: which backend, which call, the status and what it
/// means for the caller.
///
/// A plain value that clones, so a fence can keep the error its creation
/// met and hand it to whichever thread waits.
///
/// ```
/// use device_events_core::{DriverError, ErrorKind};
///
/// let err = DriverError::from_status(
///     "cuda",
///     "cuEventRecord",
///     400,
///     Some("CUDA_ERROR_INVALID_HANDLE"),
///     ErrorKind::Other,
/// );
/// assert_eq!(
///     err.to_string(),
///     "cuda: cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (400)"
/// );
/// ```
///
/// One pointer wide (the details are behind it, made only on the error
/// path): every driver call returns a `Result` of it, and a wide error would
/// be copied through each layer of every successful call too. A not-ready
/// status, which a window's reading meets at every ask while the device
/// works, is made once per call and shared: asking allocates nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct DriverError(Arc<Details>);

#[derive(Clone, PartialEq, Eq)]
struct Details {
    backend: &'static str,
    call: &'static str,
    status: Option<i64>,
    name: Option<Cow<'static, str>>,
    kind: ErrorKind,
    detail: Option<Cow<'static, str>>,
}

impl Details {
    /// `==`, the numbers first and a name by its address where that is
    /// the same (a `'static` name is most often the same literal): the
    /// "not ready" met at every ask is found without comparing words.
    fn same(&self, other: &Self) -> bool {
        fn same_str(a: &str, b: &str) -> bool {
            std::ptr::eq(a, b) || a == b
        }
        self.status == other.status
            && self.kind == other.kind
            && same_str(self.call, other.call)
            && same_str(self.backend, other.backend)
            && match (&self.name, &other.name) {
                (Some(a), Some(b)) => same_str(a, b),
                (a, b) => a == b,
            }
            && self.detail == other.detail
    }
}

impl DriverError {
    /// An error the driver returned: its numeric status and, where the driver
    /// has one, the status's symbolic name.
    pub fn from_status(
        backend: &'static str,
        call: &'static str,
        status: i64,
        name: Option<impl Into<Cow<'static, str>>>,
        kind: ErrorKind,
    ) -> Self {
        let details = Details {
            backend,
            call,
            status: Some(status),
            name: name.map(Into::into),
            kind,
            detail: None,
        };
        if kind == ErrorKind::NotReady && !matches!(details.name, Some(Cow::Owned(_))) {
            return Self::shared(details);
        }
        Self(Arc::new(details))
    }

    /// `details`, made once and shared by every error like it. Never
    /// waits: with the table busy (or left locked by a thread of the
    /// parent of a process made by `fork`), or full, it is made anew.
    fn shared(details: Details) -> Self {
        static MADE: Mutex<Vec<Arc<Details>>> = Mutex::new(Vec::new());
        thread_local! {
            /// The last one this thread made: a thread asking windows (the
            /// resolver) meets the same "not ready" at every ask, found
            /// here without the table's lock.
            static LAST: std::cell::RefCell<Option<Arc<Details>>> =
                const { std::cell::RefCell::new(None) };
        }
        let last = LAST.try_with(|last| {
            let last = last.try_borrow().ok()?;
            last.as_ref()
                .filter(|last| last.same(&details))
                .map(Arc::clone)
        });
        if let Ok(Some(same)) = last {
            return Self(same);
        }
        let made = Self::shared_in(&MADE, details);
        // A thread being torn down keeps none.
        let _ = LAST.try_with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                *last = Some(Arc::clone(&made.0));
            }
        });
        made
    }

    /// `details` from the table `made`, or made anew and kept there.
    fn shared_in(made: &Mutex<Vec<Arc<Details>>>, details: Details) -> Self {
        /// More than the not-ready statuses of every call of every backend.
        const MOST: usize = 64;
        let Ok(mut made) = made.try_lock() else {
            return Self(Arc::new(details));
        };
        if let Some(same) = made.iter().find(|made| made.same(&details)) {
            return Self(Arc::clone(same));
        }
        let details = Arc::new(details);
        if made.len() < MOST {
            made.push(Arc::clone(&details));
        }
        Self(details)
    }

    /// An error the driver returned, classified by [`ErrorKind::of_status`].
    pub fn from_c_status(
        backend: &'static str,
        call: &'static str,
        status: i64,
        name: Option<impl Into<Cow<'static, str>>>,
    ) -> Self {
        Self::from_status(backend, call, status, name, ErrorKind::of_status(status))
    }

    /// An error found before the driver was reached (no driver library, an
    /// event of another context), with the reason in words.
    pub fn refused(
        backend: &'static str,
        call: &'static str,
        kind: ErrorKind,
        detail: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self(Arc::new(Details {
            backend,
            call,
            status: None,
            name: None,
            kind,
            detail: Some(detail.into()),
        }))
    }

    /// Add a sentence of context to the error.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<Cow<'static, str>>) -> Self {
        Arc::make_mut(&mut self.0).detail = Some(detail.into());
        self
    }

    /// The backend that returned it, as in [`EventApi::BACKEND`](crate::EventApi::BACKEND).
    pub fn backend(&self) -> &'static str {
        self.0.backend
    }

    /// The driver call that failed, e.g. `cuEventRecord`.
    pub fn call(&self) -> &'static str {
        self.0.call
    }

    /// The driver's numeric status; `None` when the driver was never reached.
    pub fn status(&self) -> Option<i64> {
        self.0.status
    }

    /// The status's symbolic name, e.g. `CUDA_ERROR_NOT_READY`.
    pub fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    /// The class callers branch on.
    pub fn kind(&self) -> ErrorKind {
        self.0.kind
    }

    /// The added sentence of context, if any.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail.as_deref()
    }

    /// Whether the event or stream was simply not reached yet.
    pub fn is_not_ready(&self) -> bool {
        self.0.kind == ErrorKind::NotReady
    }

    /// Whether the context is lost for good.
    pub fn is_device_poisoned(&self) -> bool {
        self.0.kind == ErrorKind::DevicePoisoned
    }
}

impl fmt::Debug for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        f.debug_struct("DriverError")
            .field("backend", &d.backend)
            .field("call", &d.call)
            .field("status", &d.status)
            .field("name", &d.name)
            .field("kind", &d.kind)
            .field("detail", &d.detail)
            .finish()
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = &self.0;
        write!(f, "{}: {} failed", d.backend, d.call)?;
        match (&d.name, d.status) {
            (Some(name), Some(status)) => write!(f, ": {name} ({status})")?,
            (None, Some(status)) => write!(f, ": status {status}")?,
            (Some(name), None) => write!(f, ": {name}")?,
            (None, None) => {}
        }
        if let Some(detail) = &d.detail {
            write!(f, ": {detail}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DriverError {}

/// Turn a driver's `f32` millisecond reading into a [`Duration`], as
/// [`EventApi::event_elapsed`](crate::EventApi::event_elapsed) promises.
///
/// A negative reading (HIP has been seen to return them) becomes zero. A NaN
/// or infinite one is refused: no duration is true, and the conversion would
/// panic.
///
/// ```
/// use device_events_core::backend::elapsed_from_ms;
/// use std::time::Duration;
///
/// assert_eq!(elapsed_from_ms("hip", "hipEventElapsedTime", 1.5), Ok(Duration::from_micros(1500)));
/// assert_eq!(elapsed_from_ms("hip", "hipEventElapsedTime", -0.25), Ok(Duration::ZERO));
/// assert!(elapsed_from_ms("hip", "hipEventElapsedTime", f32::NAN).is_err());
/// ```
///
/// # Errors
///
/// A [`DriverError`] of kind [`ErrorKind::Other`] for a NaN or infinite reading.
pub fn elapsed_from_ms(
    backend: &'static str,
    call: &'static str,
    ms: f32,
) -> Result<Duration, DriverError> {
    if !ms.is_finite() {
        return Err(DriverError::refused(
            backend,
            call,
            ErrorKind::Other,
            format!("the driver returned a non-finite reading ({ms} ms)"),
        ));
    }
    if ms <= 0.0 {
        return Ok(Duration::ZERO);
    }
    // f64 holds every f32 exactly; round to the nearest nanosecond.
    let nanos = (f64::from(ms) * 1e6).round();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(Duration::from_nanos(nanos as u64))
}

/// Whether a stream is capturing a graph, as a backend's capture query
/// reports it: the screen callers apply before recording profiling events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing: records are timestamps.
    None,
    /// Capturing: records and waits become graph nodes.
    Active,
    /// A capture broken by an illegal call; it must be ended.
    Invalidated,
}

/// Run `call` with `wanted` bound to the calling thread (a CUDA context, a
/// HIP device), then bind back what was bound before: the backends' rule for
/// calls on an event or stream from any thread.
///
/// For tests of that rule (feature `sim`): the checked layer applies it to
/// every backend, so no backend calls it.
///
/// `current` reads what is bound, `bind` binds a value and `restore` puts
/// back the previous one (given what `current` read). If binding fails,
/// `call` runs unbound and the failure is logged: a release must happen
/// whatever the binding does, and the driver may well take the call. Use
/// it for releases only: this crate's checked layer refuses any other
/// call whose binding fails.
///
/// ```
/// use device_events_core::backend::with_bound;
/// use std::cell::Cell;
///
/// let bound = Cell::new(1);
/// let seen = with_bound(
///     "demo",
///     7,
///     || Ok(Some(bound.get())),
///     |v| Ok(bound.set(v)),
///     |previous| Ok(bound.set(previous.unwrap_or(0))),
///     || Ok(bound.get()),
/// );
/// assert_eq!((seen, bound.get()), (Ok(7), 1));
/// ```
///
/// A failure to restore is logged, never returned: the call's outcome is
/// the truth about the handle, and a destructor must not report a released
/// event as leaked.
///
/// # Errors
///
/// `call`'s error.
#[cfg(feature = "sim")]
pub fn with_bound<H: PartialEq + Copy, T>(
    backend: &'static str,
    wanted: H,
    current: impl FnOnce() -> Result<Option<H>, DriverError>,
    bind: impl FnOnce(H) -> Result<(), DriverError>,
    restore: impl FnOnce(Option<H>) -> Result<(), DriverError>,
    call: impl FnOnce() -> Result<T, DriverError>,
) -> Result<T, DriverError> {
    bound_then(backend, wanted, (current, bind, restore), call, true)
}

/// As [`with_bound`]; with `unbound_ok` false, a call whose binding fails
/// is refused with the binding's error, never made unbound: for calls that
/// rely on the context being current (a create, a record, a wait), where
/// the driver would take the thread's current context (or none) for the
/// handle's.
pub(crate) fn bound_then<H: PartialEq + Copy, T>(
    backend: &'static str,
    wanted: H,
    (current, bind, restore): (
        impl FnOnce() -> Result<Option<H>, DriverError>,
        impl FnOnce(H) -> Result<(), DriverError>,
        impl FnOnce(Option<H>) -> Result<(), DriverError>,
    ),
    call: impl FnOnce() -> Result<T, DriverError>,
    unbound_ok: bool,
) -> Result<T, DriverError> {
    let previous = match current() {
        Ok(previous) => previous,
        Err(err) if unbound_ok => {
            log::warn!("{backend}: calling without binding the handle's context: {err}");
            return call();
        }
        Err(err) => return Err(refused_unbound(backend, err)),
    };
    if previous == Some(wanted) {
        return call();
    }
    if let Err(err) = bind(wanted) {
        if unbound_ok {
            log::warn!("{backend}: calling without binding the handle's context: {err}");
            return call();
        }
        return Err(refused_unbound(backend, err));
    }
    // Restored however `call` ends, a panic unwinding through it included:
    // the caller's thread must not be left with another context current.
    let mut restoring = Undo(Some(move || restore(previous)));
    let outcome = call();
    if let Some(Err(restore)) = restoring.run() {
        // The call's own outcome is what the caller asked for, and a release
        // that succeeded did release: say exactly that, and hand the outcome
        // back unchanged.
        let done = if outcome.is_ok() {
            "succeeded"
        } else {
            "failed"
        };
        log::error!(
            "{backend}: the call {done}, but the caller's binding could not be restored: {restore}"
        );
    }
    outcome
}

/// A call refused because its context could not be bound: the binding's
/// error, logged.
fn refused_unbound(backend: &'static str, err: DriverError) -> DriverError {
    log::warn!("{backend}: the handle's context could not be bound, the call is refused: {err}");
    err
}

/// Runs its closure once: when asked, or when dropped, unwinding included.
pub(crate) struct Undo<R, F: FnOnce() -> R>(pub(crate) Option<F>);

impl<R, F: FnOnce() -> R> Undo<R, F> {
    /// Run it now, if it has not run.
    pub(crate) fn run(&mut self) -> Option<R> {
        self.0.take().map(|undo| undo())
    }
}

impl<R, F: FnOnce() -> R> Drop for Undo<R, F> {
    fn drop(&mut self) {
        self.run();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_ready(call: &'static str, status: i64) -> DriverError {
        DriverError::from_status("test", call, status, Some("NOT_READY"), ErrorKind::NotReady)
    }

    #[test]
    fn a_not_ready_status_met_again_is_the_one_made_before() {
        let (first, again) = (not_ready("ask", 600), not_ready("ask", 600));
        assert!(Arc::ptr_eq(&first.0, &again.0), "made anew");
    }

    #[test]
    fn a_shared_not_ready_status_names_its_own_call_and_status() {
        let _ = not_ready("first", 600);
        let other = not_ready("second", 34);
        assert_eq!((other.call(), other.status()), ("second", Some(34)));
        // Equal words at another address are the same error.
        let copied: &'static str = String::from("second").leak();
        let again = not_ready(copied, 34);
        assert!(Arc::ptr_eq(&other.0, &again.0));
    }
}
