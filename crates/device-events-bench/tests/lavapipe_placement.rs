//! Placement checked against a real driver's exact clock: lavapipe stamps
//! with the host's `CLOCK_MONOTONIC`, so the true host time of every stamp
//! is known. One behaviour per check, each on a runtime's own timestamps.
//! Run by `cargo xtask test`, which installs lavapipe and points the
//! loader at it; plain `cargo test` without it says so in one line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use device_events_bench::lavapipe::{Skewed, Stamps, device, place_one};
use device_events_core::{AnchorConfig, ClockPlacer, DriverPairing};
use device_events_vulkan::VulkanClock;

device_events_conformance::tests_need_an_installed_runtime!(
    "Mesa's lavapipe (Vulkan on the CPU)",
    "cargo xtask test"
);

/// How anchors are taken: `(gated, the driver's pairing)`.
const MODES: [(&str, bool, bool); 3] = [
    ("bracket", false, false),
    ("gated", true, false),
    ("calibrated", false, true),
];

fn config(gated: bool, paired: bool) -> AnchorConfig {
    AnchorConfig {
        gated_anchor: gated,
        driver_pairing: if paired {
            DriverPairing::Bracketed
        } else {
            DriverPairing::Off
        },
        ..AnchorConfig::default()
    }
}

/// Place `count` windows of a runtime's own stamps, `gap` apart, through
/// `placer`, re-anchoring when due; each ends' error against the truth,
/// and the bound stated for it, in ns.
fn placed_errors<C: device_events_core::backend::StampClock>(
    placer: &mut ClockPlacer<Skewed<C>>,
    stamps: &Stamps,
    count: usize,
    gap: Duration,
) -> Vec<(u128, u128)> {
    let mut out = Vec::new();
    for _ in 0..count {
        let (ends, bound) = place_one(placer, stamps);
        out.extend(ends.map(|end| (end.as_nanos(), bound.as_nanos())));
        std::thread::sleep(gap);
    }
    out
}

fn assert_within(mode: &str, errors: &[(u128, u128)]) {
    let mut sorted: Vec<u128> = errors.iter().map(|(e, _)| *e).collect();
    sorted.sort_unstable();
    let mut bounds: Vec<u128> = errors.iter().map(|(_, b)| *b).collect();
    bounds.sort_unstable();
    println!(
        "{mode}: error median {} ns, p99 {} ns, worst {} ns; bound median {} ns",
        sorted[sorted.len() / 2],
        sorted[sorted.len() * 99 / 100],
        sorted[sorted.len() - 1],
        bounds[bounds.len() / 2]
    );
    let outside: Vec<_> = errors.iter().filter(|(e, b)| e > b).collect();
    assert!(
        outside.is_empty(),
        "{mode}: {} of {} ends outside their stated bound (error, bound in ns): {:?}",
        outside.len(),
        errors.len(),
        &outside[..outside.len().min(5)]
    );
}

#[test]
fn every_placed_stamp_lies_within_its_stated_bound_of_the_truth() {
    let device = device();
    let stamps = Stamps::new(&device);
    for (mode, gated, paired) in MODES {
        let clock = Skewed::new(VulkanClock::new(&device).unwrap());
        let mut placer = ClockPlacer::new(clock, config(gated, paired));
        let errors = placed_errors(&mut placer, &stamps, 100, Duration::from_millis(2));
        assert_within(mode, &errors);
    }
}

#[test]
fn a_clock_offset_and_drifting_100_ppm_is_placed_within_its_bound() {
    let device = device();
    let stamps = Stamps::new(&device);
    for (mode, gated, paired) in MODES {
        let mut clock = Skewed::new(VulkanClock::new(&device).unwrap());
        clock.offset = 123_456_789_000;
        clock.ppm = 100.0;
        let mut placer = ClockPlacer::new(clock, config(gated, paired));
        let errors = placed_errors(&mut placer, &stamps, 150, Duration::from_millis(10));
        assert_within(mode, &errors);
    }
}

#[test]
fn a_pairing_seconds_off_is_refused_and_the_bracket_kept() {
    let device = device();
    let stamps = Stamps::new(&device);
    let mut clock = Skewed::new(VulkanClock::new(&device).unwrap());
    // As an AMD driver's calibrated timestamps were once off.
    clock.pairing_off = Duration::from_millis(11_850);
    let mut placer = ClockPlacer::new(clock, config(false, true));
    placer.calibrate().unwrap();
    assert_eq!(placer.refused_pairings(), 1);
    let errors = placed_errors(&mut placer, &stamps, 10, Duration::from_millis(1));
    assert_within("refused pairing", &errors);
}

#[test]
fn a_pairing_moved_late_inside_its_bracket_is_placed_within_its_bound() {
    let device = device();
    let stamps = Stamps::new(&device);
    let mut clock = Skewed::new(VulkanClock::new(&device).unwrap());
    // Later than the deviation the driver states, earlier than the
    // bracket's edge: nothing the bracket alone can tell.
    clock.pairing_off = Duration::from_micros(8);
    let mut placer = ClockPlacer::new(clock, config(false, true));
    let errors = placed_errors(&mut placer, &stamps, 20, Duration::from_millis(1));
    assert_within("pairing 8 µs late", &errors);
}
