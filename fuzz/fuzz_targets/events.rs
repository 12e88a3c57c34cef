//! The per-protocol event parsers (OpenAI chat/completions/Responses, Anthropic, Ollama,
//! TGI) and the kserve_v2 response check: the input is framed as SSE and as NDJSON, and
//! every event produced goes to every parser; the raw input also goes in as one event's
//! data (so JSON reaches the parsers without framing syntax) and as a kserve_v2 body.
//! Checks: no panic, and every failure says something.
#![no_main]

use inferprobe::config::Expect;
use inferprobe::fuzzing::{
    Decoder, Event, Parser, kserve_check_response, kserve_grpc_check_response, parse_event,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut events = Vec::new();
    for mut d in [Decoder::sse(1 << 20), Decoder::ndjson(1 << 20)] {
        if let Ok(ev) = d.push(data) {
            events.extend(ev);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        events.push(Event {
            data: text.to_owned(),
            ..Event::default()
        });
        events.push(Event {
            error: Some(text.to_owned()),
            ..Event::default()
        });
    }
    for event in &events {
        for parser in Parser::ALL {
            if let Err(f) = parse_event(parser, event) {
                assert!(!f.message.is_empty(), "{parser:?}: a failure with no message");
            }
        }
    }
    let expects = [
        Expect::default(),
        Expect {
            outputs: vec!["output0".into()],
            output_shape: Some(vec![1, 3]),
            top_label: Some("1".into()),
            ..Expect::default()
        },
        Expect {
            top_label: Some("cat".into()),
            ..Expect::default()
        },
    ];
    for expect in &expects {
        if let Err(f) = kserve_check_response(data, expect) {
            assert!(!f.message.is_empty(), "kserve_v2: a failure with no message");
        }
        if let Err(f) = kserve_grpc_check_response(data, expect) {
            assert!(!f.message.is_empty(), "kserve_v2_grpc: a failure with no message");
        }
    }
});
