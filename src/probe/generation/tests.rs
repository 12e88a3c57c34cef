//! The streaming driver's own checks: finish reasons, the model echo, token counts.

use super::*;

#[test]
fn model_echo() {
    let expect = Expect {
        model: true,
        ..Expect::default()
    };
    assert!(check_model(&expect, "m", Some("m")).is_ok());
    assert!(
        check_model(&expect, "m", Some("other"))
            .unwrap_err()
            .message
            .contains("\"other\"")
    );
    assert!(check_model(&expect, "m", None).is_err());
    assert!(check_model(&Expect::default(), "m", None).is_ok());
}

fn streamed(finish: Option<&str>, refused: bool) -> Streamed {
    Streamed {
        content_events: 3,
        finish_reason: finish.map(str::to_owned),
        refused,
        ..Streamed::default()
    }
}

const DONE_AND_FINISH: Protocol = Protocol {
    framing: Framing::Sse,
    terminator: "data: [DONE]",
    finish: Some("a finish_reason"),
};

const TERMINATOR_ONLY: Protocol = Protocol {
    framing: Framing::Ndjson,
    terminator: "the final line",
    finish: None,
};

#[test]
fn a_terminator_without_its_finish_signal_is_truncated() {
    let f = check_complete(&DONE_AND_FINISH, &streamed(None, false), Ok(())).unwrap_err();
    assert_eq!(f.reason, FailureReason::Truncated);
    assert_eq!(
        f.message,
        "data: [DONE] came without a finish_reason: the answer was cut short after 3 content events"
    );
    // Where the terminator is the finish signal, its reason is optional (Ollama's
    // done_reason "where sent").
    assert!(check_complete(&TERMINATOR_ONLY, &streamed(None, false), Ok(())).is_ok());
    assert!(check_complete(&DONE_AND_FINISH, &streamed(Some("length"), false), Ok(())).is_ok());
}

#[test]
fn a_body_that_breaks_after_the_terminator_is_truncated() {
    let cut = Err(BodyError::Broken(
        "error reading a body from connection: end of file before message length reached".into(),
    ));
    let f = check_complete(&DONE_AND_FINISH, &streamed(Some("stop"), false), cut).unwrap_err();
    assert_eq!(f.reason, FailureReason::Truncated);
    assert!(
        f.message
            .starts_with("the HTTP body broke after data: [DONE] instead of ending: error reading"),
        "{}",
        f.message
    );
    // Bytes past the cap after the terminator do not undo a complete answer.
    let big = Err(BodyError::TooLarge { limit: 10 });
    assert!(check_complete(&TERMINATOR_ONLY, &streamed(Some("stop"), false), big).is_ok());
}

#[test]
fn finish_reasons_without_an_answer_fail_with_the_reason() {
    for (finish, reason) in [
        ("content_filter", FailureReason::StreamError),
        ("refusal", FailureReason::StreamError),
        ("error", FailureReason::StreamError),
        ("abort", FailureReason::Truncated),
        ("incomplete", FailureReason::Truncated),
    ] {
        let f = check_complete(&TERMINATOR_ONLY, &streamed(Some(finish), false), Ok(())).unwrap_err();
        assert_eq!(f.reason, reason, "{finish}");
        assert!(
            f.message.contains(&format!("finish reason {finish}")),
            "{}",
            f.message
        );
    }
    for finish in ["stop", "length", "tool_calls", "load"] {
        assert!(
            check_complete(&TERMINATOR_ONLY, &streamed(Some(finish), false), Ok(())).is_ok(),
            "{finish}"
        );
    }
    let f = check_complete(&DONE_AND_FINISH, &streamed(Some("stop"), true), Ok(())).unwrap_err();
    assert_eq!(f.reason, FailureReason::StreamError);
    assert!(f.message.contains("a refusal"), "{}", f.message);
}

#[test]
fn every_protocols_finish_names_map_to_one_vocabulary() {
    for (raw, want) in [
        ("stop", "stop"),
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("eos_token", "stop"),
        ("length", "length"),
        ("max_tokens", "length"),
        ("max_output_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
        ("pause_turn", "pause_turn"),
    ] {
        assert_eq!(normalize_finish_reason(raw).as_deref(), Some(want), "{raw}");
    }
    // Not a finish reason, or not one to show as sent.
    assert_eq!(normalize_finish_reason(""), None);
    assert_eq!(normalize_finish_reason("  "), None);
    for hostile in ["\u{1b}[2Jstop", "stop\r\nFAKE", &"x".repeat(33), "<b>"] {
        assert_eq!(
            normalize_finish_reason(hostile).as_deref(),
            Some("other"),
            "{hostile:?}"
        );
    }
}

#[test]
fn expected_finish_reasons() {
    let expect = Expect {
        finish_reason: vec!["stop".into()],
        ..Expect::default()
    };
    assert!(check_finish_reason(&expect, Some("stop")).is_ok());
    let f = check_finish_reason(&expect, Some("length")).unwrap_err();
    assert_eq!(f.reason, FailureReason::Assertion);
    assert_eq!(f.message, "expected finish reason stop, got length");
    assert!(
        check_finish_reason(&expect, None)
            .unwrap_err()
            .message
            .ends_with("got none")
    );
    assert!(check_finish_reason(&Expect::default(), None).is_ok());
}

#[test]
fn a_large_gap_between_usage_and_events_is_noted() {
    // llama.cpp's byte tokens: a few tokens with no event of their own.
    assert_eq!(token_gap_note(16, 13), None);
    assert_eq!(token_gap_note(7, 7), None);
    // A proxy coalescing chunks, or a usage count that is wrong.
    assert_eq!(
        token_gap_note(64, 8).as_deref(),
        Some("usage reports 64 output tokens but 8 content events arrived; the usage count is used")
    );
    assert!(token_gap_note(1, 16).is_some());
}
