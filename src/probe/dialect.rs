//! The [`Dialect`] trait: what one streaming protocol looks like when the simulator plays
//! its server. Each streaming kind implements it in its own file, in the section "The
//! simulator's side of this protocol.", next to the parser that reads the same messages;
//! `inferprobe simulate` (src/simulate/) finds them through `Kind::dialects` and adds the
//! timing and the faults. Defined here, with the probes, so that the prober never imports
//! the simulator.
//!
//! Imports nothing of the crate.

use std::time::Duration;

/// One streaming protocol, as the simulator writes it. Messages come back already framed
/// (by [`Reply::frame`]): the stream code puts each in its own HTTP chunk.
pub trait Dialect: Sync {
    /// The path it is served on (POST).
    fn route(&self) -> &'static str;

    /// Messages are JSON lines (`application/x-ndjson`), not server-sent events.
    fn ndjson(&self) -> bool {
        false
    }

    /// The JSON pointer of the request's output cap (a top-level `max_completion_tokens`
    /// is read for every dialect when this one is absent).
    fn max_tokens_at(&self) -> &'static str;

    /// What comes before any token (a role chunk, the protocol's opening events).
    fn preamble(&self, _reply: &Reply) -> Vec<String> {
        Vec::new()
    }

    /// Token `i` of `n` (`u32::MAX` for a stream that never ends).
    fn token(&self, reply: &Reply, i: u32, n: u32, word: &str) -> String;

    /// Everything after the last of `n` tokens, terminator included. `elapsed` since the
    /// request, for protocols where the server reports its own durations.
    fn finish(&self, reply: &Reply, n: u32, elapsed: Duration) -> Vec<String>;

    /// An error after the stream started, in this protocol's own shape.
    fn in_band_error(&self, reply: &Reply) -> Vec<String>;

    /// A message that is not valid JSON, in this protocol's framing.
    fn garbage(&self) -> String {
        if self.ndjson() {
            "{\"message\": garbage\n".to_owned()
        } else {
            "data: {\"choices\": [{\"delta\": garbage\n\n".to_owned()
        }
    }

    /// One tool call, its arguments' JSON text in `pieces`, in this protocol's messages
    /// (protocols without tools write nothing: the reply is text).
    fn tool_call(&self, _reply: &Reply, _name: &str, _pieces: &[String]) -> Vec<String> {
        Vec::new()
    }

    /// The end of a stream that generated nothing.
    fn empty_end(&self, reply: &Reply) -> Vec<String> {
        self.finish(reply, 0, Duration::ZERO)
    }
}

/// One request's reply: the facts its messages carry, and their framing.
pub struct Reply<'a> {
    /// `sim-N`, N counting requests from 0.
    pub id: String,
    /// The request's `model`, `sim-model` without one.
    pub model: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// The request asked for a usage message (OpenAI's `stream_options.include_usage`).
    pub include_usage: bool,
    /// The dialect's [`Dialect::ndjson`].
    pub(crate) ndjson: bool,
    /// Why the generation ends, as the finish messages say.
    pub stop: Stop,
    /// The time the server spent loading the model for this request (zero when it was
    /// loaded already), for protocols that report it (Ollama's `load_duration`).
    pub load: Duration,
}

/// Why a simulated generation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// At the request's output cap (or the script's token count).
    Limit,
    /// The answer was complete: the model's end of sequence.
    EndOfAnswer,
    /// After a tool call.
    ToolCall,
}

impl Stop {
    /// OpenAI's and Ollama's finish reason.
    pub fn openai(self) -> &'static str {
        match self {
            Stop::Limit => "length",
            Stop::EndOfAnswer => "stop",
            Stop::ToolCall => "tool_calls",
        }
    }
}

impl Reply<'_> {
    /// One message: `data` as a JSON line, or as an SSE event (named `event`, if given).
    pub fn frame(&self, event: Option<&str>, data: &serde_json::Value) -> String {
        if self.ndjson {
            return format!("{data}\n");
        }
        match event {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }
}
