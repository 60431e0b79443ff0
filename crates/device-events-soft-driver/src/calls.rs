//! Every exported call enters here: counted, and failed instead when a
//! test chose so through the control API.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
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
        Ok(_) => Ok(()),
        Err(owner) if owner == me => Ok(()),
        Err(_) => {
            engine::count_misuse();
            Err(codes::status(Fault::NotInitialized))
        }
    }
}

/// Count a call of `name`; `Err(status)` when a test chose it to fail, or
/// when it is made in a fork child ([`refuse_fork_child`]).
pub(crate) fn enter(name: &'static str) -> Result<(), i32> {
    refuse_fork_child()?;
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
        .position(|i| i.name == name && i.except != Some(me));
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
    let injected = enter(name).err();
    if let Some(status) = injected
        && status == code(Fault::InvalidHandle)
    {
        return status;
    }
    let result = body().map_or_else(code, |()| 0);
    injected.unwrap_or(result)
}
