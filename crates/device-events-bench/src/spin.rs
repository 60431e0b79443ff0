//! Device work of a known length, timed by the device itself, on a real
//! GPU with no compiler at hand: the spin kernel's PTX (`spin.ptx`), loaded
//! with `cuModuleLoadData` (the driver's own JIT). The software driver runs
//! the same module: work of the given length, stamped from its device
//! clock.

use std::ffi::{CString, c_void};

use cudarc::driver::{DriverError, result, sys};

/// The kernel's PTX: `spin_stamp(u64 ns, u64 out)`.
pub const PTX: &str = include_str!("spin.ptx");

/// The spin kernel, loaded into the context current when it was made.
pub struct Spin {
    module: sys::CUmodule,
    function: sys::CUfunction,
}

// SAFETY: module and function handles are plain driver handles, usable
// from any thread with their context current.
unsafe impl Send for Spin {}
// SAFETY: as for `Send`; launching takes no `&mut`.
unsafe impl Sync for Spin {}

impl Spin {
    /// Load the kernel into the current context.
    ///
    /// # Errors
    ///
    /// What the driver's JIT or lookup refused.
    pub fn load() -> Result<Self, DriverError> {
        let text =
            CString::new(PTX).map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_PTX))?;
        // SAFETY: NUL-terminated PTX text, read during the call.
        let module = unsafe { result::module::load_data(text.as_ptr().cast()) }?;
        // SAFETY: `module` is live; unloaded once, on failure here or in `Drop`.
        match unsafe { result::module::get_function(module, c"spin_stamp".into()) } {
            Ok(function) => Ok(Self { module, function }),
            Err(e) => {
                // SAFETY: loaded above, unloaded once.
                let _ = unsafe { result::module::unload(module) };
                Err(e)
            }
        }
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
            // read during the call; `out` lies in `stamps`, which outlives
            // the kernel (its owner synchronizes before dropping it); the
            // stream is held live meanwhile, with the module's context
            // current (the caller's).
            unsafe {
                result::launch_kernel(self.function, (1, 1, 1), (1, 1, 1), 0, raw, &mut params)
            }
        });
        launched.map_err(|_| DriverError(sys::CUresult::CUDA_ERROR_INVALID_HANDLE))?
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once.
        let _ = unsafe { result::module::unload(self.module) };
    }
}

/// Page-locked host memory mapped for the device: one (start, end) pair
/// of `%globaltimer` stamps per launch, read by the host once the kernel
/// is done.
pub struct Stamps {
    host: *mut u64,
    device: sys::CUdeviceptr,
    n: usize,
}

// SAFETY: the memory is the process's; reads and writes are volatile.
unsafe impl Send for Stamps {}
// SAFETY: as for `Send`.
unsafe impl Sync for Stamps {}

impl Stamps {
    /// Room for `n` pairs, with a context current.
    ///
    /// # Errors
    ///
    /// What the driver refused.
    pub fn new(n: usize) -> Result<Self, DriverError> {
        // DEVICEMAP: the kernel writes it.
        // SAFETY: a plain allocation, freed once in `Drop`.
        let host = unsafe { result::malloc_host(n * 16, sys::CU_MEMHOSTALLOC_DEVICEMAP) }?;
        let mut device = 0;
        // SAFETY: `host` is a mapped block; `device` is writable.
        let status = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        if status != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: allocated above, freed once.
            let _ = unsafe { result::free_host(host) };
            return Err(DriverError(status));
        }
        Ok(Self {
            host: host.cast(),
            device,
            n,
        })
    }

    fn clear(&self, at: usize) {
        // SAFETY: inside the block; no kernel writes it now (the caller
        // launches after).
        unsafe {
            self.host.add(2 * at).write_volatile(0);
            self.host.add(2 * at + 1).write_volatile(0);
        }
    }

    /// Launch `at`'s stamps, in device nanoseconds (`%globaltimer`, since
    /// the Unix epoch on a GPU), once its kernel is done; `None` while it
    /// has not written them.
    pub fn read(&self, at: usize) -> Option<(u64, u64)> {
        if at >= self.n {
            return None;
        }
        // SAFETY: inside the block, written by the device or zero.
        let (start, end) = unsafe {
            (
                self.host.add(2 * at).read_volatile(),
                self.host.add(2 * at + 1).read_volatile(),
            )
        };
        (start != 0 && end >= start).then_some((start, end))
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once; the owner synchronized
        // the streams that wrote it.
        let _ = unsafe { result::free_host(self.host.cast()) };
    }
}
