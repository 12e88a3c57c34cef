//! Byte-level framing of streamed responses: bytes in, complete events out. Server-Sent
//! Events (OpenAI, Anthropic, TGI, llama.cpp) and newline-delimited JSON (Ollama). No
//! I/O, no clocks, no protocol knowledge; a leaf module.
//!
//! Follows the WHATWG "event stream interpretation": lines end in CRLF, LF or CR (a CRLF
//! split across two reads is still one line end), an empty line dispatches the event,
//! `data:` lines are joined with `\n`, one space after the colon is dropped, lines starting
//! with `:` are comments (keep-alives). Reads do not align with events: one read may hold
//! several events and an event may span many reads, so bytes are buffered until a whole
//! line is there, and only whole lines are decoded as UTF-8 (a multi-byte character split
//! across reads is fine).
//!
//! One deliberate extension: llama.cpp sends mid-stream errors as a non-standard
//! `error: {json}` field, which a spec-compliant parser would drop. We keep it in
//! [`Event::error`] so the protocol layer can fail the run.

use std::fmt;

/// One framed message: an SSE event, or one NDJSON line (in `data`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, if any (Anthropic, OpenAI Responses, error events).
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: String,
    /// llama.cpp's non-standard `error:` field.
    pub error: Option<String>,
}

/// Why the byte stream cannot be framed. Both are protocol violations by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramingError {
    /// A line or event grew past the decoder's cap without ending.
    TooLarge { limit: usize },
    /// A complete line was not valid UTF-8.
    InvalidUtf8,
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::TooLarge { limit } => {
                write!(f, "an SSE event exceeded {limit} bytes without ending")
            }
            FramingError::InvalidUtf8 => f.write_str("the event stream is not valid UTF-8"),
        }
    }
}

impl std::error::Error for FramingError {}

/// The framing a protocol uses.
#[derive(Debug)]
pub enum Decoder {
    Sse(SseDecoder),
    Ndjson(NdjsonDecoder),
}

impl Decoder {
    pub fn sse(max_event_bytes: usize) -> Self {
        Decoder::Sse(SseDecoder::new(max_event_bytes))
    }

    pub fn ndjson(max_line_bytes: usize) -> Self {
        Decoder::Ndjson(NdjsonDecoder::new(max_line_bytes))
    }

    /// Consumes one read's bytes and returns the messages it completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, FramingError> {
        match self {
            Decoder::Sse(d) => d.push(bytes),
            Decoder::Ndjson(d) => d.push(bytes),
        }
    }
}

/// Incremental NDJSON decoder: one message per `\n`-terminated line (a trailing `\r`
/// is dropped, empty lines are skipped). Memory is bounded by `max_line_bytes`.
#[derive(Debug)]
pub struct NdjsonDecoder {
    line: Vec<u8>,
    max_line_bytes: usize,
}

impl NdjsonDecoder {
    pub fn new(max_line_bytes: usize) -> Self {
        NdjsonDecoder {
            line: Vec::new(),
            max_line_bytes,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>, FramingError> {
        let mut out = Vec::new();
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n') {
            self.extend(&bytes[..pos])?;
            bytes = &bytes[pos + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let data = String::from_utf8(line).map_err(|_| FramingError::InvalidUtf8)?;
            out.push(Event {
                data,
                ..Event::default()
            });
        }
        self.extend(bytes)?;
        Ok(out)
    }

    fn extend(&mut self, part: &[u8]) -> Result<(), FramingError> {
        if self.line.len() + part.len() > self.max_line_bytes {
            return Err(FramingError::TooLarge {
                limit: self.max_line_bytes,
            });
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    /// Bytes held for a line that has not ended yet.
    pub fn buffered(&self) -> usize {
        self.line.len()
    }
}

/// Incremental SSE decoder. Feed it each read with [`SseDecoder::push`]; it returns the
/// events that read completed. Memory is bounded by `max_event_bytes`.
#[derive(Debug)]
pub struct SseDecoder {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The previous read ended in CR: a leading LF in the next read belongs to it.
    pending_cr: bool,
    current: Event,
    /// The current event has at least one field (so an empty line dispatches it).
    has_fields: bool,
    has_data: bool,
    event_bytes: usize,
    max_event_bytes: usize,
}

impl SseDecoder {
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            line: Vec::new(),
            pending_cr: false,
            current: Event::default(),
            has_fields: false,
            has_data: false,
            event_bytes: 0,
            max_event_bytes,
        }
    }

    /// Consumes one read's bytes and returns the events it completed, in order.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<Event>, FramingError> {
        let mut out = Vec::new();
        if bytes.is_empty() {
            return Ok(out);
        }
        if self.pending_cr {
            self.pending_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(pos) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&bytes[..pos])?;
            let ending_cr = bytes[pos] == b'\r';
            bytes = &bytes[pos + 1..];
            if ending_cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.process_line(&line)? {
                out.push(event);
            }
        }
        self.extend_line(bytes)?;
        Ok(out)
    }

    fn extend_line(&mut self, part: &[u8]) -> Result<(), FramingError> {
        if self.event_bytes + self.line.len() + part.len() > self.max_event_bytes {
            return Err(FramingError::TooLarge {
                limit: self.max_event_bytes,
            });
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn process_line(&mut self, line: &[u8]) -> Result<Option<Event>, FramingError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        self.event_bytes += line.len() + 1;
        if line[0] == b':' {
            return Ok(None);
        }
        let line = std::str::from_utf8(line).map_err(|_| FramingError::InvalidUtf8)?;
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.current.event = Some(value.to_owned()),
            "error" => self.current.error = Some(value.to_owned()),
            // `id`, `retry` and unknown fields carry nothing a probe needs.
            _ => return Ok(None),
        }
        self.has_fields = true;
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<Event> {
        let had_fields = self.has_fields;
        self.has_fields = false;
        self.has_data = false;
        self.event_bytes = 0;
        let event = std::mem::take(&mut self.current);
        had_fields.then_some(event)
    }

    /// Bytes held for an event that has not ended yet. Non-zero at EOF means the stream
    /// was cut mid-event.
    pub fn buffered(&self) -> usize {
        self.line.len() + self.event_bytes
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn data(s: &str) -> Event {
        Event {
            data: s.to_owned(),
            ..Event::default()
        }
    }

    fn decode_all(chunks: &[&[u8]]) -> Vec<Event> {
        let mut d = SseDecoder::new(1 << 20);
        chunks.iter().flat_map(|c| d.push(c).unwrap()).collect()
    }

    #[test]
    fn one_event_per_blank_line() {
        let ev = decode_all(&[b"data: a\n\ndata: b\n\n"]);
        assert_eq!(ev, vec![data("a"), data("b")]);
    }

    #[test]
    fn event_split_across_reads_at_every_byte() {
        let stream = b"data: {\"x\":1}\n\ndata: [DONE]\n\n";
        for cut in 0..stream.len() {
            let ev = decode_all(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(ev, vec![data("{\"x\":1}"), data("[DONE]")], "cut at {cut}");
        }
    }

    #[test]
    fn event_split_one_byte_per_read() {
        let stream = b"event: ping\ndata: hi\r\n\r\n";
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        let ev = decode_all(&chunks);
        assert_eq!(
            ev,
            vec![Event {
                event: Some("ping".into()),
                data: "hi".into(),
                error: None
            }]
        );
    }

    #[test]
    fn crlf_cr_and_lf_line_endings() {
        assert_eq!(decode_all(&[b"data: a\r\n\r\n"]), vec![data("a")]);
        assert_eq!(decode_all(&[b"data: a\r\r"]), vec![data("a")]);
        assert_eq!(decode_all(&[b"data: a\n\n"]), vec![data("a")]);
    }

    #[test]
    fn crlf_split_between_reads_is_one_line_end() {
        // CR ends the first read; the LF that follows must not count as a blank line.
        let ev = decode_all(&[b"data: a\r", b"\ndata: b\r\n\r\n"]);
        assert_eq!(ev, vec![data("a\nb")]);
    }

    #[test]
    fn several_events_in_one_read_share_the_read() {
        let mut d = SseDecoder::new(1024);
        let ev = d.push(b"data: 1\n\ndata: 2\n\ndata: 3\n\n").unwrap();
        assert_eq!(ev.len(), 3);
    }

    #[test]
    fn comments_and_keepalives_are_skipped() {
        let ev = decode_all(&[b": ping\n\n:keep-alive\n\ndata: x\n\n"]);
        assert_eq!(ev, vec![data("x")]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newline() {
        let ev = decode_all(&[b"data: line one\ndata: line two\n\n"]);
        assert_eq!(ev, vec![data("line one\nline two")]);
    }

    #[test]
    fn space_after_colon_is_optional_and_only_one_is_stripped() {
        assert_eq!(decode_all(&[b"data:x\n\n"]), vec![data("x")]);
        assert_eq!(decode_all(&[b"data:  x\n\n"]), vec![data(" x")]);
        assert_eq!(decode_all(&[b"data\n\n"]), vec![data("")]);
    }

    #[test]
    fn id_retry_and_unknown_fields_are_ignored() {
        let ev = decode_all(&[b"id: 7\nretry: 100\nfoo: bar\ndata: x\n\n"]);
        assert_eq!(ev, vec![data("x")]);
        // An event made only of ignored fields is not dispatched.
        assert!(decode_all(&[b"id: 7\n\n"]).is_empty());
    }

    #[test]
    fn llama_cpp_error_field_is_kept() {
        let ev = decode_all(&[b"error: {\"code\":400,\"message\":\"too long\"}\n\ndata: [DONE]\n\n"]);
        assert_eq!(
            ev[0].error.as_deref(),
            Some("{\"code\":400,\"message\":\"too long\"}")
        );
        assert_eq!(ev[1], data("[DONE]"));
    }

    #[test]
    fn utf8_split_across_reads() {
        let stream = "data: héllo 世界\n\n".as_bytes();
        // Cut inside the multi-byte characters.
        for cut in 7..stream.len() {
            let ev = decode_all(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(ev, vec![data("héllo 世界")]);
        }
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut d = SseDecoder::new(1024);
        assert_eq!(d.push(b"data: \xff\xfe\n\n"), Err(FramingError::InvalidUtf8));
    }

    #[test]
    fn missing_terminator_leaves_bytes_buffered() {
        let mut d = SseDecoder::new(1024);
        assert!(d.push(b"data: partial").unwrap().is_empty());
        assert!(d.buffered() > 0);
        let mut d = SseDecoder::new(1024);
        d.push(b"data: a\n\n").unwrap();
        assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn an_endless_line_is_cut_at_the_cap() {
        let mut d = SseDecoder::new(64);
        let mut result = Ok(vec![]);
        for _ in 0..10 {
            result = d.push(b"data: xxxxxxxxxxxxxxxxxxxx");
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(FramingError::TooLarge { limit: 64 }));
    }

    #[test]
    fn an_endless_event_of_short_lines_is_cut_at_the_cap() {
        let mut d = SseDecoder::new(64);
        let err = (0..20).find_map(|_| d.push(b"data: 0123456789\n").err());
        assert_eq!(err, Some(FramingError::TooLarge { limit: 64 }));
    }

    fn ndjson_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut d = NdjsonDecoder::new(1 << 20);
        chunks
            .iter()
            .flat_map(|c| d.push(c).unwrap())
            .map(|e| e.data)
            .collect()
    }

    #[test]
    fn ndjson_lines_split_anywhere() {
        let stream = b"{\"response\":\"A\",\"done\":false}\n{\"response\":\"\",\"done\":true}\n";
        for cut in 0..stream.len() {
            let lines = ndjson_all(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(lines.len(), 2, "cut at {cut}");
            assert!(lines[1].contains("\"done\":true"));
        }
    }

    #[test]
    fn ndjson_skips_blank_lines_and_drops_cr() {
        let lines = ndjson_all(&[b"{\"a\":1}\r\n\n  \n{\"b\":2}\n"]);
        assert_eq!(lines, ["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn ndjson_without_a_final_newline_keeps_the_line_buffered() {
        let mut d = NdjsonDecoder::new(1024);
        assert!(d.push(b"{\"done\":true}").unwrap().is_empty());
    }

    #[test]
    fn ndjson_line_cap_and_utf8() {
        let mut d = NdjsonDecoder::new(16);
        assert_eq!(
            d.push(b"{\"response\":\"xxxxxxxxxxxxxxxx"),
            Err(FramingError::TooLarge { limit: 16 })
        );
        let mut d = NdjsonDecoder::new(16);
        assert_eq!(d.push(b"\xff\n"), Err(FramingError::InvalidUtf8));
    }

    #[test]
    fn golden_llama_server_chat_stream() {
        let body = transcript_body("llama-server-tiny-chat-stream.txt");
        let ev = decode_all(&[body.as_bytes()]);
        assert_eq!(ev.len(), 19);
        assert_eq!(ev.last().unwrap().data, "[DONE]");
        assert!(ev[1].data.contains("\" is\""));
    }

    /// A small deterministic PRNG (xorshift64*), so the randomized tests below need no
    /// dependency and every failure reproduces from its seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// A stream of SSE/NDJSON-shaped pieces: field names, line ends of every kind
    /// (including a lone CR), comments, multi-byte and invalid UTF-8.
    fn random_stream(rng: &mut Rng) -> Vec<u8> {
        const PIECES: &[&[u8]] = &[
            b"data:",
            b"data: ",
            b"event: ",
            b"error: ",
            b"id: 1",
            b": keep-alive",
            b":",
            b" ",
            b"\n",
            b"\n",
            b"\r",
            b"\r\n",
            b"{\"x\":1}",
            b"[DONE]",
            b"abc",
            "h\u{e9}\u{4e16}".as_bytes(),
            b"\xff",
        ];
        let len = rng.below(40);
        (0..len)
            .flat_map(|_| PIECES[rng.below(PIECES.len())].iter().copied())
            .collect()
    }

    #[derive(Debug, PartialEq)]
    struct Run {
        events: Vec<Event>,
        error: Option<FramingError>,
    }

    fn feed(mut d: Decoder, chunks: &[&[u8]]) -> Run {
        let mut events = Vec::new();
        for chunk in chunks {
            match d.push(chunk) {
                Ok(ev) => events.extend(ev),
                Err(e) => {
                    return Run {
                        events,
                        error: Some(e),
                    };
                }
            }
        }
        Run { events, error: None }
    }

    /// The property the `sse` and `ndjson` fuzz targets check at scale (see
    /// RELIABILITY.md, "Fuzzing"): however a stream is cut into reads (empty reads
    /// included), the decoder returns the same events and the same error as for one read
    /// (a read that fails returns only its error, so with an error the events returned
    /// before it are a prefix of those returned one byte at a time).
    #[test]
    fn same_events_however_the_stream_is_cut_into_reads() {
        let mut rng = Rng(0x5EED_F00D_CAFE_BEEF);
        for case in 0..3000 {
            let stream = random_stream(&mut rng);
            let cap = if rng.below(4) == 0 { rng.below(64) } else { 1 << 16 };
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut rest = &stream[..];
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(rng.below(rest.len().min(12) + 1));
                chunks.push(chunk);
                rest = tail;
            }
            let bytes: Vec<&[u8]> = stream.chunks(1).collect();
            for make in [Decoder::sse, Decoder::ndjson] {
                let whole = feed(make(cap), &[&stream]);
                let pieces = feed(make(cap), &chunks);
                let bytewise = feed(make(cap), &bytes);
                let shown = String::from_utf8_lossy(&stream);
                if whole.error.is_none() {
                    assert_eq!(pieces, whole, "case {case}, cap {cap}: {shown:?} cut {chunks:?}");
                    assert_eq!(bytewise, whole, "case {case}, cap {cap}: {shown:?} byte-wise");
                } else {
                    assert_eq!(pieces.error, whole.error, "case {case}, cap {cap}: {shown:?}");
                    assert_eq!(bytewise.error, whole.error, "case {case}, cap {cap}: {shown:?}");
                    assert!(
                        bytewise.events.starts_with(&pieces.events),
                        "case {case}: {shown:?}"
                    );
                }
            }
        }
    }

    /// The response body of a capture in tests/transcripts (copied from the real-server
    /// captures in ../shared/reference/transcripts): the lines after
    /// the last `<<<` header line, up to the client-side timing note.
    pub(crate) fn transcript_body(name: &str) -> String {
        let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let start = text.rfind("<<<\n").expect("response header block") + 4;
        let end = text.find("\n### client-side").unwrap_or(text.len());
        text[start..end].to_owned()
    }
}
