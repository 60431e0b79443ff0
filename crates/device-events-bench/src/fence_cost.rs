//! What a fence costs the thread that makes it, with and without timing:
//! an event recorded then queried (a poll), and recorded then waited on by
//! another stream (a hand-off), each with an event made with timing
//! (`CU_EVENT_DEFAULT`) and without (`CU_EVENT_DISABLE_TIMING`, the kind
//! NVIDIA documents as the fast one to record, query and wait on, and the
//! kind the library's fences use), through the driver's calls alone; and
//! the library's own pooled fence doing each. A/B interleaved rounds, on
//! streams with no work.

use std::time::Instant;

use cudarc::driver::result::{self, stream::StreamKind};
use cudarc::driver::sys::{self, CUevent_flags, CUresult};
use device_events_core::{EventApi, FencePool};
use device_events_cuda::Cuda;
use serde_json::{Value, json};

/// Two raw streams of the current context, synchronized and destroyed on
/// every path.
struct Streams([sys::CUstream; 2]);

impl Streams {
    fn new() -> Result<Self, String> {
        let a = result::stream::create(StreamKind::NonBlocking)
            .map_err(|e| format!("cuStreamCreate: {e}"))?;
        match result::stream::create(StreamKind::NonBlocking) {
            Ok(b) => Ok(Self([a, b])),
            Err(e) => {
                // SAFETY: made above, destroyed once, nothing queued.
                let _ = unsafe { result::stream::destroy(a) };
                Err(format!("cuStreamCreate: {e}"))
            }
        }
    }

    fn synchronize(&self) -> Result<(), String> {
        for s in self.0 {
            // SAFETY: a live stream of this struct.
            unsafe { result::stream::synchronize(s) }
                .map_err(|e| format!("cuStreamSynchronize: {e}"))?;
        }
        Ok(())
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        let _ = self.synchronize();
        for s in self.0 {
            // SAFETY: made in `new`, destroyed once, its work done.
            let _ = unsafe { result::stream::destroy(s) };
        }
    }
}

/// `n` events of one kind, destroyed on every path.
struct Events(Vec<sys::CUevent>);

impl Events {
    fn new(flags: CUevent_flags, n: usize) -> Result<Self, String> {
        let mut events = Self(Vec::with_capacity(n));
        for _ in 0..n {
            events
                .0
                .push(result::event::create(flags).map_err(|e| format!("cuEventCreate: {e}"))?);
        }
        Ok(events)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        for event in self.0.drain(..) {
            // SAFETY: made in `new`, destroyed once (in flight is allowed:
            // the driver frees it once reached).
            let _ = unsafe { result::event::destroy(event) };
        }
    }
}

/// What one side of a round does with each event.
#[derive(Clone, Copy)]
enum Op {
    /// Record on the first stream, then ask whether reached.
    RecordQuery,
    /// Record on the first stream, then make the second wait on it.
    RecordWait,
}

/// Mean ns per event of `op` over `events`; queries that said not yet
/// are added to `not_ready`.
fn time(op: Op, events: &Events, streams: &Streams, not_ready: &mut u64) -> Result<f64, String> {
    let [a, b] = streams.0;
    let started = Instant::now();
    for &event in &events.0 {
        // SAFETY: live events and streams of this context.
        unsafe {
            result::event::record(event, a).map_err(|e| format!("cuEventRecord: {e}"))?;
            match op {
                Op::RecordQuery => match sys::cuEventQuery(event) {
                    CUresult::CUDA_SUCCESS => {}
                    CUresult::CUDA_ERROR_NOT_READY => *not_ready += 1,
                    status => return Err(format!("cuEventQuery: {status:?}")),
                },
                Op::RecordWait => result::stream::wait_event(
                    b,
                    event,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
                .map_err(|e| format!("cuStreamWaitEvent: {e}"))?,
            }
        }
    }
    let ns = started.elapsed().as_nanos() as f64 / events.0.len().max(1) as f64;
    streams.synchronize()?;
    Ok(ns)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Each op with and without timing, `rounds` rounds of `batch` events
/// each, the order alternating: each side's median of the rounds' means,
/// and the median of the rounds' ratios. Then the library's pooled fence
/// (events without timing) asked whether complete and waited on by
/// another stream, likewise.
///
/// # Errors
///
/// The first call the driver refused, in words.
pub fn fence_cost(rounds: usize, batch: usize) -> Result<Value, String> {
    let streams = Streams::new()?;
    let timed = Events::new(CUevent_flags::CU_EVENT_DEFAULT, batch)?;
    let untimed = Events::new(CUevent_flags::CU_EVENT_DISABLE_TIMING, batch)?;
    let mut report = serde_json::Map::new();
    for (name, op) in [
        ("record_query", Op::RecordQuery),
        ("record_stream_wait", Op::RecordWait),
    ] {
        // A first round each, untimed: the driver's paths warmed.
        let mut not_ready = [0, 0];
        time(op, &timed, &streams, &mut 0)?;
        time(op, &untimed, &streams, &mut 0)?;
        let (mut with, mut without, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (w, wo) = if round % 2 == 0 {
                let w = time(op, &timed, &streams, &mut not_ready[0])?;
                (w, time(op, &untimed, &streams, &mut not_ready[1])?)
            } else {
                let wo = time(op, &untimed, &streams, &mut not_ready[1])?;
                (time(op, &timed, &streams, &mut not_ready[0])?, wo)
            };
            with.push(w);
            without.push(wo);
            ratios.push(wo / w);
        }
        let mut row = json!({
            "timing_ns": median(with),
            "untimed_ns": median(without),
            "untimed_over_timing": median(ratios),
        });
        if matches!(op, Op::RecordQuery) {
            row["not_ready"] = json!({ "timing": not_ready[0], "untimed": not_ready[1] });
        }
        report.insert(name.into(), row);
    }
    drop((timed, untimed));
    report.insert("library".into(), library(rounds, batch)?);
    report.insert("rounds".into(), json!(rounds));
    report.insert("batch".into(), json!(batch));
    Ok(Value::Object(report))
}

/// The library's pooled fence: made and asked, made and waited on by
/// another stream; median ns per fence over the rounds.
fn library(rounds: usize, batch: usize) -> Result<Value, String> {
    let a = Cuda::stream_create_non_blocking().map_err(|e| e.to_string())?;
    let b = Cuda::stream_create_non_blocking().map_err(|e| e.to_string())?;
    let pool = FencePool::<Cuda>::new();
    let run = |wait: bool| -> Result<f64, String> {
        let mut fences = Vec::with_capacity(batch);
        let started = Instant::now();
        for _ in 0..batch {
            let fence = pool.fence(a);
            if wait {
                fence.wait_async(b).map_err(|e| e.to_string())?;
            } else {
                fence.is_complete().map_err(|e| e.to_string())?;
            }
            fences.push(fence);
        }
        let ns = started.elapsed().as_nanos() as f64 / batch.max(1) as f64;
        for s in [a, b] {
            Cuda::stream_synchronize(s).map_err(|e| e.to_string())?;
        }
        // Back to the pool, outside the timing.
        drop(fences);
        Ok(ns)
    };
    let measured = (|| {
        run(false)?;
        run(true)?;
        let (mut asked, mut waited) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            asked.push(run(false)?);
            waited.push(run(true)?);
        }
        Ok::<_, String>(json!({
            "fence_is_complete_ns": median(asked),
            "fence_wait_async_ns": median(waited),
        }))
    })();
    drop(pool);
    let destroyed = [Cuda::stream_destroy(a), Cuda::stream_destroy(b)];
    let measured = measured?;
    for destroyed in destroyed {
        destroyed.map_err(|e| e.to_string())?;
    }
    Ok(measured)
}
