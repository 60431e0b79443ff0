//! Zones through Tracy's Rust client, whichever of its versions the build
//! has: 0.18 and 0.19 upload a span's two stamps one by one and can re-sync
//! a context; 0.17 uploads both in one consuming call and cannot.

#[cfg(feature = "tracy")]
use tracy_client as client;
#[cfg(all(feature = "tracy-0-17", not(feature = "tracy")))]
use tracy_client_0_17 as client;

use super::order::Sink;

/// Tracy's client, running.
pub(crate) struct Client(pub(crate) client::Client);

impl Client {
    pub(crate) fn start() -> Client {
        Client(client::Client::start())
    }
}

impl Sink for Client {
    type Context = client::GpuContext;

    fn context(&mut self, name: &str, now: i64) -> Option<client::GpuContext> {
        // OpenCL: the nearest of the types every version has to a device
        // event API (a debug build of Tracy 0.11's server refuses Invalid).
        // Period 1: one tick is one nanosecond of the writer's clock.
        self.0
            .clone()
            .new_gpu_context(Some(name), client::GpuContextType::OpenCL, now, 1.0)
            .ok()
    }

    fn zone(
        &mut self,
        context: &mut client::GpuContext,
        label: &str,
        start: i64,
        end: i64,
    ) -> bool {
        // Begun and ended back to back: Tracy nests a context's zones by
        // the order of these calls, and each window is a whole zone.
        let Ok(mut span) = context.span_alloc(label, label, "", 0) else {
            return false;
        };
        span.end_zone();
        upload(span, start, end);
        true
    }

    #[cfg(feature = "tracy")]
    fn sync(&mut self, context: &mut client::GpuContext, now: i64) {
        context.sync_gpu_time(now);
    }

    /// 0.17 has no re-sync: the pairing made at the context's creation
    /// stands for the whole capture.
    #[cfg(not(feature = "tracy"))]
    fn sync(&mut self, _context: &mut client::GpuContext, _now: i64) {}
}

#[cfg(feature = "tracy")]
fn upload(span: client::GpuSpan, start: i64, end: i64) {
    span.upload_timestamp_start(start);
    span.upload_timestamp_end(end);
}

#[cfg(not(feature = "tracy"))]
fn upload(span: client::GpuSpan, start: i64, end: i64) {
    span.upload_timestamp(start, end);
}
