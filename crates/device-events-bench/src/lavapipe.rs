//! Placement truth on lavapipe, Mesa's Vulkan driver on the CPU, whose
//! timestamps are the host's `CLOCK_MONOTONIC` in nanoseconds: the exact
//! host time of every stamp is known. A runtime's own timestamps, placed
//! through [`ClockPlacer`]s taking turns, each end against that truth.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;
use device_events_core::backend::HostStamp;
use device_events_core::backend::{Gate, StampClock};
use device_events_core::{AnchorConfig, ClockPlacer, DriverError, DriverPairing};
use device_events_vulkan::{VulkanClock, VulkanDevice};

use crate::placement::Errors;

/// lavapipe, which `cargo xtask test` and `cargo xtask bench` install and
/// point the loader at. The truth of these checks is lavapipe's clock:
/// another driver's ticks are not the host's.
///
/// # Panics
///
/// Without a Vulkan device, or with one that is not lavapipe.
pub fn device() -> Arc<VulkanDevice> {
    match VulkanDevice::open() {
        Ok(device) if device.name().starts_with("llvmpipe") => device,
        Ok(device) => panic!("the device is {}, not lavapipe", device.name()),
        Err(err) => panic!("no Vulkan device opened: {err}"),
    }
}

/// `instant`'s `CLOCK_MONOTONIC` reading in nanoseconds, exactly: on
/// Linux an `Instant` is that clock's `timespec`, which its `Debug` shows.
pub fn monotonic_ns(instant: Instant) -> i128 {
    let text = format!("{instant:?}");
    let field = |name: &str| -> i128 {
        let start = text
            .find(name)
            .expect("an Instant's Debug names tv_sec and tv_nsec")
            + name.len();
        text[start..]
            .trim_start_matches([':', ' '])
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|digits| digits.parse().ok())
            .expect("digits")
    };
    field("tv_sec") * 1_000_000_000 + field("tv_nsec")
}

/// Where lavapipe's stamp `ticks` (`CLOCK_MONOTONIC` ns) lies as an
/// `Instant`: exact.
pub fn truth(ticks: u64) -> Instant {
    let now = Instant::now();
    let ago = monotonic_ns(now) - i128::from(ticks);
    let by = Duration::from_nanos(ago.unsigned_abs() as u64);
    if ago >= 0 { now - by } else { now + by }
}

/// How far `placed` is from `truth`.
pub fn error(placed: Instant, truth: Instant) -> Duration {
    placed
        .saturating_duration_since(truth)
        .max(truth.saturating_duration_since(placed))
}

/// A runtime's own timestamps: a command buffer writing two stamps into
/// a query pool of its own, submitted to the device's queue.
pub struct Stamps {
    device: Arc<VulkanDevice>,
    pool: vk::CommandPool,
    buffer: vk::CommandBuffer,
    queries: vk::QueryPool,
    fence: vk::Fence,
}

impl Stamps {
    /// The runtime's command buffer, query pool and fence on `device`.
    pub fn new(device: &Arc<VulkanDevice>) -> Self {
        // SAFETY: the device is live (held by the `Arc`); each create info
        // lives across its call.
        device.with_queue(|raw, _| unsafe {
            let pool = raw
                .create_command_pool(
                    &vk::CommandPoolCreateInfo::default()
                        .queue_family_index(device.queue_family())
                        .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER),
                    None,
                )
                .unwrap();
            let buffer = raw
                .allocate_command_buffers(
                    &vk::CommandBufferAllocateInfo::default()
                        .command_pool(pool)
                        .command_buffer_count(1),
                )
                .unwrap()[0];
            let queries = raw
                .create_query_pool(
                    &vk::QueryPoolCreateInfo::default()
                        .query_type(vk::QueryType::TIMESTAMP)
                        .query_count(2),
                    None,
                )
                .unwrap();
            let fence = raw
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .unwrap();
            Self {
                device: Arc::clone(device),
                pool,
                buffer,
                queries,
                fence,
            }
        })
    }

    /// Write a window's two stamps (the top and the bottom of one command
    /// buffer) and read them back once done.
    pub fn window(&self) -> (u64, u64) {
        // SAFETY: the objects are this runtime's, live, and not in use (the
        // last submission's fence was waited for); the queue's lock is held.
        self.device.with_queue(|raw, queue| unsafe {
            raw.reset_command_buffer(self.buffer, vk::CommandBufferResetFlags::empty())
                .unwrap();
            raw.begin_command_buffer(self.buffer, &vk::CommandBufferBeginInfo::default())
                .unwrap();
            raw.cmd_reset_query_pool(self.buffer, self.queries, 0, 2);
            raw.cmd_write_timestamp(
                self.buffer,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                self.queries,
                0,
            );
            raw.cmd_write_timestamp(
                self.buffer,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.queries,
                1,
            );
            raw.end_command_buffer(self.buffer).unwrap();
            let buffers = [self.buffer];
            raw.queue_submit(
                queue,
                &[vk::SubmitInfo::default().command_buffers(&buffers)],
                self.fence,
            )
            .unwrap();
        });
        let raw = &self.device;
        // SAFETY: the fence and queries are this runtime's, live.
        raw.with_queue(|raw, _| unsafe {
            raw.wait_for_fences(&[self.fence], true, u64::MAX).unwrap();
            raw.reset_fences(&[self.fence]).unwrap();
            let mut ticks = [0_u64; 2];
            raw.get_query_pool_results(self.queries, 0, &mut ticks, vk::QueryResultFlags::TYPE_64)
                .unwrap();
            (ticks[0], ticks[1])
        })
    }
}

impl Drop for Stamps {
    fn drop(&mut self) {
        // SAFETY: each object is this runtime's, destroyed once, and idle:
        // every submission's fence was waited for.
        self.device.with_queue(|raw, _| unsafe {
            raw.destroy_fence(self.fence, None);
            raw.destroy_query_pool(self.queries, None);
            raw.destroy_command_pool(self.pool, None);
        });
    }
}

/// A clock laid over another: its ticks moved by `offset` and run `ppm`
/// fast, so that a fit has a real drift to find on a real driver; and its
/// pairing, if any, moved by `pairing_off` on the host clock.
pub struct Skewed<C> {
    /// The clock laid over.
    pub inner: C,
    /// Ticks added to every stamp.
    pub offset: u64,
    /// How fast the skewed clock runs, in parts per million.
    pub ppm: f64,
    /// How late on the host clock the driver's pairing is moved.
    pub pairing_off: Duration,
}

impl<C> Skewed<C> {
    /// `inner`, unmoved.
    pub fn new(inner: C) -> Self {
        Self {
            inner,
            offset: 0,
            ppm: 0.0,
            pairing_off: Duration::ZERO,
        }
    }

    /// The skewed ticks of the inner clock's `ticks`.
    pub fn skew(&self, ticks: u64) -> u64 {
        let scaled = ticks as f64 * (1.0 + self.ppm * 1e-6);
        (scaled as u64).wrapping_add(self.offset)
    }
}

impl<C: StampClock> StampClock for Skewed<C> {
    fn period_ns(&self) -> f64 {
        self.inner.period_ns()
    }
    fn gate(&mut self) -> Option<&mut (dyn Gate + 'static)> {
        self.inner.gate()
    }
    fn queue_stamp(&mut self) -> Result<(), DriverError> {
        self.inner.queue_stamp()
    }
    fn stamp_written(&mut self) -> Result<bool, DriverError> {
        self.inner.stamp_written()
    }
    fn stamp(&mut self) -> Result<u64, DriverError> {
        let ticks = self.inner.stamp()?;
        Ok(self.skew(ticks))
    }
    fn pairing(&mut self) -> Result<Option<(u64, HostStamp)>, DriverError> {
        let paired = self.inner.pairing()?;
        Ok(paired.map(|(ticks, stamp)| {
            (
                self.skew(ticks),
                HostStamp {
                    at: stamp.at + self.pairing_off,
                    uncertainty: stamp.uncertainty,
                },
            )
        }))
    }
}

/// Windows of a runtime's own stamps for `seconds`, one placer per entry
/// of `configs` taking turns (each round in another order), a window
/// about every millisecond; each placer re-anchors when due. With
/// `skewed`, every placer's clock is moved by 123 s and runs 100 ppm fast,
/// so that the fit meets a real drift on a real driver.
pub fn placement(
    device: &Arc<VulkanDevice>,
    seconds: u64,
    configs: &[AnchorConfig],
    skewed: bool,
) -> Vec<Errors> {
    let stamps = Stamps::new(device);
    let mut placers: Vec<_> = configs
        .iter()
        .map(|config| {
            let mut clock = Skewed::new(VulkanClock::new(device).unwrap());
            if skewed {
                clock.offset = 123_000_000_000;
                clock.ppm = 100.0;
            }
            ClockPlacer::new(clock, *config)
        })
        .collect();
    let mut errors: Vec<Errors> = configs.iter().map(|_| Errors::default()).collect();
    let end = Instant::now() + Duration::from_secs(seconds);
    let mut round = 0;
    while Instant::now() < end {
        for turn in 0..placers.len() {
            let which = (turn + round) % placers.len();
            let (ends, bound) = place_one(&mut placers[which], &stamps);
            errors[which].windows += 1;
            for error in ends {
                // The truth is exact: no slack for its pairing.
                errors[which].add(error.as_nanos() as u64, bound, 0);
            }
            std::thread::sleep(Duration::from_micros(1_000 / placers.len() as u64));
        }
        round += 1;
    }
    errors.into_iter().map(Errors::finish).collect()
}

/// One window of the runtime's own stamps placed through `placer`,
/// anchored first when due: how far each end lies from its truth, and the
/// bound the window states.
///
/// # Panics
///
/// When the anchor or the placement fails.
pub fn place_one<C: StampClock>(
    placer: &mut ClockPlacer<Skewed<C>>,
    stamps: &Stamps,
) -> ([Duration; 2], Duration) {
    if placer.due() {
        placer.calibrate().unwrap();
    }
    let (start, end) = stamps.window();
    let clock = placer.clock();
    let window = placer
        .place_window(clock.skew(start), clock.skew(end))
        .expect("a window near its anchor is placed");
    (
        [
            error(window.start, truth(start)),
            error(window.end, truth(end)),
        ],
        window.uncertainty,
    )
}

/// The sessions lavapipe is measured with, by key: a bracket, a bracket
/// gated behind a timeline semaphore, and the driver's calibrated
/// timestamps checked against a bracket; the fit on.
pub fn sessions() -> Vec<(&'static str, AnchorConfig)> {
    let config = |gated_anchor, driver_pairing| AnchorConfig {
        gated_anchor,
        driver_pairing,
        ..AnchorConfig::default()
    };
    vec![
        ("ungated_fit_on", config(false, DriverPairing::Off)),
        ("gated_fit_on", config(true, DriverPairing::Off)),
        (
            "driver_clock_fit_on",
            config(false, DriverPairing::Bracketed),
        ),
    ]
}
