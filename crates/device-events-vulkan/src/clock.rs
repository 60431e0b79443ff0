//! One device's timestamp clock, for [`ClockPlacer`]: each anchor stamp is
//! a command buffer of this crate's own, submitted to the runtime's queue,
//! that writes one timestamp and then sets an event, so the host learns
//! without waiting when the device wrote it.
//!
//! The gate is a timeline semaphore (Vulkan 1.2), which a submission may
//! wait on before the host signals it; a batch just ahead of it sets a mark
//! event, so the host opens the gate as soon as the queue is there. Not a
//! `VkEvent`: one the host sets after the command buffer waiting on it was
//! submitted is outside the specification ("the application must signal
//! the event before submitting the command buffer", `vkSetEvent`), and
//! lavapipe's queue thread spins on such a wait.
//!
//! A shut gate holds every command queued behind it, the runtime's own
//! among them. An open the driver refuses for want of memory (which leaves
//! the semaphore as it was) is tried again, from sleeps, a bounded number
//! of times; one still refused then is tried again by the clock's next
//! call, and by its drop.
//!
//! [`ClockPlacer`]: device_events_core::ClockPlacer

use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use device_events_core::backend::{Gate, HostStamp, StampClock};
use device_events_core::{DriverError, ErrorKind};

use crate::VulkanDevice;
use crate::objects::Objects;
use crate::status::{check, error};

/// How long a dropped clock waits for its last anchor submission before it
/// leaves its objects to the device rather than destroy them in use.
const DROP_WAIT: Duration = Duration::from_secs(10);
/// How long the next stamp waits for the last one's fence once its stamp
/// is written: the batch's end, microseconds after.
const SETTLE_WAIT: Duration = Duration::from_millis(100);
/// How many times an open of the gate is tried while the driver refuses it
/// for want of memory, and the sleep after the first refusal, doubled after
/// each: at most 127 ms asleep, and no core spun meanwhile.
const OPEN_TRIES: u32 = 8;
const OPEN_FIRST_SLEEP: Duration = Duration::from_millis(1);

/// A Vulkan device's timestamp clock: the [`StampClock`] a
/// [`ClockPlacer`](device_events_core::ClockPlacer) anchors, and the
/// period and valid bits with which a runtime's own timestamp queries
/// on that device are read.
///
/// ```
/// use device_events_core::{ClockPlacer, AnchorConfig};
/// use device_events_vulkan::{VulkanClock, VulkanDevice};
///
/// let Ok(device) = VulkanDevice::open() else { return Ok(()) }; // no Vulkan here
/// let mut placer = ClockPlacer::new(VulkanClock::new(&device)?, AnchorConfig::default());
/// placer.calibrate()?;
/// // A runtime's own `vkCmdWriteTimestamp` results, read back:
/// // placer.place_window(start_ticks, end_ticks)
/// assert!(placer.anchor_uncertainty().is_some());
/// # Ok::<(), device_events_core::DriverError>(())
/// ```
pub struct VulkanClock {
    device: ash::Device,
    queue: Queue,
    pool: vk::CommandPool,
    /// Pre-recorded: write the stamp, then set `done`.
    buffer: vk::CommandBuffer,
    /// Pre-recorded: set `mark`, the batch ahead of a gated stamp.
    mark_buffer: vk::CommandBuffer,
    queries: vk::QueryPool,
    done: vk::Event,
    mark: vk::Event,
    fence: vk::Fence,
    /// The gate, where the device has timeline semaphores; the value the
    /// last gated stamp waits for, and whether it was signalled.
    gate: vk::Semaphore,
    gate_value: u64,
    gate_shut: bool,
    /// The gate was closed: the next stamp waits behind it.
    gate_closed: bool,
    /// How the last open of the gate failed, if it did.
    open_failed: OpenFailed,
    /// A submission not yet seen complete: its objects are in use.
    in_flight: bool,
    /// The device wrote the last stamp (`done` was seen set).
    written: bool,
    period_ns: f64,
    valid_bits: u32,
    calibrated: Option<ash::ext::calibrated_timestamps::Device>,
}

/// How the last open of the gate failed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OpenFailed {
    No,
    /// Refused for want of memory, every try: the semaphore is as it was,
    /// and the clock's next call tries again before anything else.
    ForMemory,
    /// Another error: whether the signal took effect is unknown, so the
    /// semaphore's value is read before it is signalled again, by the
    /// clock's next call too.
    Unknown,
}

/// Where anchor submissions go, and what keeps the device alive.
enum Queue {
    /// A device of this crate's: its lock serialises submissions.
    Owned(Arc<VulkanDevice>),
    /// The caller's: it keeps the device alive and the queue unshared
    /// during this clock's calls.
    Raw(vk::Queue),
}

impl VulkanClock {
    /// A clock on a device this crate opened.
    ///
    /// # Errors
    ///
    /// The driver's error when an object of the clock could not be made.
    pub fn new(device: &Arc<VulkanDevice>) -> Result<Self, DriverError> {
        let calibrated = pairing(
            &device.entry,
            &device.instance,
            device.physical,
            &device.device,
            device.features.calibrated_timestamps,
        );
        // SAFETY: the `Arc` held in `Queue::Owned` keeps the device alive
        // as long as the clock; its queue's lock serialises submissions.
        unsafe {
            Self::make(
                &device.instance,
                device.physical,
                device.device.clone(),
                device.family,
                Queue::Owned(Arc::clone(device)),
                calibrated,
                device.features.timeline_semaphore,
            )
        }
    }

    /// A clock on a runtime's own device, anchored through `queue` of
    /// `family`: the queue whose timestamps the runtime places (timestamps
    /// written on different queues need not be comparable).
    /// `features`: what the device was created with, of what the clock can
    /// use.
    ///
    /// # Safety
    ///
    /// - `entry` is the loader `instance` came from, `physical` is one of
    ///   `instance`'s, `device` was made from `physical` with a queue of
    ///   `family`, and `queue` is that queue;
    /// - each of `features` set was enabled when the device was made
    ///   (`VK_EXT_calibrated_timestamps`; `timelineSemaphore`, on a Vulkan
    ///   1.2 device);
    /// - all of them stay live until the clock is dropped, and no other
    ///   thread uses `queue` during any call on the clock or its drop
    ///   (Vulkan's external synchronisation of a queue).
    ///
    /// # Errors
    ///
    /// The driver's error when an object of the clock could not be made;
    /// [`ErrorKind::NoDevice`] for a queue family without timestamps, or
    /// neither graphics nor compute.
    pub unsafe fn from_raw(
        entry: &ash::Entry,
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        device: &ash::Device,
        family: u32,
        queue: vk::Queue,
        features: crate::VulkanFeatures,
    ) -> Result<Self, DriverError> {
        let calibrated = pairing(
            entry,
            instance,
            physical,
            device,
            features.calibrated_timestamps,
        );
        // SAFETY: the caller's contract.
        unsafe {
            Self::make(
                instance,
                physical,
                device.clone(),
                family,
                Queue::Raw(queue),
                calibrated,
                features.timeline_semaphore,
            )
        }
    }

    /// Nanoseconds per tick of the device's timestamps.
    pub fn period_ns(&self) -> f64 {
        self.period_ns
    }

    /// # Safety
    ///
    /// As [`from_raw`](Self::from_raw)'s, with `queue` for the queue.
    unsafe fn make(
        instance: &ash::Instance,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        family: u32,
        queue: Queue,
        calibrated: Option<ash::ext::calibrated_timestamps::Device>,
        timeline: bool,
    ) -> Result<Self, DriverError> {
        // SAFETY: `physical` is live, of `instance`.
        let (properties, families) = unsafe {
            (
                instance.get_physical_device_properties(physical),
                instance.get_physical_device_queue_family_properties(physical),
            )
        };
        let Some(properties_of_family) = families.get(family as usize) else {
            return Err(DriverError::refused(
                crate::BACKEND,
                "vkGetPhysicalDeviceQueueFamilyProperties",
                ErrorKind::InvalidHandle,
                "no such queue family on the device",
            ));
        };
        let valid_bits = properties_of_family.timestamp_valid_bits;
        let period = properties.limits.timestamp_period;
        // Resetting queries and setting events need a graphics or compute
        // pool.
        let flags = vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE;
        if valid_bits == 0
            || !(period.is_finite() && period > 0.0)
            || !properties_of_family.queue_flags.intersects(flags)
        {
            return Err(DriverError::refused(
                crate::BACKEND,
                "vkGetPhysicalDeviceQueueFamilyProperties",
                ErrorKind::NoDevice,
                "the queue family writes no timestamps, or is neither graphics nor compute",
            ));
        }
        let mut clock = Self {
            device,
            queue,
            pool: vk::CommandPool::null(),
            buffer: vk::CommandBuffer::null(),
            mark_buffer: vk::CommandBuffer::null(),
            queries: vk::QueryPool::null(),
            done: vk::Event::null(),
            mark: vk::Event::null(),
            fence: vk::Fence::null(),
            gate: vk::Semaphore::null(),
            gate_value: 0,
            gate_shut: false,
            gate_closed: false,
            open_failed: OpenFailed::No,
            in_flight: false,
            written: false,
            period_ns: f64::from(period),
            valid_bits,
            calibrated,
        };
        // On failure `clock` is dropped, destroying what was made.
        // SAFETY: the device is live (the caller's contract); each object
        // made here is the clock's alone.
        unsafe { clock.make_objects(family, timeline) }?;
        Ok(clock)
    }

    /// # Safety
    ///
    /// The device is live.
    unsafe fn make_objects(&mut self, family: u32, timeline: bool) -> Result<(), DriverError> {
        let device = &self.device;
        // SAFETY: (all below) the device is live; each create info lives
        // across its call; each handle recorded is made just before.
        unsafe {
            self.pool = check(
                "vkCreateCommandPool",
                device.create_command_pool(
                    &vk::CommandPoolCreateInfo::default().queue_family_index(family),
                    None,
                ),
            )?;
            let buffers = check(
                "vkAllocateCommandBuffers",
                device.allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(self.pool)
                        .command_buffer_count(2),
                ),
            )?;
            let mut buffers = buffers.into_iter();
            self.buffer = buffers.next().unwrap_or_default();
            self.mark_buffer = buffers.next().unwrap_or_default();
            self.queries = check(
                "vkCreateQueryPool",
                device.create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(1),
                    None,
                ),
            )?;
            for event in [&mut self.done, &mut self.mark] {
                *event = check(
                    "vkCreateEvent",
                    device.create_event(&vk::EventCreateInfo::default(), None),
                )?;
            }
            if timeline {
                let mut timeline = vk::SemaphoreTypeCreateInfo::default()
                    .semaphore_type(vk::SemaphoreType::TIMELINE)
                    .initial_value(0);
                self.gate = check(
                    "vkCreateSemaphore",
                    device.create_semaphore(
                        &vk::SemaphoreCreateInfo::default().push_next(&mut timeline),
                        None,
                    ),
                )?;
            }
            self.fence = check(
                "vkCreateFence",
                device.create_fence(&vk::FenceCreateInfo::default(), None),
            )?;
            let buffer = self.buffer;
            check(
                "vkBeginCommandBuffer",
                device.begin_command_buffer(buffer, &vk::CommandBufferBeginInfo::default()),
            )?;
            device.cmd_reset_query_pool(buffer, self.queries, 0, 1);
            device.cmd_write_timestamp(
                buffer,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.queries,
                0,
            );
            device.cmd_set_event(buffer, self.done, vk::PipelineStageFlags::BOTTOM_OF_PIPE);
            check("vkEndCommandBuffer", device.end_command_buffer(buffer))?;
            let mark = self.mark_buffer;
            check(
                "vkBeginCommandBuffer",
                device.begin_command_buffer(mark, &vk::CommandBufferBeginInfo::default()),
            )?;
            device.cmd_set_event(mark, self.mark, vk::PipelineStageFlags::BOTTOM_OF_PIPE);
            check("vkEndCommandBuffer", device.end_command_buffer(mark))?;
        }
        Ok(())
    }

    /// Whether the last submission is complete; then nothing of the
    /// clock's is in use. Once its stamp is written, the fence follows
    /// within the batch's end: waited for, up to [`SETTLE_WAIT`].
    fn settled(&mut self) -> Result<bool, DriverError> {
        if self.in_flight {
            let wait = if self.written {
                SETTLE_WAIT
            } else {
                Duration::ZERO
            };
            // SAFETY: the fence is the clock's, live.
            let waited = unsafe {
                self.device.wait_for_fences(
                    &[self.fence],
                    true,
                    u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX),
                )
            };
            match waited {
                Ok(()) => self.in_flight = false,
                Err(vk::Result::TIMEOUT) => {}
                Err(code) => return Err(error("vkWaitForFences", code)),
            }
        }
        Ok(!self.in_flight)
    }

    /// Signal the gate's value, once: a second signal of one value is
    /// outside the specification. Refused for want of memory, it is tried
    /// again from sleeps, up to [`OPEN_TRIES`] times in all.
    fn open(&mut self) -> Result<(), DriverError> {
        if !self.gate_shut {
            return Ok(());
        }
        if self.open_failed == OpenFailed::Unknown {
            // SAFETY: the semaphore is the clock's, a timeline one.
            let value = check("vkGetSemaphoreCounterValue", unsafe {
                self.device.get_semaphore_counter_value(self.gate)
            })?;
            if value >= self.gate_value {
                self.gate_shut = false;
                self.open_failed = OpenFailed::No;
                return Ok(());
            }
        }
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.gate)
            .value(self.gate_value);
        let (mut tried, mut sleep) = (1, OPEN_FIRST_SLEEP);
        loop {
            // SAFETY: the semaphore is the clock's, a timeline one; its
            // value is below `gate_value`: each value is signalled once, in
            // order; a signal refused for want of memory left the semaphore
            // as it was ("VK_ERROR_OUT_OF_*_MEMORY errors do not modify any
            // currently existing Vulkan objects"), and after another error
            // the value was read just above. No signal operation of it is
            // pending on a queue.
            let code = match unsafe { self.device.signal_semaphore(&info) } {
                Ok(()) => {
                    self.gate_shut = false;
                    self.open_failed = OpenFailed::No;
                    return Ok(());
                }
                Err(code) => code,
            };
            let for_memory = matches!(
                code,
                vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
            );
            if !for_memory || tried == OPEN_TRIES {
                self.open_failed = if for_memory {
                    OpenFailed::ForMemory
                } else {
                    OpenFailed::Unknown
                };
                return Err(error("vkSignalSemaphore", code));
            }
            std::thread::sleep(sleep);
            sleep = sleep.saturating_mul(2);
            tried += 1;
        }
    }

    /// Open a gate that an earlier open left shut, however it failed: it
    /// holds the queue, the runtime's own work included. After an error
    /// other than want of memory, the semaphore's value is read first.
    fn reopen(&mut self) -> Result<(), DriverError> {
        if self.open_failed != OpenFailed::No {
            self.open()?;
        }
        Ok(())
    }

    fn event_set(&self, event: vk::Event) -> Result<bool, DriverError> {
        // SAFETY: the event is the clock's, live.
        check("vkGetEventStatus", unsafe {
            self.device.get_event_status(event)
        })
    }

    fn mask(&self) -> u64 {
        if self.valid_bits >= 64 {
            u64::MAX
        } else {
            (1_u64 << self.valid_bits) - 1
        }
    }
}

/// The calibrated-timestamps functions, where the extension is enabled and
/// pairs the device's clock with `CLOCK_MONOTONIC`, the clock [`std::time::Instant`]
/// reads on Linux.
fn pairing(
    entry: &ash::Entry,
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    device: &ash::Device,
    enabled: bool,
) -> Option<ash::ext::calibrated_timestamps::Device> {
    if !enabled {
        return None;
    }
    let domains = ash::ext::calibrated_timestamps::Instance::new(entry, instance);
    // SAFETY: `physical` is live, of `instance`, whose device enabled the
    // extension.
    let domains = unsafe { domains.get_physical_device_calibrateable_time_domains(physical) }
        .map_err(|err| log::warn!("{}: no calibrateable time domains: {err}", crate::BACKEND))
        .ok()?;
    let both = [
        vk::TimeDomainEXT::DEVICE,
        vk::TimeDomainEXT::CLOCK_MONOTONIC,
    ]
    .iter()
    .all(|domain| domains.contains(domain));
    both.then(|| ash::ext::calibrated_timestamps::Device::new(instance, device))
}

impl Gate for VulkanClock {
    fn close(&mut self) -> Result<(), DriverError> {
        if self.gate == vk::Semaphore::null() {
            return Err(DriverError::refused(
                crate::BACKEND,
                "vkQueueSubmit",
                ErrorKind::Other,
                "the device has no timeline semaphores",
            ));
        }
        self.gate_closed = true;
        Ok(())
    }

    fn open(&mut self) -> Result<(), DriverError> {
        self.gate_closed = false;
        self.open()
    }

    fn settle(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn reached(&mut self) -> Option<Result<bool, DriverError>> {
        Some(self.event_set(self.mark))
    }
}

impl StampClock for VulkanClock {
    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)> {
        if self.gate == vk::Semaphore::null() {
            None
        } else {
            Some(self)
        }
    }

    fn period_ns(&self) -> f64 {
        self.period_ns
    }

    fn valid_bits(&self) -> u32 {
        self.valid_bits
    }

    fn queue_stamp(&mut self) -> Result<(), DriverError> {
        let gated = std::mem::take(&mut self.gate_closed);
        self.reopen()?;
        if !self.settled()? {
            return Err(DriverError::refused(
                crate::BACKEND,
                "vkQueueSubmit",
                ErrorKind::NotReady,
                "the previous anchor stamp is still queued",
            ));
        }
        let value = self.gate_value + 1;
        let mark = [self.mark_buffer];
        let stamp = [self.buffer];
        let waits = [self.gate];
        let values = [value];
        let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
        let mut timeline =
            vk::TimelineSemaphoreSubmitInfo::default().wait_semaphore_values(&values);
        let submits = if gated {
            vec![
                vk::SubmitInfo::default().command_buffers(&mark),
                vk::SubmitInfo::default()
                    .wait_semaphores(&waits)
                    .wait_dst_stage_mask(&stages)
                    .command_buffers(&stamp)
                    .push_next(&mut timeline),
            ]
        } else {
            vec![vk::SubmitInfo::default().command_buffers(&stamp)]
        };
        // SAFETY: nothing of the clock's is in use (its last submission is
        // complete); the queue is live and unshared during the submit: the
        // owned device's lock is held, or the caller's contract. A timeline
        // semaphore may be waited on before it is signalled.
        unsafe {
            check("vkResetFences", self.device.reset_fences(&[self.fence]))?;
            for event in [self.done, self.mark] {
                check("vkResetEvent", self.device.reset_event(event))?;
            }
            let submitted = match &self.queue {
                Queue::Owned(owner) => owner
                    .with_queue(|device, queue| device.queue_submit(queue, &submits, self.fence)),
                Queue::Raw(queue) => self.device.queue_submit(*queue, &submits, self.fence),
            };
            check("vkQueueSubmit", submitted)?;
        }
        self.in_flight = true;
        self.written = false;
        if gated {
            self.gate_value = value;
            self.gate_shut = true;
        }
        Ok(())
    }

    fn stamp_written(&mut self) -> Result<bool, DriverError> {
        self.reopen()?;
        if self.in_flight && !self.written {
            self.written = self.event_set(self.done)?;
        }
        Ok(self.written)
    }

    fn stamp(&mut self) -> Result<u64, DriverError> {
        if !self.written {
            return Err(DriverError::refused(
                crate::BACKEND,
                "vkGetQueryPoolResults",
                ErrorKind::NotReady,
                "no stamp written since the last submission",
            ));
        }
        let mut ticks = [0_u64];
        // SAFETY: the query is the clock's, and the device wrote it (the
        // event set after it is): it is available, asked without waiting.
        check("vkGetQueryPoolResults", unsafe {
            self.device.get_query_pool_results(
                self.queries,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        })?;
        Ok(ticks[0] & self.mask())
    }

    fn pairing(&mut self) -> Result<Option<(u64, HostStamp)>, DriverError> {
        let Some(calibrated) = &self.calibrated else {
            return Ok(None);
        };
        let infos = [
            vk::CalibratedTimestampInfoEXT::default().time_domain(vk::TimeDomainEXT::DEVICE),
            vk::CalibratedTimestampInfoEXT::default()
                .time_domain(vk::TimeDomainEXT::CLOCK_MONOTONIC),
        ];
        // SAFETY: the device was made with the extension (`calibrated` is
        // only made so); the infos live across the call.
        let (stamps, deviation) = match unsafe { calibrated.get_calibrated_timestamps(&infos) } {
            Ok(read) => read,
            Err(code) => return Err(error("vkGetCalibratedTimestampsEXT", code)),
        };
        let (Some(&device), Some(&host)) = (stamps.first(), stamps.get(1)) else {
            return Ok(None);
        };
        // The pairing of CLOCK_MONOTONIC with `Instant`, widened by the
        // driver's own deviation between its two clocks.
        Ok(crate::monotonic::instant_of(host).map(|paired| {
            (
                device & self.mask(),
                HostStamp {
                    at: paired.at,
                    uncertainty: paired.uncertainty + Duration::from_nanos(deviation),
                },
            )
        }))
    }
}

impl Drop for VulkanClock {
    fn drop(&mut self) {
        // A gate left shut (an open that failed) is opened, so that the
        // wait below can end.
        if let Err(err) = self.open() {
            log::error!(
                "{}: the anchor's gate could not be opened: {err}",
                crate::BACKEND
            );
        }
        let objects = Objects {
            pool: self.pool,
            queries: self.queries,
            events: [self.done, self.mark],
            gate: self.gate,
            fence: self.fence,
        };
        if self.in_flight {
            // SAFETY: the fence is the clock's, live.
            let waited = unsafe {
                self.device.wait_for_fences(
                    &[self.fence],
                    true,
                    u64::try_from(DROP_WAIT.as_nanos()).unwrap_or(u64::MAX),
                )
            };
            // A lost device ends every wait, and its objects may be
            // destroyed.
            if let Err(err) = waited.or_else(|code| match code {
                vk::Result::ERROR_DEVICE_LOST => Ok(()),
                code => Err(code),
            }) {
                match &self.queue {
                    Queue::Owned(owner) => {
                        log::error!(
                            "{}: the clock's last anchor submission did not complete ({err}); \
                             its objects are destroyed with the device, once it is idle",
                            crate::BACKEND
                        );
                        owner.leave(objects);
                    }
                    Queue::Raw(_) => log::error!(
                        "{}: the clock's last anchor submission did not complete ({err}); its \
                         objects are left to the device rather than destroyed in use",
                        crate::BACKEND
                    ),
                }
                return;
            }
        }
        // SAFETY: nothing of the clock's is in use; each handle is the
        // clock's, destroyed once here.
        unsafe { objects.destroy(&self.device) };
    }
}
