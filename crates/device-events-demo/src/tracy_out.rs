//! The demo's windows as Tracy GPU zones (`--tracy`, feature `tracy`): a
//! context per stream, each zone reserved where its window closes and
//! placed once it resolves.

use std::error::Error;

use device_events_trace::TrackId;

#[cfg(feature = "tracy")]
pub use device_events_trace::TracyZone as Zone;

/// Built without the feature, no zone exists.
#[cfg(not(feature = "tracy"))]
pub enum Zone {}

#[cfg(not(feature = "tracy"))]
impl Zone {
    pub fn place(self, _placed: Option<&device_events_core::Placement>) -> bool {
        match self {}
    }
}

/// The Tracy writer, when asked for, and its streams by the Chrome
/// trace's tracks.
pub struct Zones {
    #[cfg(feature = "tracy")]
    writer: Option<device_events_trace::TracyWriter>,
    tracks: Vec<(TrackId, TrackId)>,
}

impl Zones {
    /// Tracy's client and the zones writer when `on`.
    pub fn open(on: bool) -> Result<Zones, Box<dyn Error>> {
        #[cfg(feature = "tracy")]
        {
            let writer = if on {
                Some(device_events_trace::Tracy::new().start()?)
            } else {
                None
            };
            Ok(Zones {
                writer,
                tracks: Vec::new(),
            })
        }
        #[cfg(not(feature = "tracy"))]
        if on {
            Err("--tracy: this demo was built without its `tracy` feature \
                 (cargo xtask demo --tracy builds it with it)"
                .into())
        } else {
            Ok(Zones { tracks: Vec::new() })
        }
    }

    /// `chrome`'s stream as a GPU context named `name`.
    pub fn stream(&mut self, chrome: TrackId, name: &str) {
        #[cfg(feature = "tracy")]
        if let Some(writer) = &self.writer {
            self.tracks.push((chrome, writer.stream(name)));
        }
        #[cfg(not(feature = "tracy"))]
        let _ = (chrome, name, &mut self.tracks);
    }

    /// A zone's place on `chrome`'s stream, for the window closing now.
    pub fn zone(&self, chrome: TrackId, label: &'static str) -> Option<Zone> {
        let (_, track) = self.tracks.iter().find(|(c, _)| *c == chrome)?;
        #[cfg(feature = "tracy")]
        return self.writer.as_ref().map(|w| w.zone(*track, label));
        #[cfg(not(feature = "tracy"))]
        {
            let _ = (track, label);
            None
        }
    }

    /// Write what is placed; how many windows made no zone. `None` when
    /// Tracy was not asked for.
    pub fn finish(&self) -> Option<u64> {
        #[cfg(feature = "tracy")]
        return self
            .writer
            .as_ref()
            .map(device_events_trace::TracyWriter::finish);
        #[cfg(not(feature = "tracy"))]
        None
    }
}
