//! Finding and loading the HIP runtime, as users have it installed, and the
//! only functions this crate calls in it.
//!
//! A runtime-only ROCm install has `libamdhip64.so.5`, `.so.6` or `.so.7` and
//! no unversioned name; ROCm 5 ships no separate `libhiprtc`, which an event
//! library never calls anyway. So the search is this crate's own, and only
//! the functions below are resolved, each with its status as a plain
//! integer: a status a newer runtime returns is a number, never an invalid
//! Rust enum value.

use std::ffi::{OsString, c_char, c_float, c_int, c_uint, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

use libloading::Library;

/// HIP's opaque event handle, named as HIP's headers name it.
#[allow(non_camel_case_types)]
pub type hipEvent_t = *mut c_void;
/// HIP's opaque stream handle, named as HIP's headers name it (null: the
/// null stream); what [`Hip::stream_from_raw`](crate::Hip::stream_from_raw) takes.
#[allow(non_camel_case_types)]
pub type hipStream_t = *mut c_void;

/// `hipError_t`, a C enum: an `int` across the ABI.
pub(crate) type Status = c_int;

pub(crate) const HIP_SUCCESS: Status = 0;
pub(crate) const HIP_EVENT_DEFAULT: c_uint = 0;
pub(crate) const HIP_EVENT_BLOCKING_SYNC: c_uint = 1;
/// `hipEventDisableTiming`: no timestamp, the fast kind for a fence.
pub(crate) const HIP_EVENT_DISABLE_TIMING: c_uint = 2;
pub(crate) const HIP_ERROR_NOT_READY: Status = 600;
pub(crate) const HIP_STREAM_NON_BLOCKING: c_uint = 1;
pub(crate) const HIP_STREAM_CAPTURE_STATUS_NONE: c_int = 0;
pub(crate) const HIP_STREAM_CAPTURE_STATUS_ACTIVE: c_int = 1;

/// Names the runtime is installed under: the development link, then the
/// sonames of ROCm 7, 6 and 5.
pub const LIBRARY_NAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// Set to a library's path, the only one tried: for a runtime outside the
/// usual places, or to check how a program behaves with none.
pub const RUNTIME_VAR: &str = "DEVICE_EVENTS_HIP_RUNTIME";

/// Where the runtime is looked for, in order, after a runtime already
/// loaded in the process under one of [`LIBRARY_NAMES`] (which is always
/// used first: a second copy would not know the first's streams):
/// [`RUNTIME_VAR`] alone when it is set; else `$ROCM_PATH/lib`,
/// `$HIP_PATH/lib`, `/opt/rocm/lib`, then the loader's own search, each for
/// every name in [`LIBRARY_NAMES`].
pub fn search_path() -> Vec<PathBuf> {
    if let Some(only) = std::env::var_os(RUNTIME_VAR) {
        return vec![PathBuf::from(only)];
    }
    let roots = ["ROCM_PATH", "HIP_PATH"]
        .into_iter()
        .filter_map(std::env::var_os)
        .chain([OsString::from("/opt/rocm")]);
    let mut paths: Vec<PathBuf> = roots
        .flat_map(|root| {
            LIBRARY_NAMES
                .iter()
                .map(move |name| PathBuf::from(&root).join("lib").join(name))
        })
        .collect();
    paths.extend(LIBRARY_NAMES.iter().map(PathBuf::from));
    paths
}

device_events_core::backend::driver_functions! {
    /// The runtime's functions this crate calls, resolved when it loads;
    /// each status is a plain integer.
    pub(crate) struct Functions {
        hipInit(c_uint) -> Status;
        hipRuntimeGetVersion(*mut c_int) -> Status;
        hipDriverGetVersion(*mut c_int) -> Status;
        hipGetDeviceCount(*mut c_int) -> Status;
        hipGetDevice(*mut c_int) -> Status;
        hipSetDevice(c_int) -> Status;
        hipEventCreateWithFlags(*mut hipEvent_t, c_uint) -> Status;
        hipEventRecord(hipEvent_t, hipStream_t) -> Status;
        hipEventSynchronize(hipEvent_t) -> Status;
        hipEventQuery(hipEvent_t) -> Status;
        hipEventElapsedTime(*mut c_float, hipEvent_t, hipEvent_t) -> Status;
        hipEventDestroy(hipEvent_t) -> Status;
        hipStreamCreateWithFlags(*mut hipStream_t, c_uint) -> Status;
        hipStreamWaitEvent(hipStream_t, hipEvent_t, c_uint) -> Status;
        hipStreamSynchronize(hipStream_t) -> Status;
        hipStreamDestroy(hipStream_t) -> Status;
        hipStreamIsCapturing(hipStream_t, *mut c_int) -> Status;
        hipGetErrorName(Status) -> *const c_char;
    }
}

device_events_core::backend::driver_functions! {
    /// Stream memory operations, which a runtime may lack (they came in
    /// ROCm 4.2-4.4 and are marked beta): resolved apart, so that a runtime
    /// without them still loads and has no gate.
    pub(crate) struct MemOps {
        hipDeviceGetAttribute(*mut c_int, c_int, c_int) -> Status;
        hipExtMallocWithFlags(*mut *mut c_void, usize, c_uint) -> Status;
        hipFree(*mut c_void) -> Status;
        hipStreamWaitValue32(hipStream_t, *mut c_void, u32, c_uint, u32) -> Status;
    }
}

/// A loaded runtime: its functions, and where it was found.
pub(crate) struct Runtime {
    pub(crate) fns: Functions,
    pub(crate) mem_ops: Option<MemOps>,
    /// `hipThreadExchangeStreamCaptureMode` (ROCm 5.0 on), where present.
    pub(crate) exchange_capture_mode: Option<unsafe extern "C" fn(*mut c_int) -> Status>,
    pub(crate) path: PathBuf,
    /// Kept open for the process: the functions point into it.
    _lib: Library,
}

/// The runtime, loaded on first use; why none could be, otherwise.
pub(crate) fn loaded() -> Result<&'static Runtime, &'static str> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME.get_or_init(load).as_ref().map_err(String::as_str)
}

/// At the process's exit: the library's threads leave the runtime before
/// its exit handlers tear it down. Each leaves within its longest sleep
/// between asks (the core's `src/tunables.rs`) of the stop; the bound
/// covers a thread the system is slow to schedule.
pub(crate) extern "C" fn stop_driver_calls_at_exit() {
    let _ = device_events_core::process::stop_driver_calls(std::time::Duration::from_secs(1));
}

/// Around `fork`: no library thread holds one of the library's locks as the
/// process forks (see `device_events_core::process::before_fork`).
pub(crate) extern "C" fn before_fork() {
    device_events_core::process::before_fork();
}

pub(crate) extern "C" fn after_fork_in_parent() {
    device_events_core::process::after_fork_in_parent();
}

pub(crate) extern "C" fn after_fork_in_child() {
    device_events_core::process::after_fork_in_child();
}

/// `RTLD_NOLOAD` (glibc and musl): open only a library already loaded.
const RTLD_NOLOAD: std::ffi::c_int = 0x4;

/// A HIP runtime already in the process under one of the names it goes by
/// (the user's own bindings opened it, as `cubecl-hip-sys` opens the bare
/// soname): the one to use. A path opened now would be a second copy of the
/// runtime, in which the user's streams and events mean nothing.
fn already_loaded() -> Option<(Library, PathBuf)> {
    LIBRARY_NAMES.iter().find_map(|name| {
        // SAFETY: with RTLD_NOLOAD nothing is loaded, so no initialiser runs;
        // a library already loaded is only referenced once more.
        let lib = unsafe {
            libloading::os::unix::Library::open(
                Some(*name),
                RTLD_NOLOAD | libloading::os::unix::RTLD_NOW,
            )
        };
        lib.ok()
            .map(|lib| (Library::from(lib), PathBuf::from(name)))
    })
}

fn load() -> Result<Runtime, String> {
    let mut lacking = None;
    let loaded = already_loaded();
    if let (Some((_, path)), Some(named)) = (&loaded, std::env::var_os(RUNTIME_VAR)) {
        log::warn!(
            "hip: {RUNTIME_VAR}={} is not used: a HIP runtime ({}) is already loaded, and a \
             second copy would not know its streams",
            PathBuf::from(named).display(),
            path.display()
        );
    }
    let candidates = loaded
        .into_iter()
        .chain(search_path().into_iter().filter_map(|path| {
            // SAFETY: loading a HIP runtime runs its initialisers, as linking it
            // would; nothing else is run.
            let lib = unsafe { Library::new(&path) }.ok()?;
            Some((lib, path))
        }));
    for (lib, path) in candidates {
        let symbol = |name: &[u8]| {
            // SAFETY: the address is only read here; `resolve`'s caller
            // promises its signature.
            unsafe { lib.get::<*const std::ffi::c_void>(name) }
                .ok()
                .map(|address| *address)
        };
        // SAFETY: a library found under a HIP runtime's name is one; a
        // symbol it lacks is reported, and the next candidate tried.
        match unsafe { Functions::resolve(symbol) }.map_err(str::to_owned) {
            Ok(fns) => {
                return Ok(Runtime {
                    fns,
                    // SAFETY: as for `Functions::resolve` just above.
                    mem_ops: unsafe { MemOps::resolve(symbol) }.ok(),
                    // SAFETY: HIP's C signature of the function of that
                    // name (the mode is a C enum: an `int`), status as an
                    // integer; the library stays open with the pointer.
                    exchange_capture_mode: unsafe {
                        lib.get(b"hipThreadExchangeStreamCaptureMode\0")
                    }
                    .ok()
                    .map(|f| *f),
                    path,
                    _lib: lib,
                });
            }
            Err(symbol) => lacking = Some((path, symbol)),
        }
    }
    Err(match lacking {
        Some((path, symbol)) => format!(
            "the HIP runtime at {} lacks {symbol}: older than ROCm 5.0",
            path.display()
        ),
        None => match std::env::var_os(RUNTIME_VAR) {
            Some(only) => format!(
                "no HIP runtime found at {} ({RUNTIME_VAR})",
                PathBuf::from(only).display()
            ),
            None => format!(
                "no HIP runtime found ({} in $ROCM_PATH/lib, $HIP_PATH/lib, /opt/rocm/lib \
                 or the loader's path)",
                LIBRARY_NAMES.join(", ")
            ),
        },
    })
}
