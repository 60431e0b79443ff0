//! Device work of a known length, timed by the device itself, on a real
//! GPU with no compiler at hand: the spin kernel, loaded with
//! `cuModuleLoadData` from an `sm_90` cubin where the GPU kit carries one
//! (`DEVICE_EVENTS_SPIN_CUBIN`), else from its PTX (`spin.ptx`, through the
//! driver's own JIT). The software driver runs the same module: work of
//! the given length, stamped from its device clock.

use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{DriverError, result, sys};

/// The kernel's PTX: `spin_stamp(u64 ns, u64 out)`.
pub const PTX: &str = include_str!("spin.ptx");

/// `DEVICE_EVENTS_SPIN_CUBIN`: a cubin of [`PTX`] (the GPU kit's, for
/// `sm_90`), tried before the PTX: a driver whose JIT is missing or older
/// than the PTX's ISA still runs the kernel.
pub const CUBIN_VAR: &str = "DEVICE_EVENTS_SPIN_CUBIN";

/// The spin kernel, loaded into the context current when it was made.
pub struct Spin {
    ctx: sys::CUcontext,
    module: sys::CUmodule,
    function: sys::CUfunction,
    origin: String,
}

/// The calling thread's current context (null for none).
fn current() -> sys::CUcontext {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: a writable output.
    unsafe { sys::cuCtxGetCurrent(&mut ctx) };
    ctx
}

/// Run `f` with `ctx` current, then give the thread its own back.
fn in_context(ctx: sys::CUcontext, f: impl FnOnce()) {
    // SAFETY: `ctx` is a context the caller made its handles in, still
    // alive (a primary context, retained for the process by the caller).
    if unsafe { sys::cuCtxPushCurrent_v2(ctx) } == sys::CUresult::CUDA_SUCCESS {
        f();
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context pushed above.
        unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    }
}

// SAFETY: module and function handles are plain driver handles, usable
// from any thread; `Drop` makes their context current itself.
unsafe impl Send for Spin {}
// SAFETY: as for `Send`; launching takes no `&mut`.
unsafe impl Sync for Spin {}

impl Spin {
    /// Load the kernel into the current context: from the cubin
    /// [`CUBIN_VAR`] names, where it is set and the driver takes it, else
    /// from the PTX. [`Spin::origin`] says which, and why not the cubin.
    ///
    /// # Errors
    ///
    /// What the driver's JIT or lookup refused of the PTX.
    pub fn load() -> Result<Self, DriverError> {
        let cubin = std::env::var_os(CUBIN_VAR).map(|path| {
            let shown = std::path::Path::new(&path).display().to_string();
            let loaded = match std::fs::read(&path) {
                Ok(image) => {
                    // SAFETY: a whole image, read during the call.
                    unsafe { Self::from_image(image.as_ptr().cast()) }.map_err(|e| e.to_string())
                }
                Err(err) => Err(err.to_string()),
            };
            (shown, loaded)
        });
        let refused = match cubin {
            Some((path, Ok((module, function)))) => {
                return Ok(Self {
                    ctx: current(),
                    module,
                    function,
                    origin: format!("cubin {path}"),
                });
            }
            Some((path, Err(why))) => format!("; cubin {path} not taken: {why}"),
            None => String::new(),
        };
        let text =
            CString::new(PTX).map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_PTX))?;
        // SAFETY: NUL-terminated PTX text, read during the call.
        let (module, function) = unsafe { Self::from_image(text.as_ptr().cast()) }?;
        Ok(Self {
            ctx: current(),
            module,
            function,
            origin: format!("PTX through the driver's JIT{refused}"),
        })
    }

    /// A module of `image` and its `spin_stamp`, or what the driver said.
    ///
    /// # Safety
    ///
    /// `image` is a whole cubin or a NUL-terminated PTX text, live during
    /// the call.
    unsafe fn from_image(
        image: *const c_void,
    ) -> Result<(sys::CUmodule, sys::CUfunction), DriverError> {
        // SAFETY: as the caller promises.
        let module = unsafe { result::module::load_data(image) }?;
        // SAFETY: `module` is live; unloaded once, on failure here or in `Drop`.
        match unsafe { result::module::get_function(module, c"spin_stamp".into()) } {
            Ok(function) => Ok((module, function)),
            Err(e) => {
                // SAFETY: loaded above, unloaded once.
                let _ = unsafe { result::module::unload(module) };
                Err(e)
            }
        }
    }

    /// Where the loaded kernel came from: the cubin, or the PTX and why
    /// not the cubin.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Queue `ns` of spinning on `stream`, stamping into `stamps[at]`.
    ///
    /// # Errors
    ///
    /// What the driver refused.
    ///
    /// # Panics
    ///
    /// When `at` is outside `stamps`.
    pub fn launch(
        &self,
        stream: device_events_cuda::CudaStream,
        ns: u64,
        stamps: &Stamps,
        at: usize,
    ) -> Result<(), DriverError> {
        assert!(at < stamps.n, "stamp {at} of {}", stamps.n);
        stamps.clear(at);
        let mut ns = ns;
        let mut out = stamps.device + (at * 16) as u64;
        let mut params = [
            (&raw mut ns).cast::<c_void>(),
            (&raw mut out).cast::<c_void>(),
        ];
        let launched = stream.with_raw(|raw| {
            // SAFETY: the parameters match the kernel's two u64s and are
            // read during the call; `out` lies in `stamps`, which is freed
            // only after its context's work is done (its `Drop`); the
            // stream is held live meanwhile.
            unsafe {
                result::launch_kernel(self.function, (1, 1, 1), (1, 1, 1), 0, raw, &mut params)
            }
        });
        launched.map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_HANDLE))?
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        // A module is unloaded from the current context: its own.
        in_context(self.ctx, || {
            // SAFETY: loaded in `load`, unloaded once.
            let _ = unsafe { result::module::unload(self.module) };
        });
    }
}

/// Page-locked host memory mapped for the device: one (start, end) pair
/// of `%globaltimer` stamps per launch, read by the host once the kernel
/// is done. The host reads and clears it atomically; dropping it first
/// waits for its context's work, so that no kernel writes it once freed.
pub struct Stamps {
    ctx: sys::CUcontext,
    host: *mut AtomicU64,
    device: sys::CUdeviceptr,
    n: usize,
}

// SAFETY: the memory is the process's; the host touches it only through
// atomics, and frees it once no kernel can write it.
unsafe impl Send for Stamps {}
// SAFETY: as for `Send`.
unsafe impl Sync for Stamps {}

impl Stamps {
    /// Room for `n` pairs (at least one), with a context current.
    ///
    /// # Errors
    ///
    /// What the driver refused, and INVALID_VALUE for a size of 0 or one
    /// that overflows.
    pub fn new(n: usize) -> Result<Self, DriverError> {
        let invalid = DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
        let bytes = n.checked_mul(16).filter(|b| *b > 0).ok_or(invalid)?;
        // DEVICEMAP: the kernel writes it.
        // SAFETY: a plain allocation, freed once in `Drop` or below.
        let host = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_DEVICEMAP) }?;
        let mut device = 0;
        // SAFETY: `host` is a mapped block; `device` is writable.
        let status = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        if status != sys::CUresult::CUDA_SUCCESS || !host.cast::<AtomicU64>().is_aligned() {
            // SAFETY: allocated above, freed once.
            let _ = unsafe { result::free_host(host) };
            return Err(if status == sys::CUresult::CUDA_SUCCESS {
                invalid
            } else {
                DriverError(status)
            });
        }
        let host = host.cast::<AtomicU64>();
        for word in 0..2 * n {
            // SAFETY: inside the block, aligned; nothing else has it yet.
            unsafe { host.add(word).write(AtomicU64::new(0)) };
        }
        Ok(Self {
            ctx: current(),
            host,
            device,
            n,
        })
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at < 2 * n` at every caller; aligned, initialized in
        // `new`, alive as long as `self`.
        unsafe { &*self.host.add(at) }
    }

    fn clear(&self, at: usize) {
        self.word(2 * at).store(0, Ordering::Release);
        self.word(2 * at + 1).store(0, Ordering::Release);
    }

    /// The stamps of launch `at`, in device nanoseconds (`%globaltimer`),
    /// once its kernel is done; `None` while it has not written them.
    pub fn read(&self, at: usize) -> Option<(u64, u64)> {
        if at >= self.n {
            return None;
        }
        let (start, end) = (
            self.word(2 * at).load(Ordering::Acquire),
            self.word(2 * at + 1).load(Ordering::Acquire),
        );
        (start != 0 && end >= start).then_some((start, end))
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        in_context(self.ctx, || {
            // No kernel launched into it may still write it once freed.
            // SAFETY: no arguments; the context is current.
            unsafe { sys::cuCtxSynchronize() };
            // SAFETY: allocated in `new`, freed once, its writers done.
            let _ = unsafe { result::free_host(self.host.cast()) };
        });
    }
}
