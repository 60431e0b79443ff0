//! Every exported call enters here: counted, and failed instead when a
//! test chose so through the control API.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use crate::engine::{Fault, Outcome};

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

/// Count a call of `name`; `Err(status)` when a test chose it to fail.
pub(crate) fn enter(name: &'static str) -> Result<(), i32> {
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
    let injected = enter(name).err();
    if let Some(status) = injected
        && status == code(Fault::InvalidHandle)
    {
        return status;
    }
    let result = body().map_or_else(code, |()| 0);
    injected.unwrap_or(result)
}
