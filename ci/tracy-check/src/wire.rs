//! What a Tracy 0.11 client (protocol 66) sends its server, read for the
//! GPU zones in it: the welcome, then LZ4 frames of queue items, each
//! frame's block compressed against the ones before (a streaming LZ4
//! encoder), each item a type byte and its fixed-size fields, strings
//! trailing. Layouts from Tracy 0.11.0's `public/common/TracyQueue.hpp`
//! and `TracyProtocol.hpp`; the server's reading from `server/TracyWorker.cpp`.

use std::collections::BTreeMap;

/// `QueueDataSize` of Tracy 0.11.0, indexed by `QueueType`: the header
/// byte and the fixed fields (printed from the header by a C++ build).
const QUEUE_DATA_SIZE: [u8; 112] = [
    1, 1, 9, 12, 9, 12, 9, 9, 9, 1, 1, 1, 13, 13, 10, 17, 17, 9, 17, 17, 13, 17, 17, 17, 5, 27, 27,
    21, 21, 27, 27, 21, 21, 24, 24, 16, 16, 16, 24, 24, 16, 16, 16, 25, 21, 25, 20, 13, 12, 2, 10,
    13, 1, 1, 1, 21, 13, 1, 1, 5, 26, 18, 1, 17, 5, 4, 9, 17, 17, 17, 13, 32, 22, 13, 17, 17, 20,
    17, 20, 28, 17, 13, 25, 17, 17, 17, 17, 17, 17, 17, 16, 18, 1, 5, 1, 13, 1, 1, 9, 9, 9, 9, 9,
    9, 9, 9, 9, 9, 9, 9, 9, 9,
];

// `QueueType` values of Tracy 0.11.0.
const GPU_ZONE_BEGIN_ALLOC_SRCLOC_SERIAL: u8 = 40;
const GPU_ZONE_END_SERIAL: u8 = 42;
const GPU_TIME: u8 = 48;
const GPU_CONTEXT_NAME: u8 = 49;
const GPU_TIME_SYNC: u8 = 61;
const GPU_NEW_CONTEXT: u8 = 79;
const SINGLE_STRING_DATA: u8 = 96;
const SECOND_STRING_DATA: u8 = 97;
const STRING_DATA: u8 = 99;
const SOURCE_LOCATION_PAYLOAD: u8 = 102;
const FRAME_IMAGE_DATA: u8 = 106;
const SYMBOL_CODE: u8 = 109;
const SOURCE_CODE: u8 = 110;

/// `sizeof(WelcomeMessage)`, packed; its `flags` byte, and the on-demand
/// payload that follows it when flag 1 is set.
const WELCOME: usize = 1178;
const WELCOME_FLAGS: usize = 72;
const ON_DEMAND: usize = 16;
/// A sync this soon (writer's ns) after the last pairing, with no GPU time
/// between, is that pairing taken again: the client retakes a wide one in
/// a loop, and re-syncs otherwise once a second.
const RETAKEN_WITHIN: i64 = 100_000_000;

/// LZ4 looks back at most this far.
const WINDOW: usize = 64 * 1024;
/// `TargetFrameSize`: no frame decompresses to more.
const FRAME: usize = 256 * 1024;

/// One GPU zone as the server received it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuZone {
    pub label: String,
    pub start: Option<i64>,
    pub end: Option<i64>,
}

/// One GPU context, its zones in the order begun.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub name: Option<String>,
    pub period: f32,
    pub syncs: usize,
    /// The pairing of its GPU time with Tracy's clock (raw ticks) made at
    /// its creation.
    pub created: (i64, i64),
    /// Each pairing not taken again at once: the creation's, then each
    /// sync's.
    pub pairings: Vec<(i64, i64)>,
    /// Pairings the client took again at once, before any GPU time of the
    /// context came (their calls were wide): no time was read through them.
    pub unused: Vec<(i64, i64)>,
    /// Whether a GPU time came since the last pairing.
    timed: bool,
    /// When this process read the context's creation off the wire: its
    /// first pairing was taken before.
    pub seen: Option<std::time::Instant>,
    pub zones: Vec<GpuZone>,
    /// The last GPU time, as the server keeps it for its wrap check
    /// (0 at the context's creation and at each sync).
    last_gpu: i64,
    stack: Vec<usize>,
    queries: BTreeMap<u16, usize>,
}

/// The stream read so far.
#[derive(Default)]
pub struct Wire {
    buffer: Vec<u8>,
    welcomed: bool,
    /// Nanoseconds per tick of Tracy's clock, as the client measured it.
    pub timer_mul: f64,
    history: Vec<u8>,
    pub contexts: BTreeMap<u8, Context>,
    /// GPU times received: two per zone.
    pub times: usize,
    /// Problems the server would also have met (an unknown item, a time
    /// for no query, a zone end with none open).
    pub faults: Vec<String>,
    ref_gpu: i64,
    single_string: Option<String>,
    srcloc_name: Option<String>,
}

impl Wire {
    /// Bytes the client sent, in order.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
        loop {
            if !self.welcomed {
                let Some(flags) = self.buffer.get(1 + WELCOME_FLAGS) else {
                    return;
                };
                let size = 1 + WELCOME + if flags & 1 != 0 { ON_DEMAND } else { 0 };
                if self.buffer.len() < size {
                    return;
                }
                if self.buffer[0] != 1 {
                    self.faults
                        .push(format!("handshake status {} (1: welcome)", self.buffer[0]));
                }
                let mul = self.buffer.get(1..9).and_then(|b| b.try_into().ok());
                self.timer_mul = mul.map_or(0.0, f64::from_le_bytes);
                self.buffer.drain(..size);
                self.welcomed = true;
            }
            let Some(head) = self.buffer.get(..4) else {
                return;
            };
            let size = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            if self.buffer.len() < 4 + size {
                return;
            }
            let block: Vec<u8> = self.buffer.drain(..4 + size).skip(4).collect();
            let mut out = vec![0; FRAME];
            let dict = &self.history[self.history.len().saturating_sub(WINDOW)..];
            match lz4_flex::block::decompress_into_with_dict(&block, &mut out, dict) {
                Ok(n) => {
                    out.truncate(n);
                    self.items(&out);
                    self.history.extend_from_slice(&out);
                    let keep = self.history.len().saturating_sub(WINDOW);
                    self.history.drain(..keep);
                }
                Err(err) => self.faults.push(format!("LZ4 frame: {err}")),
            }
        }
    }

    fn items(&mut self, mut data: &[u8]) {
        while let Some(&kind) = data.first() {
            let taken = self.item(kind, data);
            match taken {
                Some(n) if n <= data.len() => data = &data[n..],
                _ => {
                    self.faults
                        .push(format!("item {kind} cut short or unknown"));
                    return;
                }
            }
        }
    }

    /// One item at the head of `data`; how many bytes it took.
    fn item(&mut self, kind: u8, data: &[u8]) -> Option<usize> {
        let u16_at = |at: usize| Some(u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?));
        let u32_at = |at: usize| Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?));
        let i64_at = |at: usize| Some(i64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?));
        let text = |from: usize, len: usize| {
            data.get(from..from + len)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        if kind >= STRING_DATA {
            // Header, the string's pointer, its size, its bytes.
            if matches!(kind, FRAME_IMAGE_DATA | SYMBOL_CODE | SOURCE_CODE) {
                return Some(13 + u32_at(9)? as usize);
            }
            let len = usize::from(u16_at(9)?);
            if kind == SOURCE_LOCATION_PAYLOAD {
                // color, line, function\0, file\0, then the name.
                let payload = data.get(11..11 + len)?;
                let mut parts = payload.get(8..)?.splitn(3, |b| *b == 0);
                let name = parts.nth(2).unwrap_or_default();
                self.srcloc_name = Some(String::from_utf8_lossy(name).into_owned());
            }
            return Some(11 + len);
        }
        if matches!(kind, SINGLE_STRING_DATA | SECOND_STRING_DATA) {
            let len = usize::from(u16_at(1)?);
            if kind == SINGLE_STRING_DATA {
                self.single_string = text(3, len);
            }
            return Some(3 + len);
        }
        let size = usize::from(*QUEUE_DATA_SIZE.get(usize::from(kind))?);
        let f = &data.get(1..size)?;
        match kind {
            GPU_NEW_CONTEXT => {
                let gpu = i64::from_le_bytes(f.get(8..16)?.try_into().ok()?);
                let cpu = i64::from_le_bytes(f.get(..8)?.try_into().ok()?);
                let context = Context {
                    period: f32::from_le_bytes(f.get(20..24)?.try_into().ok()?),
                    created: (gpu, cpu),
                    pairings: vec![(gpu, cpu)],
                    seen: Some(std::time::Instant::now()),
                    ..Context::default()
                };
                self.contexts.insert(*f.get(24)?, context);
            }
            GPU_CONTEXT_NAME => {
                let name = self.single_string.take();
                match self.contexts.get_mut(f.first()?) {
                    Some(context) => context.name = name,
                    None => self.faults.push("a name for no context".into()),
                }
            }
            GPU_ZONE_BEGIN_ALLOC_SRCLOC_SERIAL | GPU_ZONE_END_SERIAL => {
                let query = u16::from_le_bytes(f.get(12..14)?.try_into().ok()?);
                let Some(context) = self.contexts.get_mut(f.get(14)?) else {
                    self.faults.push("a zone of no context".into());
                    return Some(size);
                };
                if kind == GPU_ZONE_END_SERIAL {
                    match context.stack.pop() {
                        Some(zone) => {
                            if context.queries.insert(query, zone).is_some() {
                                self.faults
                                    .push(format!("query {query} reused while still open"));
                            }
                        }
                        None => self.faults.push("a zone end with none open".into()),
                    }
                } else {
                    context.zones.push(GpuZone {
                        label: self.srcloc_name.take().unwrap_or_default(),
                        ..GpuZone::default()
                    });
                    let zone = context.zones.len() - 1;
                    context.stack.push(zone);
                    if context.queries.insert(query, zone).is_some() {
                        self.faults
                            .push(format!("query {query} reused while still open"));
                    }
                }
            }
            GPU_TIME => {
                self.ref_gpu = self.ref_gpu.wrapping_add(i64_at(1)?);
                self.times += 1;
                let query = u16::from_le_bytes(f.get(8..10)?.try_into().ok()?);
                let time = self.ref_gpu;
                let mut wrapped = false;
                let zone = self.contexts.get_mut(f.get(10)?).and_then(|context| {
                    // `ProcessGpuTime`: a time this far back is a wrap.
                    wrapped = time < context.last_gpu - (1 << 31);
                    context.last_gpu = time;
                    context.timed = true;
                    let zone = context.queries.remove(&query)?;
                    context.zones.get_mut(zone)
                });
                if wrapped {
                    self.faults
                        .push(format!("GPU time {time} read as a wrap (query {query})"));
                }
                match zone {
                    Some(zone) if zone.start.is_none() => zone.start = Some(time),
                    Some(zone) => zone.end = Some(time),
                    None => self
                        .faults
                        .push(format!("a GPU time for no query ({query})")),
                }
            }
            GPU_TIME_SYNC => {
                let gpu = i64::from_le_bytes(f.get(..8)?.try_into().ok()?);
                let cpu = i64::from_le_bytes(f.get(8..16)?.try_into().ok()?);
                match self.contexts.get_mut(f.get(16)?) {
                    Some(context) => {
                        context.syncs += 1;
                        context.last_gpu = 0;
                        // A sync soon after the creation or a sync, with
                        // no GPU time between, retakes it: the client
                        // pairs again at once when a call was wide, and
                        // the earlier was in force for no time. (A
                        // second's sync with no zone before it is not a
                        // retake, and stays.)
                        let retake = context
                            .pairings
                            .last()
                            .is_some_and(|&(last, _)| gpu.saturating_sub(last) < RETAKEN_WITHIN);
                        if !context.timed && retake {
                            context.unused.extend(context.pairings.pop());
                        }
                        context.timed = false;
                        context.pairings.push((gpu, cpu));
                    }
                    None => self.faults.push("a sync of no context".into()),
                }
            }
            _ => {}
        }
        Some(size)
    }
}
