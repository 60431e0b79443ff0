//! The Vulkan backend on lavapipe, a real driver on the CPU: what its
//! clock offers. Placement against lavapipe's exact clock is checked in
//! `device-events-bench` (`tests/lavapipe_placement.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use device_events_core::backend::StampClock;
use device_events_core::{AnchorConfig, ClockPlacer, DriverPairing};
use device_events_vulkan::{VulkanClock, VulkanDevice};

device_events_conformance::tests_need_an_installed_runtime!(
    "Mesa's lavapipe (Vulkan on the CPU)",
    "cargo xtask test"
);

/// lavapipe, which `cargo xtask test` installs and points the loader at.
fn lavapipe() -> Arc<VulkanDevice> {
    match VulkanDevice::open() {
        Ok(device) if device.name().starts_with("llvmpipe") => device,
        Ok(device) => panic!("the device is {}, not lavapipe", device.name()),
        Err(err) => panic!("no Vulkan device opened: {err}"),
    }
}

fn config(gated_anchor: bool, driver_pairing: DriverPairing) -> AnchorConfig {
    AnchorConfig {
        gated_anchor,
        driver_pairing,
        ..AnchorConfig::default()
    }
}

#[test]
fn lavapipes_clock_counts_nanoseconds_on_64_bits() {
    let device = lavapipe();
    let clock = VulkanClock::new(&device).unwrap();
    assert_eq!(clock.period_ns(), 1.0);
    assert_eq!(clock.valid_bits(), 64);
}

#[test]
fn a_gated_stamp_waits_for_the_host_to_open_its_gate() {
    let device = lavapipe();
    let mut clock = VulkanClock::new(&device).unwrap();
    let gate = clock.gate().expect("lavapipe has timeline semaphores");
    gate.close().unwrap();
    clock.queue_stamp().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !clock.gate().unwrap().reached().unwrap().unwrap() {
        assert!(
            std::time::Instant::now() < deadline,
            "the gate's mark never set"
        );
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        !clock.stamp_written().unwrap(),
        "stamped through a shut gate"
    );
    clock.gate().unwrap().open().unwrap();
    while !clock.stamp_written().unwrap() {
        assert!(
            std::time::Instant::now() < deadline,
            "never stamped once opened"
        );
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert!(clock.stamp().unwrap() > 0);
}

#[test]
fn a_stamp_is_not_read_before_the_device_wrote_it() {
    let device = lavapipe();
    let mut clock = VulkanClock::new(&device).unwrap();
    let err = clock.stamp().unwrap_err();
    assert_eq!(err.kind(), device_events_core::ErrorKind::NotReady, "{err}");
}

#[test]
fn anchor_after_anchor_reuses_the_clocks_objects() {
    let device = lavapipe();
    let mut placer = ClockPlacer::new(
        VulkanClock::new(&device).unwrap(),
        config(false, DriverPairing::Off),
    );
    for _ in 0..50 {
        placer.calibrate().unwrap();
    }
}

#[test]
fn the_drivers_pairing_trusted_by_name_narrows_the_anchor_below_a_bracket() {
    let device = lavapipe();
    let mut bracket = ClockPlacer::new(
        VulkanClock::new(&device).unwrap(),
        config(false, DriverPairing::Off),
    );
    let mut paired = ClockPlacer::new(
        VulkanClock::new(&device).unwrap(),
        config(false, DriverPairing::Unchecked),
    );
    bracket.calibrate().unwrap();
    paired.calibrate().unwrap();
    let (bracket, paired) = (
        bracket.anchor_uncertainty().unwrap(),
        paired.anchor_uncertainty().unwrap(),
    );
    assert!(paired < bracket, "paired ±{paired:?}, bracket ±{bracket:?}");
}
