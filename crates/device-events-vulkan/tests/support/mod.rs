//! A runtime's own Vulkan device on lavapipe, handed to the clock through
//! `VulkanClock::from_raw`, with a ledger between the clock and the
//! driver: the device's function table is the driver's but for the calls
//! that make and destroy the clock's objects, submit to the queue, wait
//! for fences and signal semaphores, which are counted (and a signal can
//! be made to fail) on their way to the driver.
//!
//! The ledger names a destroy that Vulkan forbids: an object destroyed
//! twice, one the device did not make, or one destroyed while a submission
//! (its fence not yet signalled) may still use it. Such a destroy is not
//! passed on, so that the driver is not left with a queue waiting on what
//! is gone.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_void};
use std::sync::{Mutex, MutexGuard};

use ash::vk::{self, Handle};
use device_events_vulkan::{VulkanClock, VulkanFeatures};

/// What the ledger saw of one device.
#[derive(Default)]
struct Ledger {
    /// The driver's own table, for the calls passed on.
    real: Option<ash::Device>,
    queue: u64,
    /// Objects made, by handle: what they are.
    made: HashMap<u64, &'static str>,
    /// Objects destroyed, in order.
    destroyed: Vec<(&'static str, u64)>,
    /// Destroys Vulkan forbids, in words.
    misuses: Vec<String>,
    /// Fences named by a submission since their last reset: while one is
    /// unsignalled, that submission is pending.
    submitted: HashSet<u64>,
    /// Calls to `vkWaitForFences`.
    fence_waits: u32,
    /// Calls to `vkSignalSemaphore`, how many of the next ones fail, and
    /// with what (none: out of device memory).
    signals: u32,
    signals_to_fail: u32,
    signal_failure: Option<vk::Result>,
}

static LEDGERS: Mutex<Vec<(u64, Ledger)>> = Mutex::new(Vec::new());

fn ledgers() -> MutexGuard<'static, Vec<(u64, Ledger)>> {
    LEDGERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn with_ledger<T>(device: vk::Device, f: impl FnOnce(&mut Ledger) -> T) -> T {
    let mut all = ledgers();
    let ledger = all
        .iter_mut()
        .find(|(d, _)| *d == device.as_raw())
        .map(|(_, l)| l)
        .expect("a device of the ledger's");
    f(ledger)
}

fn real(device: vk::Device) -> ash::Device {
    with_ledger(device, |l| l.real.clone().expect("the driver's table"))
}

impl Ledger {
    /// Whether a submission is pending: a fence it names unsignalled.
    fn pending(&self) -> bool {
        let real = self.real.as_ref().expect("the driver's table");
        self.submitted.iter().any(|&fence| {
            // SAFETY: a fence of this device's, not destroyed (destroying
            // one takes it out of `submitted`).
            let status = unsafe { real.get_fence_status(vk::Fence::from_raw(fence)) };
            status != Ok(true)
        })
    }

    /// Record a destroy of `handle`; whether to pass it on.
    fn destroying(&mut self, what: &'static str, handle: u64) -> bool {
        if handle == 0 {
            return true; // Vulkan ignores a null handle.
        }
        if self.destroyed.iter().any(|&(_, h)| h == handle) {
            self.misuses
                .push(format!("{what} {handle:#x} destroyed twice"));
            return false;
        }
        if self.made.get(&handle) != Some(&what) {
            self.misuses
                .push(format!("{what} {handle:#x} destroyed, not made here"));
            return false;
        }
        if self.pending() {
            self.misuses.push(format!(
                "{what} {handle:#x} destroyed while a submission was pending"
            ));
            return false;
        }
        self.submitted.remove(&handle);
        self.destroyed.push((what, handle));
        true
    }
}

macro_rules! counted {
    ($create:ident, $destroy:ident, $what:literal, $info:ty, $handle:ty, $field:ident, $destroy_field:ident) => {
        unsafe extern "system" fn $create(
            device: vk::Device,
            info: *const $info,
            allocator: *const vk::AllocationCallbacks<'_>,
            out: *mut $handle,
        ) -> vk::Result {
            let real = real(device);
            // SAFETY: the caller's arguments, passed on as they came.
            let result = unsafe { (real.fp_v1_0().$field)(device, info, allocator, out) };
            if result == vk::Result::SUCCESS {
                // SAFETY: written by the driver on success.
                let handle = unsafe { *out }.as_raw();
                with_ledger(device, |l| l.made.insert(handle, $what));
            }
            result
        }

        unsafe extern "system" fn $destroy(
            device: vk::Device,
            handle: $handle,
            allocator: *const vk::AllocationCallbacks<'_>,
        ) {
            let real = real(device);
            if with_ledger(device, |l| l.destroying($what, handle.as_raw())) {
                // SAFETY: the caller's arguments; the ledger found the
                // object made here, live and unused.
                unsafe { (real.fp_v1_0().$destroy_field)(device, handle, allocator) };
            }
        }
    };
}

counted!(
    create_command_pool,
    destroy_command_pool,
    "command pool",
    vk::CommandPoolCreateInfo<'_>,
    vk::CommandPool,
    create_command_pool,
    destroy_command_pool
);
counted!(
    create_query_pool,
    destroy_query_pool,
    "query pool",
    vk::QueryPoolCreateInfo<'_>,
    vk::QueryPool,
    create_query_pool,
    destroy_query_pool
);
counted!(
    create_event,
    destroy_event,
    "event",
    vk::EventCreateInfo<'_>,
    vk::Event,
    create_event,
    destroy_event
);
counted!(
    create_semaphore,
    destroy_semaphore,
    "semaphore",
    vk::SemaphoreCreateInfo<'_>,
    vk::Semaphore,
    create_semaphore,
    destroy_semaphore
);
counted!(
    create_fence,
    destroy_fence,
    "fence",
    vk::FenceCreateInfo<'_>,
    vk::Fence,
    create_fence,
    destroy_fence
);

unsafe extern "system" fn queue_submit(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let (device, real) = {
        let all = ledgers();
        let (device, ledger) = all
            .iter()
            .find(|(_, l)| l.queue == queue.as_raw())
            .expect("a queue of the ledger's");
        (*device, ledger.real.clone().expect("the driver's table"))
    };
    // SAFETY: the caller's arguments, passed on as they came.
    let result = unsafe { (real.fp_v1_0().queue_submit)(queue, count, submits, fence) };
    if result == vk::Result::SUCCESS && fence != vk::Fence::null() {
        with_ledger(vk::Device::from_raw(device), |l| {
            l.submitted.insert(fence.as_raw())
        });
    }
    result
}

unsafe extern "system" fn reset_fences(
    device: vk::Device,
    count: u32,
    fences: *const vk::Fence,
) -> vk::Result {
    let real = real(device);
    // SAFETY: the caller's arguments, passed on as they came.
    let result = unsafe { (real.fp_v1_0().reset_fences)(device, count, fences) };
    if result == vk::Result::SUCCESS {
        // SAFETY: the caller's array of `count` fences.
        let fences = unsafe { std::slice::from_raw_parts(fences, count as usize) };
        with_ledger(device, |l| {
            for fence in fences {
                l.submitted.remove(&fence.as_raw());
            }
        });
    }
    result
}

unsafe extern "system" fn wait_for_fences(
    device: vk::Device,
    count: u32,
    fences: *const vk::Fence,
    all: vk::Bool32,
    timeout: u64,
) -> vk::Result {
    let real = with_ledger(device, |l| {
        l.fence_waits += 1;
        l.real.clone().expect("the driver's table")
    });
    // SAFETY: the caller's arguments, passed on as they came.
    unsafe { (real.fp_v1_0().wait_for_fences)(device, count, fences, all, timeout) }
}

unsafe extern "system" fn signal_semaphore(
    device: vk::Device,
    info: *const vk::SemaphoreSignalInfo<'_>,
) -> vk::Result {
    let (real, fail) = with_ledger(device, |l| {
        l.signals += 1;
        let fail = l.signals_to_fail > 0;
        l.signals_to_fail = l.signals_to_fail.saturating_sub(1);
        let code = l
            .signal_failure
            .unwrap_or(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
        (
            l.real.clone().expect("the driver's table"),
            fail.then_some(code),
        )
    });
    if let Some(code) = fail {
        // Refused, the semaphore as it was.
        return code;
    }
    // SAFETY: the caller's arguments, passed on as they came.
    unsafe { (real.fp_v1_2().signal_semaphore)(device, info) }
}

/// The ledger's function in place of the driver's `name`, if it keeps one.
fn ledgers_own(name: &CStr) -> Option<*const c_void> {
    let f: *const c_void = match name.to_bytes() {
        b"vkCreateCommandPool" => create_command_pool as *const c_void,
        b"vkDestroyCommandPool" => destroy_command_pool as *const c_void,
        b"vkCreateQueryPool" => create_query_pool as *const c_void,
        b"vkDestroyQueryPool" => destroy_query_pool as *const c_void,
        b"vkCreateEvent" => create_event as *const c_void,
        b"vkDestroyEvent" => destroy_event as *const c_void,
        b"vkCreateSemaphore" => create_semaphore as *const c_void,
        b"vkDestroySemaphore" => destroy_semaphore as *const c_void,
        b"vkCreateFence" => create_fence as *const c_void,
        b"vkDestroyFence" => destroy_fence as *const c_void,
        b"vkQueueSubmit" => queue_submit as *const c_void,
        b"vkResetFences" => reset_fences as *const c_void,
        b"vkWaitForFences" => wait_for_fences as *const c_void,
        b"vkSignalSemaphore" => signal_semaphore as *const c_void,
        _ => return None,
    };
    Some(f)
}

/// A runtime's own instance, device and queue on lavapipe, with timeline
/// semaphores: what a program hands `VulkanClock::from_raw`.
pub struct Runtime {
    entry: ash::Entry,
    instance: ash::Instance,
    physical: vk::PhysicalDevice,
    /// The driver's table.
    device: ash::Device,
    /// The ledger's: the driver's, but for the calls it counts.
    counted: ash::Device,
    family: u32,
    queue: vk::Queue,
}

impl Runtime {
    /// Lavapipe's device, which `cargo xtask test` points the loader at.
    pub fn lavapipe() -> Self {
        // SAFETY: loading the system's Vulkan loader, as every Vulkan
        // program does.
        let entry = unsafe { ash::Entry::load() }.expect("a Vulkan loader");
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        // SAFETY: the create info lives across the call.
        let instance = unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
        }
        .expect("a Vulkan instance");
        // SAFETY: the instance is live.
        let physical = unsafe { instance.enumerate_physical_devices() }
            .expect("Vulkan's devices")
            .into_iter()
            .find(|&p| {
                // SAFETY: one of the instance's devices.
                let properties = unsafe { instance.get_physical_device_properties(p) };
                properties
                    .device_name_as_c_str()
                    .is_ok_and(|n| n.to_bytes().starts_with(b"llvmpipe"))
            })
            .expect("lavapipe's device");
        // SAFETY: as above.
        let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
        let family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .expect("a compute queue family");
        let family = u32::try_from(family).unwrap();
        let priorities = [1.0_f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family)
            .queue_priorities(&priorities)];
        let mut timeline =
            vk::PhysicalDeviceTimelineSemaphoreFeatures::default().timeline_semaphore(true);
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .push_next(&mut timeline);
        // SAFETY: the create info and its chain live across the call;
        // lavapipe offers timeline semaphores.
        let device = unsafe { instance.create_device(physical, &info, None) }
            .expect("lavapipe's logical device");
        // SAFETY: the family was created with one queue.
        let queue = unsafe { device.get_device_queue(family, 0) };
        let handle = device.handle();
        ledgers().push((
            handle.as_raw(),
            Ledger {
                real: Some(device.clone()),
                queue: queue.as_raw(),
                ..Ledger::default()
            },
        ));
        let get = instance.fp_v1_0().get_device_proc_addr;
        // SAFETY: each function is the driver's for this device, or the
        // ledger's of the same signature, which passes the call on.
        let counted = unsafe {
            ash::Device::load_with(
                |name| {
                    ledgers_own(name).unwrap_or_else(|| {
                        std::mem::transmute::<vk::PFN_vkVoidFunction, *const c_void>(get(
                            handle,
                            name.as_ptr(),
                        ))
                    })
                },
                handle,
            )
        };
        Self {
            entry,
            instance,
            physical,
            device,
            counted,
            family,
            queue,
        }
    }

    /// A clock on this runtime's queue, its calls counted by the ledger.
    pub fn clock(&self) -> VulkanClock {
        let features = VulkanFeatures {
            calibrated_timestamps: false,
            timeline_semaphore: true,
        };
        // SAFETY: the runtime's own loader, instance, device and queue,
        // all live until it is dropped, after every clock of the tests';
        // each test uses the queue from one thread at a time.
        unsafe {
            VulkanClock::from_raw(
                &self.entry,
                &self.instance,
                self.physical,
                &self.counted,
                self.family,
                self.queue,
                features,
            )
        }
        .expect("a clock on the runtime's queue")
    }

    fn ledger<T>(&self, f: impl FnOnce(&mut Ledger) -> T) -> T {
        with_ledger(self.device.handle(), f)
    }

    /// The objects made on the device, and what they are.
    pub fn made(&self) -> Vec<(&'static str, u64)> {
        let mut made: Vec<_> = self.ledger(|l| l.made.iter().map(|(&h, &w)| (w, h)).collect());
        made.sort_unstable();
        made
    }

    /// The objects destroyed, each as often as it was.
    pub fn destroyed(&self) -> Vec<(&'static str, u64)> {
        let mut destroyed = self.ledger(|l| l.destroyed.clone());
        destroyed.sort_unstable();
        destroyed
    }

    /// Destroys that Vulkan forbids, in words.
    pub fn misuses(&self) -> Vec<String> {
        self.ledger(|l| l.misuses.clone())
    }

    /// Calls to `vkWaitForFences` so far.
    pub fn fence_waits(&self) -> u32 {
        self.ledger(|l| l.fence_waits)
    }

    /// Calls to `vkSignalSemaphore` so far.
    pub fn signals(&self) -> u32 {
        self.ledger(|l| l.signals)
    }

    /// Make the next `n` calls to `vkSignalSemaphore` fail, out of device
    /// memory, leaving the semaphore as it was.
    pub fn fail_signals(&self, n: u32) {
        self.ledger(|l| l.signals_to_fail = n);
    }

    /// Make the next `n` calls to `vkSignalSemaphore` fail with `code`,
    /// leaving the semaphore as it was.
    pub fn fail_signals_with(&self, n: u32, code: vk::Result) {
        self.ledger(|l| {
            l.signals_to_fail = n;
            l.signal_failure = Some(code);
        });
    }

    /// Hold the queue: a batch that waits on a semaphore of the runtime's
    /// own, which the host signals when the hold is released (or dropped).
    /// Lavapipe runs a queue's batches one after another, so everything
    /// submitted behind it waits too.
    pub fn hold_queue(&self) -> Hold<'_> {
        let mut timeline = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        // SAFETY: the device is live; the create info lives across the call.
        let semaphore = unsafe {
            self.device.create_semaphore(
                &vk::SemaphoreCreateInfo::default().push_next(&mut timeline),
                None,
            )
        }
        .unwrap();
        let waits = [semaphore];
        let values = [1];
        let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
        let mut wait_values =
            vk::TimelineSemaphoreSubmitInfo::default().wait_semaphore_values(&values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&waits)
            .wait_dst_stage_mask(&stages)
            .push_next(&mut wait_values);
        // SAFETY: the device is live; the create info lives across the call.
        let fence = unsafe {
            self.device
                .create_fence(&vk::FenceCreateInfo::default(), None)
        }
        .unwrap();
        // SAFETY: the queue is the runtime's, used by this thread alone
        // meanwhile; a timeline semaphore may be waited on before it is
        // signalled.
        unsafe { self.device.queue_submit(self.queue, &[submit], fence) }.unwrap();
        Hold {
            runtime: self,
            semaphore,
            fence,
            released: false,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let (pending, left) = self.ledger(|l| {
            let left: Vec<_> = l
                .made
                .iter()
                .filter(|(h, _)| !l.destroyed.iter().any(|(_, d)| d == *h))
                .map(|(&h, &w)| (w, h))
                .collect();
            (l.pending(), left)
        });
        ledgers().retain(|(d, _)| *d != self.device.handle().as_raw());
        if pending {
            // A test that failed left work queued that can never end:
            // leave the device to the process rather than wait forever.
            eprintln!("a submission is still pending: the test's device is left undestroyed");
            return;
        }
        // SAFETY: no clock on the runtime's device is alive (each test
        // drops its clock first), and the device is idled before anything
        // is destroyed; what a failed test's clock left is destroyed here,
        // once, before the device.
        unsafe {
            let _ = self.device.device_wait_idle();
            for (what, handle) in left {
                let d = &self.device;
                match what {
                    "command pool" => {
                        d.destroy_command_pool(vk::CommandPool::from_raw(handle), None)
                    }
                    "query pool" => d.destroy_query_pool(vk::QueryPool::from_raw(handle), None),
                    "event" => d.destroy_event(vk::Event::from_raw(handle), None),
                    "semaphore" => d.destroy_semaphore(vk::Semaphore::from_raw(handle), None),
                    _ => d.destroy_fence(vk::Fence::from_raw(handle), None),
                }
            }
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

/// The queue held behind a semaphore of the runtime's.
pub struct Hold<'a> {
    runtime: &'a Runtime,
    semaphore: vk::Semaphore,
    /// The held batch's, made by the driver's table: not the ledger's.
    fence: vk::Fence,
    released: bool,
}

impl Hold<'_> {
    /// Let the queue go on.
    pub fn release(&mut self) {
        if !self.released {
            let info = vk::SemaphoreSignalInfo::default()
                .semaphore(self.semaphore)
                .value(1);
            // SAFETY: the hold's own timeline semaphore, at 0, with no
            // signal pending.
            unsafe { self.runtime.device.signal_semaphore(&info) }.unwrap();
            self.released = true;
        }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.release();
        let device = &self.runtime.device;
        // SAFETY: the hold's own fence; released, its batch ends, and its
        // objects are destroyed only once it has.
        unsafe {
            if device
                .wait_for_fences(&[self.fence], true, 10_000_000_000)
                .is_ok()
            {
                device.destroy_fence(self.fence, None);
                device.destroy_semaphore(self.semaphore, None);
            }
        }
    }
}
