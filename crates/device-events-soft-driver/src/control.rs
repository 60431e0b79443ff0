//! The control API tests reach through `libloading`: fault injection, call
//! and live-handle counts, ground-truth timestamps and clock settings.

use std::ffi::{CStr, c_char, c_void};

use crate::calls::{Control, Injection, control};
use crate::engine::ENGINE;
use crate::{clock, codes, cuda};

/// As [`soft_driver_fail_call`], for any nonzero `status`, including codes
/// no ABI table holds: what a newer driver than the bindings returns.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_fail_call_any(
    name: *const c_char,
    nth: u32,
    status: i32,
) -> i32 {
    if name.is_null() || nth == 0 || status == 0 {
        return -1;
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return -1;
    };
    control().injections.push(Injection {
        name: name.to_owned(),
        pass: nth - 1,
        status,
        except: None,
        only: None,
    });
    0
}

/// What the driver holds and has been asked, since the last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftCounts {
    /// Events created and not destroyed.
    pub events: u64,
    /// Streams created and not destroyed.
    pub streams: u64,
    /// Device allocations not freed.
    pub allocations: u64,
    /// Retained primary contexts.
    pub contexts: u64,
    /// Graphs ended and not destroyed.
    pub graphs: u64,
    /// Misuses: any use of a handle that was not live (destroyed, unknown,
    /// released twice), and calls on handles of a torn-down context.
    pub misuses: u64,
    /// Calls of exported driver functions.
    pub calls: u64,
}

/// Make the `nth` call from now (1: the next) of the exported function `name`
/// return `status`. Returns 0, or -1 when `name` is null or not UTF-8, `nth`
/// is 0, or `status` is not a status of that function's ABI.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_fail_call(name: *const c_char, nth: u32, status: i32) -> i32 {
    if name.is_null() || nth == 0 {
        return -1;
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return -1;
    };
    let abi = if name.starts_with("hip") {
        codes::Abi::Hip
    } else {
        codes::Abi::Cuda
    };
    let table = codes::table(abi);
    if status == 0 || !table.iter().any(|(code, _)| *code == status) {
        return -1;
    }
    control().injections.push(Injection {
        name: name.to_owned(),
        pass: nth - 1,
        status,
        except: None,
        only: None,
    });
    0
}

/// As [`soft_driver_fail_call`], counting only calls made on threads other
/// than the calling one: how a test reaches a call a library makes on a
/// thread of its own.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_fail_call_elsewhere(
    name: *const c_char,
    nth: u32,
    status: i32,
) -> i32 {
    // SAFETY: as this function's caller promises.
    unsafe { fail_call_with(name, nth, status, |i, me| i.except = Some(me)) }
}

/// As [`soft_driver_fail_call`], counting only calls made on the calling
/// thread: a test's own call, whatever the library's threads call
/// meanwhile.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_fail_call_here(
    name: *const c_char,
    nth: u32,
    status: i32,
) -> i32 {
    // SAFETY: as this function's caller promises.
    unsafe { fail_call_with(name, nth, status, |i, me| i.only = Some(me)) }
}

/// [`soft_driver_fail_call`], then `which` on the injection it made, with
/// the calling thread.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
unsafe fn fail_call_with(
    name: *const c_char,
    nth: u32,
    status: i32,
    which: impl FnOnce(&mut Injection, std::thread::ThreadId),
) -> i32 {
    // SAFETY: as this function's caller promises.
    let done = unsafe { soft_driver_fail_call(name, nth, status) };
    if done == 0
        && let Some(last) = control().injections.last_mut()
    {
        which(last, std::thread::current().id());
    }
    done
}

/// How many times the exported function `name` was called since the last
/// reset; 0 for a null or unknown name.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_call_count(name: *const c_char) -> u64 {
    if name.is_null() {
        return 0;
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return 0;
    };
    control().calls.get(name).copied().unwrap_or(0)
}

/// Driver calls the calling thread has made since it began: what a
/// library costs the thread that submits work, apart from its own threads.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_thread_calls() -> u64 {
    crate::calls::THREAD_CALLS.get()
}

/// Misuses since the process began, read without taking any lock: what a
/// fork child can still ask.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_misuses() -> u64 {
    crate::engine::misuses()
}

/// Calls that a capture's interaction mode prohibited since the process
/// began: each failed with 900 and invalidated the capture.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_capture_violations() -> u64 {
    ENGINE.capture_violations()
}

/// Map each device's streams made from now on onto `queues` hardware
/// queues in turn, so that streams sharing one wait for each other's work
/// (false dependencies), as a GPU with more streams than queues does. 0:
/// one queue per stream, the default.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_hw_queues(queues: u32) {
    ENGINE.set_hw_queues(queues as usize);
}

/// Forget injections, call counts and value waits' costs, and give the
/// streams made from now on the hardware queues the environment asks for
/// (`CUDA_DEVICE_MAX_CONNECTIONS`; by default, one each).
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_reset() {
    *control() = Control::default();
    crate::engine::ENGINE.reset_held();
    clock::set_check_to_use_ns(0);
    // A test that failed before restoring it leaves no shared queues.
    ENGINE.set_hw_queues(clock::max_connections());
}

/// Write the current counts to `out`. Returns 0, or -1 for a null `out`.
///
/// # Safety
///
/// `out` is null or valid for a write of [`SoftCounts`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_counts(out: *mut SoftCounts) -> i32 {
    if out.is_null() {
        return -1;
    }
    let live = ENGINE.live();
    let counts = SoftCounts {
        events: live.events,
        streams: live.streams,
        allocations: live.allocations,
        contexts: cuda::retained_contexts(),
        graphs: live.graphs,
        misuses: live.misuses,
        calls: control().total,
    };
    // SAFETY: non-null, and the caller promises it is valid for the write.
    unsafe { out.write(counts) };
    0
}

/// The names of the functions called since the last reset, comma-separated
/// in order of first call, NUL-terminated into `buffer` when `capacity`
/// allows. Returns the length the full list needs, NUL excluded.
///
/// # Safety
///
/// `buffer` is null or valid for writes of `capacity` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_called(buffer: *mut c_char, capacity: usize) -> usize {
    let list = control().order.join(",");
    if !buffer.is_null() && capacity > list.len() {
        // SAFETY: `buffer` holds `capacity` > len bytes, by the caller's
        // promise; the source is a live string of `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(list.as_ptr().cast::<c_char>(), buffer, list.len());
            buffer.add(list.len()).write(0);
        }
    }
    list.len()
}

/// Host-clock nanoseconds (see [`soft_driver_host_now_ns`]) at which the
/// device reached `event`: the truth a placement is checked against.
/// Returns 0, or -1 for an unknown, unrecorded or unreached event.
///
/// # Safety
///
/// `out` is null or valid for a write of a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_event_truth_ns(event: *mut c_void, out: *mut u64) -> i32 {
    match ENGINE.event_truth(event as u64) {
        Ok(ns) if !out.is_null() => {
            // SAFETY: non-null, and the caller promises it is valid.
            unsafe { out.write(ns) };
            0
        }
        _ => -1,
    }
}

/// The handle of the event the calling thread recorded last, by either ABI:
/// how a test finds the event a library recorded for it, to read its truth.
/// Per thread: a library records on threads of its own too.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_last_recorded_event() -> *mut c_void {
    ENGINE.last_recorded() as usize as *mut c_void
}

/// The driver's host clock: nanoseconds of the monotonic clock since it loaded.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_host_now_ns() -> u64 {
    clock::host_now_ns()
}

/// Set the device clock's offset from the host clock and its drift.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_clock(offset_ns: i64, drift_ppm: f64) {
    clock::set_clock(offset_ns, drift_ppm);
}

/// Set the launch latency: at least `least_ns`, plus a uniform jitter of up
/// to `jitter_ns`, plus, for `tail_percent` of operations, up to `tail_ns`
/// more (see `SOFT_DRIVER_LAUNCH_LATENCY`). All zeros: operations reach
/// the device as soon as their stream is free, though never inside the call.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_launch_latency(
    least_ns: u64,
    jitter_ns: u64,
    tail_percent: u64,
    tail_ns: u64,
) {
    clock::set_launch_latency(least_ns, jitter_ns, tail_percent, tail_ns);
}

/// Set how late a wait on an event created for blocking synchronization
/// (`CU_EVENT_BLOCKING_SYNC`, `hipEventBlockingSync`) wakes after the event
/// is reached, in ns (default 30,000).
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_blocking_wake_ns(ns: u64) {
    clock::set_blocking_wake_latency(ns);
}

/// Turn the devices' stream memory operations on or off (default on):
/// off, the capability attributes read 0 and a wait on a value is refused
/// as not supported.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_stream_mem_ops(on: i32) {
    clock::set_stream_mem_ops(on != 0);
}

/// How many stream waits on a value are queued and held now: their value
/// does not let them pass. A host that never writes it holds its stream,
/// and everything behind it, forever.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_blocked_value_waits() -> u64 {
    crate::engine::ENGINE.blocked_value_waits()
}

/// What stream waits on a value have cost since the last reset.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SoftHeld {
    /// Waits passed.
    pub waits: u64,
    /// How long they held their streams once the device reached them, ns.
    pub held_ns: u64,
    /// The longest any one held its stream, ns.
    pub held_max_ns: u64,
    /// Operations of other streams held behind them on a shared hardware
    /// queue.
    pub delayed: u64,
    /// How long those were held past their start, ns.
    pub delayed_ns: u64,
    /// The longest any one was held past its start, ns.
    pub delayed_max_ns: u64,
    /// How long the driver's own host threads, which stand in for the
    /// device, kept that work past its start beside the waits' hold (a
    /// stream's worker reaching a wait late, or waking late behind it), ns:
    /// a GPU's queue adds none of it.
    pub driver_late_ns: u64,
    /// The longest the driver's own threads kept any one, ns.
    pub driver_late_max_ns: u64,
    /// The longest a waiting stream's worker went between its last look
    /// that found the wait shut and the look that passed it, ns: how late,
    /// at most, it may have seen the host's write.
    pub look_gap_max_ns: u64,
}

/// Write what stream waits on a value have cost to `out`. Returns 0, or
/// -1 for a null `out`.
///
/// # Safety
///
/// `out` is null or valid for a write of [`SoftHeld`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn soft_driver_value_waits_held(out: *mut SoftHeld) -> i32 {
    if out.is_null() {
        return -1;
    }
    let held = crate::engine::ENGINE.held();
    let held = SoftHeld {
        waits: held.waits,
        held_ns: held.held_ns,
        held_max_ns: held.held_max_ns,
        delayed: held.delayed,
        delayed_ns: held.delayed_ns,
        delayed_max_ns: held.delayed_max_ns,
        driver_late_ns: held.driver_late_ns,
        driver_late_max_ns: held.driver_late_max_ns,
        look_gap_max_ns: held.look_gap_max_ns,
    };
    // SAFETY: non-null, and the caller promises it is valid for the write.
    unsafe { out.write(held) };
    0
}

/// Set how long a stream waiting on a value takes to go on once it is
/// written, in ns (default 1,000).
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_wait_value_ns(ns: u64) {
    clock::set_wait_value_latency(ns);
}

/// Set how long the HIP ABI's `hipEventDestroy` and `hipStreamWaitEvent`
/// take between checking the stream of the event's last record and using
/// it, in ns (default 0): clr checks it with `hip::isValid` and then uses
/// it with no lock held, so a `hipStreamDestroy` of that stream that begins
/// in between has clr use a stream it frees. Such a destroy is counted as a
/// misuse. Reset by [`soft_driver_reset`].
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_check_to_use_ns(ns: u64) {
    clock::set_check_to_use_ns(ns);
}

/// How many calls have entered the gap [`soft_driver_set_check_to_use_ns`]
/// sets, since load: a test waits for it to know a call is past its check.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_check_to_use_gaps() -> u64 {
    clock::gaps_entered()
}

/// Set the memset speed, in bytes per second.
#[unsafe(no_mangle)]
pub extern "C" fn soft_driver_set_bandwidth(bytes_per_second: f64) {
    clock::set_bandwidth(bytes_per_second);
}

#[cfg(test)]
mod tests {
    use super::SoftCounts;
    use std::mem::{offset_of, size_of};

    /// The layout the conformance crate's `Counts` mirrors across the C
    /// ABI, pinned on both sides (its test asserts the same offsets).
    #[test]
    fn the_counts_layout_is_the_one_mirrored() {
        assert_eq!(
            [
                offset_of!(SoftCounts, events),
                offset_of!(SoftCounts, streams),
                offset_of!(SoftCounts, allocations),
                offset_of!(SoftCounts, contexts),
                offset_of!(SoftCounts, graphs),
                offset_of!(SoftCounts, misuses),
                offset_of!(SoftCounts, calls),
                size_of::<SoftCounts>(),
            ],
            [0, 8, 16, 24, 32, 40, 48, 56]
        );
    }
}
