//! Chained windows: one record closes a window and opens the next, so a
//! server that times every kernel pays one record per kernel.

use super::{EventProfiler, Opened};
use crate::anchoring::AnchorApi;
use crate::errors::ProfileError;
use crate::events::point::{Point, SharedEvent};
use crate::profiler::token::ProfileToken;
use crate::waiting::placed_window::{PlacedWindow, Resolving};

impl<A: AnchorApi> EventProfiler<A> {
    /// Close the window on `stream` and open the next there, at one
    /// recorded point: the end of one is the start of the other, so a
    /// server that times every kernel pays one record per kernel, and the
    /// durations of a chain add up to its span.
    ///
    /// ```
    /// use device_events_core::{EventApi, EventProfiler, OwnedStream, sim::Sim};
    /// use std::time::Duration;
    ///
    /// let stream = OwnedStream::<Sim>::new()?;
    /// let s = stream.get();
    /// let mut profiler = EventProfiler::<Sim>::new();
    /// let first = profiler.start(s);
    /// Sim::enqueue_work(s, Duration::from_micros(100));
    /// let (first, second) = profiler.split(s, first)?;
    /// Sim::enqueue_work(s, Duration::from_micros(200));
    /// let second = profiler.stop(s, second)?;
    /// let first = pollster::block_on(first).expect("measured");
    /// let second = pollster::block_on(second).expect("measured");
    /// assert!(first.duration >= Duration::from_micros(100));
    /// assert!(second.duration >= Duration::from_micros(200));
    /// # drop(profiler);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`stop`](Self::stop). When the boundary's record fails, both
    /// windows it would have bounded fail with it: start a new chain.
    pub fn split(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<(PlacedWindow<A>, ProfileToken), ProfileError> {
        let (closed, next) = self.cut(stream, token)?;
        Ok((PlacedWindow { resolving: closed }, next))
    }

    /// The closed window's reading and the next window's token, kept in
    /// the closed window's slot under a new key: the old token is spent.
    fn cut(
        &mut self,
        stream: A::Stream,
        token: ProfileToken,
    ) -> Result<(Resolving<A>, ProfileToken), ProfileError> {
        let key = self.key_of(token)?;
        let (window, vacant) = self
            .windows
            .take_vacant(key)
            .ok_or(ProfileError::StaleToken)?;
        let bounded = window.and_then(|opened| Ok((opened, self.recorded(stream)?)));
        let (opened, boundary) = match bounded {
            Ok(bounded) => bounded,
            Err(err) => {
                self.windows.free(vacant);
                return Err(err.into());
            }
        };
        let (end, start) = SharedEvent::pair(&self.pool, boundary);
        let closed = self.resolving(opened, Point::Shared(end), stream);
        let next = match self.anchoring.for_window(stream) {
            Ok(anchor) => Ok(Opened {
                start: Point::Shared(start),
                anchor,
            }),
            Err(err) => Err(self.noted(err)),
        };
        let next = ProfileToken {
            profiler: self.id,
            key: self.windows.fill(vacant, next),
        };
        Ok((closed, next))
    }
}
