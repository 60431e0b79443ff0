//! The user's `tracing` spans in the Perfetto trace, beside the device's
//! windows and on their clock.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use tracing_core::span::{Attributes, Id};
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::TrackId;
use crate::perfetto::PerfettoWriter;

/// A `tracing-subscriber` layer that writes each `tracing` span
/// (`#[instrument]`, `info_span!`) into a [`PerfettoWriter`]'s trace: a
/// slice from each entry to its exit, on a track for the thread it ran on,
/// on the same clock as the device's windows.
///
/// ```
/// use std::sync::Arc;
/// use device_events_trace::{Perfetto, PerfettoLayer};
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let trace = Arc::new(Perfetto::new("server").to_writer(Vec::new())?);
/// let subscriber = tracing_subscriber::registry().with(PerfettoLayer::new(Arc::clone(&trace)));
/// tracing::subscriber::with_default(subscriber, || {
///     let _request = tracing::info_span!("request").entered();
/// });
/// assert_eq!(trace.finish()?, 0, "nothing dropped");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct PerfettoLayer {
    trace: Arc<PerfettoWriter>,
}

impl PerfettoLayer {
    /// A layer writing into `trace`, which the caller may still add device
    /// windows to and finish.
    pub fn new(trace: Arc<PerfettoWriter>) -> PerfettoLayer {
        PerfettoLayer { trace }
    }

    /// The calling thread's track in this layer's trace, made on its first
    /// span.
    fn thread_track(&self) -> TrackId {
        thread_local! {
            static TRACK: Cell<Option<(u64, TrackId)>> = const { Cell::new(None) };
        }
        let id = self.trace.id();
        TRACK.with(|cached| match cached.get() {
            Some((writer, track)) if writer == id => track,
            _ => {
                let current = std::thread::current();
                let name = current
                    .name()
                    .map_or_else(|| format!("thread {:?}", current.id()), str::to_owned);
                let track = self.trace.host_thread(name);
                cached.set(Some((id, track)));
                track
            }
        })
    }
}

/// Entries of a span not yet exited, innermost last.
struct Entered(Vec<Instant>);

impl<S> Layer<S> for PerfettoLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Entered(Vec::new()));
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(entered) = span.extensions_mut().get_mut::<Entered>()
        {
            entered.0.push(Instant::now());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        let end = Instant::now();
        let Some(span) = ctx.span(id) else {
            return;
        };
        let start = span
            .extensions_mut()
            .get_mut::<Entered>()
            .and_then(|entered| entered.0.pop());
        if let Some(start) = start {
            let metadata: &'static Metadata<'static> = span.metadata();
            self.trace
                .host_span(self.thread_track(), metadata.name(), start, end);
        }
    }
}
