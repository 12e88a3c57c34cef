//! Shared by the `sse` and `ndjson` targets: turn the fuzzer's bytes into a decoder cap,
//! a list of read sizes and a stream, then check the decoder's invariants.
//!
//! Input layout: byte 0 picks the cap (0..=127 bytes, so the size limit is hit often, or
//! 64 KiB when its high bit is set), byte 1 says how many of the next bytes are read
//! sizes (0..=15 of them, each 0..=64; 0 is an empty read), the rest is the stream.

use inferprobe::fuzzing::{Decoder, Event, FramingError};

pub struct Input<'a> {
    pub cap: usize,
    pub sizes: Vec<usize>,
    pub stream: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn split(data: &'a [u8]) -> Option<Self> {
        let (&cap, rest) = data.split_first()?;
        let (&n, rest) = rest.split_first()?;
        let n = (n as usize % 16).min(rest.len());
        let (sizes, stream) = rest.split_at(n);
        Some(Input {
            cap: if cap & 0x80 != 0 { 64 * 1024 } else { cap as usize },
            sizes: sizes.iter().map(|&b| b as usize % 65).collect(),
            stream,
        })
    }

    /// The stream cut into reads of the chosen sizes, in turn; no sizes means one read.
    pub fn chunks(&self) -> Vec<&'a [u8]> {
        if self.sizes.iter().all(|&s| s == 0) {
            // Empty reads only: still exercise them, around one read of everything.
            let mut out = vec![&self.stream[..0]; self.sizes.len()];
            out.push(self.stream);
            return out;
        }
        let mut out = Vec::new();
        let mut rest = self.stream;
        for &size in self.sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at(size.min(rest.len()));
            out.push(chunk);
            rest = tail;
        }
        out
    }
}

/// What feeding a stream produced: the events returned before any error, the error, and
/// the bytes still buffered at the end (when there was no error).
#[derive(Debug, PartialEq)]
struct Run {
    events: Vec<Event>,
    error: Option<FramingError>,
    buffered: usize,
}

fn buffered(d: &Decoder) -> usize {
    match d {
        Decoder::Sse(d) => d.buffered(),
        Decoder::Ndjson(d) => d.buffered(),
    }
}

fn feed(make: &dyn Fn(usize) -> Decoder, cap: usize, chunks: &[&[u8]]) -> Run {
    let mut d = make(cap);
    let mut run = Run {
        events: Vec::new(),
        error: None,
        buffered: 0,
    };
    for chunk in chunks {
        match d.push(chunk) {
            Ok(events) => run.events.extend(events),
            Err(e) => {
                run.error = Some(e);
                return run;
            }
        }
        let held = buffered(&d);
        // The cap bounds memory: never more than the cap plus the read just taken (the
        // brief's bound), and in fact at most the cap plus one counted line end.
        assert!(
            held <= cap + chunk.len(),
            "held {held} > cap {cap} + read {}",
            chunk.len()
        );
        assert!(held <= cap + 1, "held {held} > cap {cap} + 1");
    }
    run.buffered = buffered(&d);
    run
}

/// No panic, bounded buffering, and the same events however the stream is cut into reads.
pub fn check(make: &dyn Fn(usize) -> Decoder, data: &[u8]) {
    let Some(input) = Input::split(data) else { return };
    let whole = feed(make, input.cap, &[input.stream]);
    let pieces = feed(make, input.cap, &input.chunks());
    let bytes: Vec<&[u8]> = input.stream.chunks(1).collect();
    let bytewise = feed(make, input.cap, &bytes);
    match &whole.error {
        None => {
            assert_eq!(pieces, whole, "cut into reads vs. one read");
            assert_eq!(bytewise, whole, "one byte per read vs. one read");
        }
        Some(e) => {
            // The same error, found at the same place. A read that completes events and
            // then fails returns only the error, so the events returned before the error
            // depend on the cut: those of a coarser cut are a prefix of the byte-wise ones.
            assert_eq!(pieces.error.as_ref(), Some(e), "cut into reads: another error");
            assert_eq!(
                bytewise.error.as_ref(),
                Some(e),
                "one byte per read: another error"
            );
            assert!(whole.events.is_empty());
            assert!(
                bytewise.events.starts_with(&pieces.events),
                "cut into reads: events not a prefix of the byte-wise ones"
            );
        }
    }
}
