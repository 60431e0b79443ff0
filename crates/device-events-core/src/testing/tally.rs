//! A raw backend that only counts (feature `sim`): the smallest
//! [`RawApi`], for the checked layer's tests and as the example of a
//! backend. Contexts are numbers, bound per thread; every driver call is
//! counted, and one on a handle that is not live, or with a context bound
//! that is not the handle's, is counted as a fault: what a real driver
//! would not survive.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use std::time::Duration;

use crate::backend::State;
use crate::backend::raw::{CallNames, Permit, RawApi};
use crate::driver::{DriverError, ErrorKind};

/// The counting backend.
#[derive(Debug)]
pub struct Tally;

/// A counted handle: its number and its context.
#[derive(Debug)]
pub struct TallyHandle {
    id: u64,
    context: u32,
}

#[derive(Default)]
struct Book {
    next: u64,
    live: HashMap<u64, u32>,
    calls: HashMap<&'static str, u64>,
    faults: u64,
}

static BOOK: LazyLock<Mutex<Book>> = LazyLock::new(Mutex::default);
/// Set: a record on a calibrator thread stays in the "driver" until it is
/// cleared (10 s at most), as an enqueue into a hung device's full queue
/// does; [`RECORD_HELD`] meanwhile. Outside the book's lock.
static HOLD_CALIBRATOR_RECORDS: AtomicBool = AtomicBool::new(false);
static RECORD_HELD: AtomicBool = AtomicBool::new(false);
static STATE: State<Tally> = State::new();

thread_local! {
    static CURRENT: Cell<Option<u32>> = const { Cell::new(None) };
}

fn book() -> MutexGuard<'static, Book> {
    BOOK.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tally {
    /// Make context `context` current on this thread (`None`: none).
    pub fn set_current(context: Option<u32>) {
        CURRENT.set(context);
    }

    /// The context current on this thread.
    pub fn current() -> Option<u32> {
        CURRENT.get()
    }

    /// How many times the driver call `name` ran.
    pub fn calls(name: &str) -> u64 {
        book().calls.get(name).copied().unwrap_or(0)
    }

    /// Calls on a handle that was not live, or with another context bound.
    pub fn faults() -> u64 {
        book().faults
    }

    /// While `hold`, a record on a calibrator thread stays in the "driver"
    /// until this is called again with `false` (10 s at most), as an
    /// enqueue into the full queue of a hung device does.
    pub fn hold_calibrator_records(hold: bool) {
        HOLD_CALIBRATOR_RECORDS.store(hold, Ordering::Release);
    }

    /// Whether a calibrator thread's record is held now.
    pub fn calibrator_record_held() -> bool {
        RECORD_HELD.load(Ordering::Acquire)
    }

    fn held_on_a_calibrator() {
        if HOLD_CALIBRATOR_RECORDS.load(Ordering::Acquire)
            && std::thread::current().name() == Some("device-events-calibrator")
        {
            RECORD_HELD.store(true, Ordering::Release);
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while HOLD_CALIBRATOR_RECORDS.load(Ordering::Acquire)
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            RECORD_HELD.store(false, Ordering::Release);
        }
    }

    fn call(name: &'static str, handles: &[&TallyHandle]) -> Result<(), DriverError> {
        let mut book = book();
        *book.calls.entry(name).or_default() += 1;
        let bound = CURRENT.get();
        let bad = handles
            .iter()
            .any(|h| book.live.get(&h.id) != Some(&h.context) || bound != Some(h.context));
        if bad {
            book.faults += 1;
        }
        Ok(())
    }

    fn make(name: &'static str) -> Result<TallyHandle, DriverError> {
        Self::call(name, &[])?;
        let context = CURRENT.get().ok_or_else(|| {
            DriverError::refused("tally", name, ErrorKind::InvalidHandle, "no context")
        })?;
        let mut book = book();
        book.next += 1;
        let id = book.next;
        book.live.insert(id, context);
        Ok(TallyHandle { id, context })
    }

    fn release(name: &'static str, handle: &TallyHandle) -> Result<(), DriverError> {
        Self::call(name, &[handle])?;
        book().live.remove(&handle.id);
        Ok(())
    }
}

impl RawApi for Tally {
    const BACKEND: &'static str = "tally";
    const CALLS: CallNames = CallNames {
        create_event: "create_event",
        destroy_event: "destroy_event",
        record_event: "record_event",
        synchronize_event: "synchronize_event",
        query_event: "query_event",
        elapsed: "elapsed",
        create_stream: "create_stream",
        destroy_stream: "destroy_stream",
        wait_event: "wait_event",
        synchronize_stream: "synchronize_stream",
        bind: "bind",
    };
    type Context = u32;
    type Held = u32;
    type Restore = ();
    type Event = TallyHandle;
    type Stream = TallyHandle;
    type Handle = u64;

    fn state() -> &'static State<Self> {
        &STATE
    }
    fn current(_: Permit<Self>) -> Result<Option<u32>, DriverError> {
        *book().calls.entry("current").or_default() += 1;
        Ok(CURRENT.get())
    }
    /// Every stream is its own: a record is made in its context.
    fn records_in_own_context(_: &TallyHandle) -> bool {
        true
    }
    fn hold_current(_: Permit<Self>, call: &'static str) -> Result<u32, DriverError> {
        CURRENT.get().ok_or_else(|| {
            DriverError::refused("tally", call, ErrorKind::InvalidHandle, "no context")
        })
    }
    fn context_of(held: &u32) -> u32 {
        *held
    }
    fn bind(_: Permit<Self>, held: &u32) -> Result<(), DriverError> {
        *book().calls.entry("bind").or_default() += 1;
        CURRENT.set(Some(*held));
        Ok(())
    }
    fn unbind(_: Permit<Self>, (): (), previous: Option<u32>) -> Result<(), DriverError> {
        CURRENT.set(previous);
        Ok(())
    }
    fn create_event(
        _: Permit<Self>,
        _: &u32,
        _: bool,
        timing: bool,
    ) -> Result<TallyHandle, DriverError> {
        Self::make(if timing {
            "create_event"
        } else {
            "create_event_without_timing"
        })
    }
    fn destroy_event(_: Permit<Self>, event: TallyHandle) -> Result<(), DriverError> {
        Self::release("destroy_event", &event)
    }
    fn record_event(_: Permit<Self>, e: &TallyHandle, s: &TallyHandle) -> Result<(), DriverError> {
        Self::held_on_a_calibrator();
        Self::call("record_event", &[e, s])
    }
    fn synchronize_event(_: Permit<Self>, event: &TallyHandle) -> Result<(), DriverError> {
        Self::call("synchronize_event", &[event])
    }
    fn query_event(_: Permit<Self>, event: &TallyHandle) -> Result<bool, DriverError> {
        Self::call("query_event", &[event]).map(|()| true)
    }
    fn elapsed(_: Permit<Self>, a: &TallyHandle, b: &TallyHandle) -> Result<Duration, DriverError> {
        Self::call("elapsed", &[a, b]).map(|()| Duration::ZERO)
    }
    fn create_stream(_: Permit<Self>, _: &u32) -> Result<TallyHandle, DriverError> {
        Self::make("create_stream")
    }
    fn destroy_stream(_: Permit<Self>, stream: TallyHandle) -> Result<(), DriverError> {
        Self::release("destroy_stream", &stream)
    }
    fn wait_event(_: Permit<Self>, s: &TallyHandle, e: &TallyHandle) -> Result<(), DriverError> {
        // A wait may cross contexts: only the stream's is bound.
        if !book().live.contains_key(&e.id) {
            book().faults += 1;
        }
        Self::call("wait_event", &[s])
    }
    fn synchronize_stream(_: Permit<Self>, stream: &TallyHandle) -> Result<(), DriverError> {
        Self::call("synchronize_stream", &[stream])
    }
    fn stream_handle(stream: &TallyHandle) -> u64 {
        stream.id
    }
}
