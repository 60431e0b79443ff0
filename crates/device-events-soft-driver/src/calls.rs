//! Every exported call enters here: counted, and failed instead when a
//! test chose so through the control API.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use crate::codes;
use crate::engine::{self, Fault, Outcome};

pub(crate) struct Injection {
    pub(crate) name: String,
    /// Calls of `name` still to pass before the one that fails.
    pub(crate) pass: u32,
    pub(crate) status: i32,
    /// Calls from this thread neither count nor fail.
    pub(crate) except: Option<std::thread::ThreadId>,
    /// Only calls from this thread count and fail.
    pub(crate) only: Option<std::thread::ThreadId>,
}

#[derive(Default)]
pub(crate) struct Control {
    pub(crate) injections: Vec<Injection>,
    pub(crate) calls: HashMap<&'static str, u64>,
    pub(crate) order: Vec<&'static str>,
    pub(crate) total: u64,
}

pub(crate) static CONTROL: LazyLock<Mutex<Control>> = LazyLock::new(Mutex::default);

pub(crate) fn control() -> MutexGuard<'static, Control> {
    CONTROL.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// Calls made by this thread since it began.
    pub(crate) static THREAD_CALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The process that made the first driver call; 0 before any.
static OWNER: AtomicU32 = AtomicU32::new(0);

/// `Err(status)` for a call made in a fork child of a process that had
/// already called the driver: counted as a misuse and refused before any
/// lock is taken, since a parent thread may have held one at the fork and
/// the child would wait on it forever. NVIDIA: any use of CUDA in a fork
/// child before `exec` is undefined (CUDA C++ Best Practices Guide; the
/// Programming Guide's note on `fork()`); clr's runtime state is likewise
/// not fork-safe. The status is NOT_INITIALIZED (3, `hipErrorNotInitialized`
/// also 3): what CUDA is reported to give a child of an initialised parent
/// (the runtime's "initialization error", which is the driver's 3), and
/// what HIP gives for a runtime it has not set up; the child owns no driver
/// state of its own. Costs one `getpid` per call.
fn refuse_fork_child() -> Result<(), i32> {
    let me = std::process::id();
    match OWNER.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            register_exit_handler();
            Ok(())
        }
        Err(owner) if owner == me => Ok(()),
        Err(_) => {
            engine::count_misuse();
            Err(codes::status(Fault::NotInitialized))
        }
    }
}

/// Set for good as the driver's exit handler begins: the process is
/// ending, and the driver tears its state down.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Exported calls in flight (entered, not yet returned).
static INSIDE: AtomicU64 = AtomicU64::new(0);
/// Calls in flight as the exit handler began, and calls made after.
static IN_FLIGHT_AT_EXIT: AtomicU64 = AtomicU64::new(0);
static AFTER_EXIT: AtomicU64 = AtomicU64::new(0);

/// Registered at the process's first driver call, before the caller's
/// own exit handlers (a library registers its own once the driver is
/// initialised): it runs after them, as a real driver's teardown does.
fn register_exit_handler() {
    // SAFETY: registers a function of no arguments that does not unwind.
    unsafe { libc::atexit(exit_handler) };
}

/// The driver's exit handler. NVIDIA: the driver's state is destroyed
/// during the host program's termination, and any use of the driver then is
/// undefined (CUDA C++ Guidelines for Robust and Safety Critical
/// Programming, rule 1.1); clr tears its runtime down in its own exit
/// handlers likewise. So a call in flight as this handler begins, or made
/// after it, is a counted misuse (and refused with DEINITIALIZED).
///
/// With `SOFT_DRIVER_EXIT_REPORT` set to a path, the teardown takes 100 ms,
/// as a real driver's does, during which late calls are counted, and then
/// writes `misuses N`, `in_flight N` and `after_exit N` lines there: what a
/// test reads of a process that has exited.
extern "C" fn exit_handler() {
    EXITING.store(true, Ordering::SeqCst);
    let inside = INSIDE.load(Ordering::SeqCst);
    IN_FLIGHT_AT_EXIT.store(inside, Ordering::SeqCst);
    for _ in 0..inside {
        engine::count_misuse();
    }
    let Some(path) = std::env::var_os("SOFT_DRIVER_EXIT_REPORT") else {
        return;
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let report = format!(
        "misuses {}\nin_flight {}\nafter_exit {}\n",
        engine::misuses(),
        IN_FLIGHT_AT_EXIT.load(Ordering::SeqCst),
        AFTER_EXIT.load(Ordering::SeqCst),
    );
    let _ = std::fs::write(path, report);
}

/// `Err(DEINITIALIZED)` for a call made once the driver's exit handler
/// began ([`exit_handler`]), counted as a misuse.
fn refuse_after_exit() -> Result<(), i32> {
    if EXITING.load(Ordering::SeqCst) {
        AFTER_EXIT.fetch_add(1, Ordering::SeqCst);
        engine::count_misuse();
        return Err(codes::status(Fault::Deinitialized));
    }
    Ok(())
}

/// An exported call in flight, from its entry to its return: what the
/// exit handler counts.
struct InFlight;

impl InFlight {
    fn enter() -> Self {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        Self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Count a call of `name`; `Err(status)` when a test chose it to fail, or
/// when it is made in a fork child ([`refuse_fork_child`]) or once the
/// process's exit handlers reached the driver's ([`refuse_after_exit`]).
pub(crate) fn enter(name: &'static str) -> Result<(), i32> {
    refuse_fork_child()?;
    refuse_after_exit()?;
    THREAD_CALLS.set(THREAD_CALLS.get() + 1);
    let mut control = control();
    control.total += 1;
    let count = control.calls.entry(name).or_insert(0);
    *count += 1;
    if *count == 1 {
        control.order.push(name);
    }
    let me = std::thread::current().id();
    let due = control
        .injections
        .iter()
        .position(|i| i.name == name && i.except != Some(me) && i.only.is_none_or(|t| t == me));
    if let Some(index) = due {
        let injection = &mut control.injections[index];
        if injection.pass == 0 {
            return Err(control.injections.remove(index).status);
        }
        injection.pass -= 1;
    }
    Ok(())
}

/// Run an exported call: count it, fail it with the injected status if a
/// test chose so, else run `body` and spell its fault with `code`.
pub(crate) fn call(
    name: &'static str,
    code: fn(Fault) -> i32,
    body: impl FnOnce() -> Outcome<()>,
) -> i32 {
    let _in_flight = InFlight::enter();
    if let Err(status) = enter(name) {
        return status;
    }
    body().map_or_else(code, |()| 0)
}

/// A release, failed as the drivers document the two ways it can fail:
/// - an invalid handle: nothing is freed (a handle that really is not live
///   is also a counted misuse, in the body);
/// - any other status reports an earlier asynchronous error: the handle is
///   freed all the same, and the status returned.
pub(crate) fn release(
    name: &'static str,
    code: fn(Fault) -> i32,
    body: impl FnOnce() -> Outcome<()>,
) -> i32 {
    // A fork child frees nothing: the handle is the parent's.
    if let Err(status) = refuse_fork_child() {
        return status;
    }
    let _in_flight = InFlight::enter();
    // Nor does a release after the driver's teardown began.
    if let Err(status) = refuse_after_exit() {
        return status;
    }
    let injected = enter(name).err();
    if let Some(status) = injected
        && status == code(Fault::InvalidHandle)
    {
        return status;
    }
    let result = body().map_or_else(code, |()| 0);
    injected.unwrap_or(result)
}
