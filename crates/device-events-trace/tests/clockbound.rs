//! The host clock's bound as AWS ClockBound's daemon states it in its
//! shared memory (its `PROTOCOL.md`, versions 1 and 2), read from files
//! written in that layout.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::time::Duration;

use device_events_trace::HostClock;

const MAGIC: [u8; 8] = [0x41, 0x4D, 0x5A, 0x4E, 0x43, 0x42, 0x02, 0x00];
const SYNCHRONIZED: i32 = 1;
const FREE_RUNNING: i32 = 2;

/// One segment's fields, as the daemon writes them.
struct Segment {
    version: u16,
    generation: u16,
    as_of_s: i64,
    void_after_s: i64,
    bound_ns: i64,
    drift_ppb: u32,
    status: i32,
}

/// A daemon's fresh segment: synchronised, bound 40 µs, no drift, good for
/// decades.
fn fresh(version: u16) -> Segment {
    Segment {
        version,
        generation: 2,
        as_of_s: 0,
        void_after_s: 1_000_000_000,
        bound_ns: 40_000,
        drift_ppb: 0,
        status: SYNCHRONIZED,
    }
}

/// `segment` written in the daemon's layout to a file of its own.
fn write(name: &str, segment: &Segment) -> PathBuf {
    let mut bytes = Vec::new();
    bytes.extend(MAGIC);
    bytes.extend(4096u32.to_ne_bytes());
    bytes.extend(segment.version.to_ne_bytes());
    bytes.extend(segment.generation.to_ne_bytes());
    for value in [
        segment.as_of_s,
        0,
        segment.void_after_s,
        0,
        segment.bound_ns,
    ] {
        bytes.extend(value.to_ne_bytes());
    }
    if segment.version == 2 {
        bytes.extend(0u64.to_ne_bytes()); // disruption marker
        bytes.extend(segment.drift_ppb.to_ne_bytes());
        bytes.extend(segment.status.to_ne_bytes());
    } else {
        bytes.extend(segment.drift_ppb.to_ne_bytes());
        bytes.extend(0u32.to_ne_bytes()); // reserved
        bytes.extend(segment.status.to_ne_bytes());
    }
    bytes.resize(4096, 0);
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("clockbound-{name}"));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_synchronised_daemons_bound_is_the_host_clocks_stated_error() {
    for version in [1, 2] {
        let clock = HostClock::from_clockbound(write(&format!("v{version}"), &fresh(version)));
        assert_eq!(
            clock,
            Some(HostClock {
                max_error: Duration::from_micros(40),
                est_error: Duration::from_micros(40),
                synchronised: true,
            }),
            "version {version}"
        );
    }
}

#[test]
fn the_bound_grows_by_the_stated_drift_since_it_was_computed() {
    // Computed at boot, drifting 1 ppm since: at least 1 µs more per
    // second the machine has been up.
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable `timespec`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    let up = Duration::new(now.tv_sec.try_into().unwrap(), 0);
    let segment = Segment {
        drift_ppb: 1_000,
        ..fresh(2)
    };
    let clock = HostClock::from_clockbound(write("drift", &segment)).unwrap();
    assert!(
        clock.max_error >= Duration::from_micros(40) + up / 1_000_000,
        "{clock:?} after {up:?} up"
    );
}

#[test]
fn a_free_running_clock_is_unsynchronised() {
    let segment = Segment {
        status: FREE_RUNNING,
        ..fresh(2)
    };
    let clock = HostClock::from_clockbound(write("free", &segment)).unwrap();
    assert!(!clock.synchronised);
}

#[test]
fn a_bound_past_its_void_after_time_is_unsynchronised() {
    let segment = Segment {
        void_after_s: 0,
        ..fresh(2)
    };
    let clock = HostClock::from_clockbound(write("void", &segment)).unwrap();
    assert!(!clock.synchronised);
}

#[test]
fn a_segment_mid_update_is_not_read() {
    let segment = Segment {
        generation: 3,
        ..fresh(2)
    };
    assert_eq!(HostClock::from_clockbound(write("odd", &segment)), None);
}

#[test]
fn a_file_that_is_not_a_clockbound_segment_is_none_not_a_panic() {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clockbound-garbage");
    for bytes in [&b""[..], &b"AMZNCB"[..], &[0xff; 4096][..], &MAGIC[..]] {
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(HostClock::from_clockbound(&path), None, "{bytes:?}");
    }
    assert_eq!(
        HostClock::from_clockbound(path.with_extension("missing")),
        None
    );
}
