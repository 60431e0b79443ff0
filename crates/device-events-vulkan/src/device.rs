//! A Vulkan device this crate opens and owns, for a program that has none
//! of its own to place stamps on (tests, the bench, a first try): the
//! loader found at run time, the first device with a timestamping compute
//! queue, `VK_EXT_calibrated_timestamps` and timeline semaphores enabled
//! where offered.

use std::sync::Arc;

use ash::vk;
use device_events_core::{DriverError, ErrorKind};
use parking_lot::Mutex;

use crate::status::check;

/// An instance, one logical device and its compute queue, owned: dropped
/// once the last [`VulkanClock`](crate::VulkanClock) made on it is.
///
/// ```
/// use device_events_core::ErrorKind;
/// use device_events_vulkan::VulkanDevice;
///
/// match VulkanDevice::open() {
///     Ok(device) => println!("timestamps on {}", device.name()),
///     // No loader, or no driver: an error that says so, never a panic.
///     Err(err) => assert_eq!(err.kind(), ErrorKind::NoDevice, "{err}"),
/// }
/// ```
pub struct VulkanDevice {
    // Field order is drop order: nothing here is dropped by Rust's glue
    // but `entry` (the loader), which must outlive the instance; `Drop`
    // destroys the device and the instance first.
    pub(crate) instance: ash::Instance,
    pub(crate) physical: vk::PhysicalDevice,
    pub(crate) device: ash::Device,
    pub(crate) family: u32,
    /// The queue, behind the lock every submission to it takes: Vulkan
    /// asks the host to synchronise a queue's use.
    pub(crate) queue: Mutex<vk::Queue>,
    /// What the device was made with.
    pub(crate) features: crate::VulkanFeatures,
    /// Objects of clocks dropped while the device still used them:
    /// destroyed once it is idle, before it is.
    leftovers: Mutex<Vec<crate::objects::Objects>>,
    name: String,
    pub(crate) entry: ash::Entry,
}

impl VulkanDevice {
    /// Open the first device whose queue family has compute and
    /// timestamps.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDevice`] without a Vulkan loader, a driver, or a
    /// device that timestamps compute work; the driver's error otherwise.
    pub fn open() -> Result<Arc<Self>, DriverError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers,
        // which is what every Vulkan program does; nothing else is running
        // code from it yet.
        let entry = unsafe { ash::Entry::load() }.map_err(|err| {
            DriverError::refused(
                crate::BACKEND,
                "vkGetInstanceProcAddr",
                ErrorKind::NoDevice,
                format!("no Vulkan loader (libvulkan.so.1) could be loaded: {err}"),
            )
        })?;
        let app = vk::ApplicationInfo::default()
            .application_name(c"device-events")
            .api_version(vk::API_VERSION_1_2);
        // SAFETY: the create info and what it points to live across the call.
        let instance = check("vkCreateInstance", unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )
        })?;
        // From here the instance is destroyed on every path.
        let opened = Self::first_device(&instance);
        match opened {
            Ok((physical, family, device, features, name)) => {
                // SAFETY: the family was created with one queue.
                let queue = unsafe { device.get_device_queue(family, 0) };
                Ok(Arc::new(Self {
                    instance,
                    physical,
                    device,
                    family,
                    queue: Mutex::new(queue),
                    features,
                    leftovers: Mutex::new(Vec::new()),
                    name,
                    entry,
                }))
            }
            Err(err) => {
                // SAFETY: nothing made from the instance is alive.
                unsafe { instance.destroy_instance(None) };
                Err(err)
            }
        }
    }

    /// The device's name, as its driver gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `f` with the device's queue, holding its lock: a program that
    /// submits its own work to the queue does it here, never beside this
    /// crate's anchor submissions.
    pub fn with_queue<T>(&self, f: impl FnOnce(&ash::Device, vk::Queue) -> T) -> T {
        let queue = self.queue.lock();
        f(&self.device, *queue)
    }

    /// The queue family of [`with_queue`](Self::with_queue)'s queue.
    pub fn queue_family(&self) -> u32 {
        self.family
    }

    /// Keep a dropped clock's `objects` until the device is idle.
    pub(crate) fn leave(&self, objects: crate::objects::Objects) {
        self.leftovers.lock().push(objects);
    }

    #[allow(clippy::type_complexity)]
    fn first_device(
        instance: &ash::Instance,
    ) -> Result<
        (
            vk::PhysicalDevice,
            u32,
            ash::Device,
            crate::VulkanFeatures,
            String,
        ),
        DriverError,
    > {
        // SAFETY: the instance is live.
        let physicals = check("vkEnumeratePhysicalDevices", unsafe {
            instance.enumerate_physical_devices()
        })?;
        for physical in physicals {
            // SAFETY: `physical` is one of the instance's.
            let families =
                unsafe { instance.get_physical_device_queue_family_properties(physical) };
            let Some(family) = families.iter().position(|f| {
                f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.timestamp_valid_bits > 0
            }) else {
                continue;
            };
            let family = u32::try_from(family).unwrap_or(0);
            // SAFETY: as above.
            let properties = unsafe { instance.get_physical_device_properties(physical) };
            let name = properties.device_name_as_c_str().map_or_else(
                |_| "a Vulkan device".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            // SAFETY: as above.
            let extensions =
                match unsafe { instance.enumerate_device_extension_properties(physical) } {
                    Ok(extensions) => extensions,
                    Err(err) => {
                        log::warn!(
                            "{}: {name}'s extensions could not be listed ({err}); next device",
                            crate::BACKEND
                        );
                        continue;
                    }
                };
            let calibrated = extensions
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::calibrated_timestamps::NAME));
            let enabled: Vec<*const std::ffi::c_char> = if calibrated {
                vec![ash::ext::calibrated_timestamps::NAME.as_ptr()]
            } else {
                Vec::new()
            };
            // Timeline semaphores (Vulkan 1.2): the gate a host may open
            // after the submission that waits on it.
            let mut offered = vk::PhysicalDeviceTimelineSemaphoreFeatures::default();
            let timeline = properties.api_version >= vk::API_VERSION_1_2 && {
                let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut offered);
                // SAFETY: `physical` is live; the chain lives across the call.
                unsafe { instance.get_physical_device_features2(physical, &mut features) };
                offered.timeline_semaphore == vk::TRUE
            };
            let mut wanted =
                vk::PhysicalDeviceTimelineSemaphoreFeatures::default().timeline_semaphore(timeline);
            let priorities = [1.0_f32];
            let queues = [vk::DeviceQueueCreateInfo::default()
                .queue_family_index(family)
                .queue_priorities(&priorities)];
            let info = vk::DeviceCreateInfo::default()
                .queue_create_infos(&queues)
                .enabled_extension_names(&enabled)
                .push_next(&mut wanted);
            // SAFETY: the create info and what it points to live across the
            // call; the extension and the feature enabled are ones the
            // device offers.
            let device = check("vkCreateDevice", unsafe {
                instance.create_device(physical, &info, None)
            })?;
            let features = crate::VulkanFeatures {
                calibrated_timestamps: calibrated,
                timeline_semaphore: timeline,
            };
            return Ok((physical, family, device, features, name));
        }
        Err(DriverError::refused(
            crate::BACKEND,
            "vkEnumeratePhysicalDevices",
            ErrorKind::NoDevice,
            "no Vulkan device with a queue family that timestamps compute work",
        ))
    }
}

impl Drop for VulkanDevice {
    fn drop(&mut self) {
        // SAFETY: every clock made on this device holds an `Arc` of it, so
        // none is alive; the device is idled first, so nothing queued
        // reads what is destroyed.
        unsafe {
            if let Err(err) = self.device.device_wait_idle() {
                log::error!("{}: vkDeviceWaitIdle before destroy: {err}", crate::BACKEND);
            }
            for objects in self.leftovers.get_mut().drain(..) {
                objects.destroy(&self.device);
            }
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
