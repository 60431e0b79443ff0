//! Which OpenCL context events and queues are made in: the thread's choice,
//! else the process's default device.
//!
//! OpenCL has no current context, so this crate keeps one per thread, as
//! CUDA binds a context and HIP a device: [`OpenCl::select`] picks a
//! platform and device for the calling thread; otherwise the default is the
//! device `DEVICE_EVENTS_OPENCL_DEVICE` names (`<platform>:<device>`
//! indices), else the first device of the first platform that has one.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use cl3::types::{cl_context, cl_device_id, cl_platform_id};
use device_events_core::{DriverError, ErrorKind};

use crate::OpenCl;
use crate::status::error;

/// Names the default device as `<platform>:<device>`, both indices.
pub const DEVICE_VAR: &str = "DEVICE_EVENTS_OPENCL_DEVICE";

const CL_DEVICE_TYPE_ALL: u64 = 0xFFFF_FFFF;
const CL_DEVICE_NAME: u32 = 0x102B;
const CL_PLATFORM_NAME: u32 = 0x0902;
const CL_DEVICE_TYPE: u32 = 0x1000;
const CL_DEVICE_TYPE_CPU: u64 = 1 << 1;
const CL_DEVICE_VERSION: u32 = 0x102F;

/// An OpenCL context on one device, released when the last event, queue
/// or thread using it lets go.
#[derive(Debug)]
pub struct Context {
    pub(crate) raw: cl_context,
    pub(crate) device: cl_device_id,
    /// Tells contexts apart without comparing raw pointers, which the
    /// driver may reuse once one is released.
    pub(crate) id: u64,
    /// The device stamps events on the host's `CLOCK_MONOTONIC_RAW`
    /// (PoCL's CPU device).
    pub(crate) raw_clock: bool,
}

// SAFETY: `cl_context` and `cl_device_id` are opaque handles, never
// dereferenced here; OpenCL's API calls are thread-safe from 1.1 on (all but
// `clSetKernelArg`, which this crate never calls), so they may be used and
// released from any thread.
unsafe impl Send for Context {}
// SAFETY: as for `Send`: `&Context` only hands the handles to
// thread-safe calls.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: made by `clCreateContext` here; this is its one release,
        // after every event and queue holding it has gone.
        if let Err(code) = unsafe { cl3::context::release_context(self.raw) } {
            log::warn!(
                "opencl: releasing a context failed: {}",
                error("clReleaseContext", code)
            );
        }
    }
}

/// A platform's device, as [`OpenCl::devices`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Index of the platform, for [`OpenCl::select`].
    pub platform: usize,
    /// Index of the device on its platform.
    pub device: usize,
    /// `CL_PLATFORM_NAME`.
    pub platform_name: String,
    /// `CL_DEVICE_NAME`.
    pub name: String,
    /// `CL_DEVICE_VERSION`, such as `OpenCL 3.0 PoCL ...`.
    pub version: String,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static SELECTED: RefCell<Option<Arc<Context>>> = const { RefCell::new(None) };
}

fn platforms() -> Result<Vec<cl_platform_id>, DriverError> {
    let platforms = cl3::platform::get_platform_ids().map_err(|c| error("clGetPlatformIDs", c))?;
    if platforms.is_empty() {
        return Err(no_device("no OpenCL platform is installed"));
    }
    Ok(platforms)
}

fn devices_of(platform: cl_platform_id) -> Vec<cl_device_id> {
    cl3::device::get_device_ids(platform, CL_DEVICE_TYPE_ALL).unwrap_or_default()
}

fn no_device(why: &'static str) -> DriverError {
    DriverError::refused(
        OpenCl::BACKEND_NAME,
        "clGetDeviceIDs",
        ErrorKind::NoDevice,
        why,
    )
}

fn text(info: Result<cl3::info_type::InfoType, i32>) -> String {
    info.map(|value| value.to_string().trim_end_matches('\0').to_owned())
        .unwrap_or_default()
}

/// Every device of every platform, with its driver handle.
fn listed() -> Result<Vec<(DeviceInfo, cl_device_id)>, DriverError> {
    let mut found = Vec::new();
    for (p, platform) in platforms()?.into_iter().enumerate() {
        let platform_name = text(cl3::platform::get_platform_info(platform, CL_PLATFORM_NAME));
        for (d, device) in devices_of(platform).into_iter().enumerate() {
            let info = DeviceInfo {
                platform: p,
                device: d,
                platform_name: platform_name.clone(),
                name: text(cl3::device::get_device_info(device, CL_DEVICE_NAME)),
                version: text(cl3::device::get_device_info(device, CL_DEVICE_VERSION)),
            };
            found.push((info, device));
        }
    }
    if found.is_empty() {
        return Err(no_device("no OpenCL platform has a device"));
    }
    Ok(found)
}

/// Every device of every platform.
pub(crate) fn list() -> Result<Vec<DeviceInfo>, DriverError> {
    Ok(listed()?.into_iter().map(|(info, _)| info).collect())
}

/// The device of the calling thread's context.
pub(crate) fn current_device() -> Result<DeviceInfo, DriverError> {
    let device = current()?.device;
    listed()?
        .into_iter()
        .find_map(|(info, id)| (id == device).then_some(info))
        .ok_or_else(|| no_device("the thread's OpenCL device is no longer listed"))
}

/// A new context on device `device` of platform `platform`.
pub(crate) fn create(platform: usize, device: usize) -> Result<Arc<Context>, DriverError> {
    let platforms = platforms()?;
    let Some(&chosen) = platforms.get(platform) else {
        return Err(no_device("no OpenCL platform of that index"));
    };
    let Some(&device) = devices_of(chosen).get(device) else {
        return Err(no_device("the OpenCL platform has no device of that index"));
    };
    let raw = cl3::context::create_context(&[device], std::ptr::null(), None, std::ptr::null_mut())
        .map_err(|c| error("clCreateContext", c))?;
    // PoCL's CPU driver stamps profiling times with `clock_gettime(
    // CLOCK_MONOTONIC_RAW)`; no other platform is known to name its clock.
    let pocl = text(cl3::platform::get_platform_info(chosen, CL_PLATFORM_NAME))
        .contains("Portable Computing Language");
    let cpu = cl3::device::get_device_info(device, CL_DEVICE_TYPE)
        .is_ok_and(|kind| u64::from(kind) & CL_DEVICE_TYPE_CPU != 0);
    // The runtime is loaded and has made a context: its exit handlers are
    // registered, and the library's run before them.
    crate::process::register_handlers();
    Ok(Arc::new(Context {
        raw,
        device,
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        raw_clock: pocl && cpu,
    }))
}

/// The process's default device: [`DEVICE_VAR`], else the first device of
/// the first platform that has one.
fn default_context() -> Result<Arc<Context>, DriverError> {
    static DEFAULT: OnceLock<Result<Arc<Context>, DriverError>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            if let Ok(named) = std::env::var(DEVICE_VAR) {
                let parsed = named
                    .split_once(':')
                    .and_then(|(p, d)| Some((p.trim().parse().ok()?, d.trim().parse().ok()?)));
                let Some((p, d)) = parsed else {
                    return Err(DriverError::refused(
                        OpenCl::BACKEND_NAME,
                        "clCreateContext",
                        ErrorKind::Other,
                        format!("{DEVICE_VAR}={named:?} is not <platform>:<device>"),
                    ));
                };
                return create(p, d);
            }
            let first = list()?.into_iter().next();
            let Some(first) = first else {
                return Err(no_device("no OpenCL platform has a device"));
            };
            create(first.platform, first.device)
        })
        .clone()
}

/// The calling thread's context: the one it selected, else the default.
pub(crate) fn current() -> Result<Arc<Context>, DriverError> {
    if let Some(selected) = SELECTED.with(|s| s.borrow().clone()) {
        return Ok(selected);
    }
    default_context()
}

/// Make `context` the calling thread's.
pub(crate) fn select(context: Arc<Context>) {
    SELECTED.with(|s| *s.borrow_mut() = Some(context));
}

/// The calling thread's selection, if it made one.
pub(crate) fn selected() -> Option<u64> {
    SELECTED.with(|s| s.borrow().as_ref().map(|c| c.id))
}

/// Make `context` (or none) the calling thread's selection; the previous
/// one.
pub(crate) fn swap(context: Option<Arc<Context>>) -> Option<Arc<Context>> {
    SELECTED.with(|s| std::mem::replace(&mut *s.borrow_mut(), context))
}
