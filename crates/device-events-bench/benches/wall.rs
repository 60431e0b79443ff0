//! Wall-clock figures for `cargo xtask bench`, measured with criterion in
//! one run: the core alone, and windows at scale. The comparison with
//! cudarc is timed A/B interleaved by `bench-probe wall`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use device_events_bench::{Null, NullStream, fence, resolve, window};
use device_events_core::EventProfiler;

fn core_alone(c: &mut Criterion) {
    let mut group = c.benchmark_group("null");
    group.bench_function("fence", |b| b.iter(|| fence::<Null>(NullStream)));
    let mut profiler = EventProfiler::<Null>::new();
    group.bench_function("window", |b| b.iter(|| window(&mut profiler, NullStream)));
    group.finish();
}

/// `n` windows opened, all stopped, then all resolved: the time of one
/// such round, which `xtask bench` divides by `n`.
///
/// The heap is held between rounds, as `cargo xtask bench` holds it (its
/// `MALLOC_TRIM_THRESHOLD_`), so that a hand run reads the same: glibc
/// would hand a freed heap top back to the kernel and fault it in again
/// the next round, which at a million windows is a quarter of the round's
/// cycles in the page-fault path, the kernel's cost, not the library's.
fn scale(c: &mut Criterion) {
    // SAFETY: `mallopt` only tunes the allocator, with a value it accepts;
    // called before this bench allocates anything it measures.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 512 << 20);
    }
    let mut group = c.benchmark_group("scale");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500));
    for n in [1_000usize, 10_000, 100_000, 1_000_000] {
        group.bench_with_input(BenchmarkId::new("windows", n), &n, |b, &n| {
            let mut profiler = EventProfiler::<Null>::new();
            b.iter_custom(|rounds| {
                let mut took = Duration::ZERO;
                for _ in 0..rounds {
                    let started = Instant::now();
                    let tokens: Vec<_> = (0..n).map(|_| profiler.start(NullStream)).collect();
                    let pending: Vec<_> = tokens
                        .into_iter()
                        .map(|t| profiler.stop(NullStream, t).unwrap())
                        .collect();
                    for timing in pending {
                        resolve(timing).unwrap();
                    }
                    took += started.elapsed();
                }
                took
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = core_alone, scale
}
criterion_main!(benches);
