//! Right, not only fast (issue 28): canaries, a prompt's own checks, structured output and
//! tool calls. The simulator answering right passes every check of every kind that has
//! them (a failure there is a false failure); golden streams per kind, with tool-call
//! fragments split across events as servers send them, fail with the right class.

use inferprobe::outcome::FailureReason;
use inferprobe::simulate::Script;

use std::sync::{Arc, Mutex};

use crate::support::{BodyEnd, answering_server, build_probe, chunked_reply, reply, run_probe, simulator};

/// The kinds whose protocol has tools, and where each is served.
const TOOL_KINDS: [(&str, &str); 4] = [
    ("openai_chat", "/v1/chat/completions"),
    ("openai_responses", "/v1/responses"),
    ("anthropic", "/v1/messages"),
    ("ollama", "/api/chat"),
];

fn quick() -> Script {
    Script {
        ttft: std::time::Duration::from_millis(5),
        token_gap: std::time::Duration::from_millis(1),
        ..Script::default()
    }
}

const WEATHER: &str = "tools:\n  - name: get_weather\n    description: The weather in a city\n    parameters: {type: object, properties: {city: {type: string}, days: {type: integer, minimum: 1}}, required: [city]}\ntool_call: get_weather\n";

/// Every canary, twice round, on every kind that chats: all pass against answers that are
/// right. This is the false-failure measurement of the built-in set on the simulator.
#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_answering_right_passes_every_canary_on_every_chat_kind() {
    let sim = simulator(quick()).await;
    let mut runs = 0;
    for (kind, path) in TOOL_KINDS {
        let probe = build_probe(&format!(
            "name: c\nkind: {kind}\nurl: http://{}{path}\nmodel: m\nprompts: {{builtin: [canary]}}\n",
            sim.addr
        ));
        for _ in 0..10 {
            let o = probe.run_once().await;
            assert!(o.observation.success(), "{kind}: {:?}", o.observation.result);
            assert_eq!(o.observation.finish_reason.as_deref(), Some("stop"), "{kind}");
            runs += 1;
        }
    }
    println!("{runs} canary runs against right answers: 0 failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_simulator_calls_the_declared_tool_right_on_every_kind() {
    let sim = simulator(quick()).await;
    for (kind, path) in TOOL_KINDS {
        let o = run_probe(&format!(
            "name: t\nkind: {kind}\nurl: http://{}{path}\nmodel: m\nprompts: [\"What is the weather in Paris? Use the tool.\"]\n{WEATHER}",
            sim.addr
        ))
        .await;
        assert!(o.observation.success(), "{kind}: {:?}", o.observation.result);
        assert!(
            o.observation.ttft().is_some(),
            "{kind}: a tool call is output a user sees"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn structured_output_and_a_prompts_own_checks_pass_on_right_answers() {
    let sim = simulator(quick()).await;
    let schema = "{type: object, properties: {city: {type: string}, population: {type: integer, minimum: 1}}, required: [city, population], additionalProperties: false}";
    for (kind, path) in [TOOL_KINDS[0], TOOL_KINDS[1]] {
        let o = run_probe(&format!(
            "name: s\nkind: {kind}\nurl: http://{}{path}\nmodel: m\nprompts: [\"A city and its population, as JSON.\"]\nresponse_format: {{type: json_schema, json_schema: {{name: city, schema: {schema}}}}}\n",
            sim.addr
        ))
        .await;
        assert!(o.observation.success(), "{kind}: {:?}", o.observation.result);
    }
    let o = run_probe(&format!(
        "name: own\nkind: anthropic\nurl: http://{}/v1/messages\nmodel: m\nprompts:\n  - prompt: \"What is 17 + 25? Reply with the number only.\"\n    expect: {{matches: '^\\s*42\\b', stops: true}}\n",
        sim.addr
    ))
    .await;
    assert!(o.observation.success(), "{:?}", o.observation.result);
}

/// A wrong answer to a prompt's own check is `wrong_answer`, naming prompt, expectation and
/// answer; the simulator's ordinary words are the wrong answer here.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_answer_is_wrong_answer_and_says_what_came() {
    let sim = simulator(quick()).await;
    let o = run_probe(&format!(
        "name: own\nkind: openai_chat\nurl: http://{}/v1/chat/completions\nmodel: m\nprompts:\n  - prompt: \"What is 2 + 2? Reply with the number only.\"\n    expect: {{matches: '\\b4\\b'}}\n",
        sim.addr
    ))
    .await;
    let f = o.observation.failure().unwrap();
    assert_eq!(f.reason, FailureReason::WrongAnswer);
    assert!(f.message.contains("/\\b4\\b/"), "{}", f.message);
    assert!(f.message.contains("What is 2 + 2?"), "{}", f.message);
    assert!(f.message.contains("The answer depends"), "{}", f.message);
    // An answer that keeps going, with `stops`: degenerate_output.
    let o = run_probe(&format!(
        "name: own\nkind: openai_chat\nurl: http://{}/v1/chat/completions\nmodel: m\nexpect: {{stops: true}}\n",
        sim.addr
    ))
    .await;
    assert_eq!(
        o.observation.failure().unwrap().reason,
        FailureReason::DegenerateOutput
    );
}

/// One tool call in a kind's own events: the name first, the arguments in `pieces` (each
/// in an event of its own, as servers stream them), then the end of the answer.
fn tool_call_events(kind: &str, name: &str, pieces: &[&str]) -> Vec<String> {
    let sse = |event: &str, data: serde_json::Value| format!("event: {event}\ndata: {data}\n\n");
    let data = |data: serde_json::Value| format!("data: {data}\n\n");
    let whole: String = pieces.concat();
    match kind {
        "openai_chat" => {
            let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
                data(
                    serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
                )
            };
            let mut out = vec![
                chunk(
                    serde_json::json!({"role": "assistant", "content": null}),
                    serde_json::Value::Null,
                ),
                chunk(
                    serde_json::json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": name, "arguments": ""}}]}),
                    serde_json::Value::Null,
                ),
            ];
            for p in pieces {
                out.push(chunk(
                    serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
                    serde_json::Value::Null,
                ));
            }
            out.push(chunk(serde_json::json!({}), "tool_calls".into()));
            out.push("data: [DONE]\n\n".into());
            out
        }
        "openai_responses" => {
            let item = |arguments: &str| serde_json::json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": name, "arguments": arguments});
            let mut out = vec![
                sse(
                    "response.created",
                    serde_json::json!({"type": "response.created", "response": {"id": "r1", "model": "m"}}),
                ),
                sse(
                    "response.output_item.added",
                    serde_json::json!({"type": "response.output_item.added", "output_index": 0, "item": item("")}),
                ),
            ];
            for p in pieces {
                out.push(sse(
                    "response.function_call_arguments.delta",
                    serde_json::json!({"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": "fc_1", "delta": p}),
                ));
            }
            out.push(sse(
                "response.function_call_arguments.done",
                serde_json::json!({"type": "response.function_call_arguments.done", "output_index": 0, "item_id": "fc_1", "arguments": whole}),
            ));
            out.push(sse(
                "response.output_item.done",
                serde_json::json!({"type": "response.output_item.done", "output_index": 0, "item": item(&whole)}),
            ));
            out.push(sse(
                "response.completed",
                serde_json::json!({"type": "response.completed", "response": {"id": "r1", "status": "completed", "usage": {"input_tokens": 20, "output_tokens": 9}}}),
            ));
            out
        }
        "anthropic" => {
            let mut out = vec![
                sse(
                    "message_start",
                    serde_json::json!({"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 20, "output_tokens": 1}}}),
                ),
                sse(
                    "content_block_start",
                    serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}}),
                ),
            ];
            for p in pieces {
                out.push(sse(
                    "content_block_delta",
                    serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": p}}),
                ));
            }
            out.push(sse(
                "content_block_stop",
                serde_json::json!({"type": "content_block_stop", "index": 0}),
            ));
            out.push(sse(
                "message_delta",
                serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            ));
            out.push(sse("message_stop", serde_json::json!({"type": "message_stop"})));
            out
        }
        "ollama" => {
            // Ollama sends each call whole, its arguments an object (text that is not JSON
            // cannot be an object, so it is sent as the text it is).
            let arguments: serde_json::Value =
                serde_json::from_str(&whole).unwrap_or(serde_json::Value::String(whole.clone()));
            vec![
                format!(
                    "{}\n",
                    serde_json::json!({"model": "m", "message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}, "done": false})
                ),
                format!(
                    "{}\n",
                    serde_json::json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop", "eval_count": 9})
                ),
            ]
        }
        other => panic!("{other} has no tools"),
    }
}

async fn run_events(kind: &str, path: &str, events: &[String]) -> inferprobe::outcome::Outcome {
    let content_type = if kind == "ollama" {
        "application/x-ndjson"
    } else {
        "text/event-stream"
    };
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let reply = chunked_reply(content_type, &parts, BodyEnd::LastChunk);
    let addr = answering_server(move |_| reply.clone());
    run_probe(&format!(
        "name: t\nkind: {kind}\nurl: http://{addr}{path}\nmodel: m\ntimeout: 2s\nprompts: [\"What is the weather in Paris?\"]\n{WEATHER}"
    ))
    .await
}

/// Golden streams of each kind: arguments split across events are put back together;
/// every failure class is told apart, the message saying which and where.
#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_split_across_events_and_every_failure_class_per_kind() {
    let cases: [(&str, &[&str], Option<&str>); 5] = [
        (
            "get_weather",
            &["{\"ci", "ty\": \"Pa", "ris\", \"days\": 2}"],
            None,
        ),
        (
            "get_wether",
            &["{\"city\": \"Paris\"}"],
            Some("\"get_wether\", which is not declared"),
        ),
        ("get_weather", &["{\"city\": ", "Paris}"], Some("are not JSON")),
        (
            "get_weather",
            &["{\"city\": \"Paris\", ", "\"days\": 0}"],
            Some("break its parameters schema at /days"),
        ),
        (
            "get_weather",
            &["{\"town\": \"Paris\"}"],
            Some("break its parameters schema at the top level"),
        ),
    ];
    for (kind, path) in TOOL_KINDS {
        for (name, pieces, failure) in cases {
            let o = run_events(kind, path, &tool_call_events(kind, name, pieces)).await;
            match failure {
                None => assert!(
                    o.observation.success(),
                    "{kind} {pieces:?}: {:?}",
                    o.observation.result
                ),
                Some(words) => {
                    let f = o
                        .observation
                        .failure()
                        .unwrap_or_else(|| panic!("{kind} {pieces:?} passed"));
                    assert_eq!(f.reason, FailureReason::InvalidToolCall, "{kind}: {}", f.message);
                    assert!(f.message.contains(words), "{kind}: {words} not in {}", f.message);
                }
            }
        }
    }
}

/// No call at all (the model answered in words), per kind: `invalid_tool_call`, with the
/// words.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_in_words_instead_of_a_call_is_an_invalid_tool_call() {
    for (kind, path) in TOOL_KINDS {
        let o = run_events(kind, path, &text_events(kind, "It is sunny.")).await;
        let f = o.observation.failure().unwrap_or_else(|| panic!("{kind} passed"));
        assert_eq!(f.reason, FailureReason::InvalidToolCall, "{kind}");
        assert!(
            f.message.contains("no tool was called (declared: get_weather)"),
            "{kind}: {}",
            f.message
        );
        assert!(f.message.contains("It is sunny."), "{kind}: {}", f.message);
    }
}

/// An answer in words, in a kind's own events, ending as a finished answer does.
fn text_events(kind: &str, text: &str) -> Vec<String> {
    use serde_json::json;
    let sse = |event: &str, data: serde_json::Value| format!("event: {event}\ndata: {data}\n\n");
    let data = |data: serde_json::Value| format!("data: {data}\n\n");
    match kind {
        "openai_chat" => vec![
            data(
                json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]}),
            ),
            data(
                json!({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            ),
            "data: [DONE]\n\n".to_owned(),
        ],
        "openai_responses" => vec![
            sse(
                "response.created",
                json!({"type": "response.created", "response": {"id": "r1", "model": "m"}}),
            ),
            sse(
                "response.output_text.delta",
                json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": text}),
            ),
            sse(
                "response.completed",
                json!({"type": "response.completed", "response": {"id": "r1", "status": "completed", "usage": {"input_tokens": 20, "output_tokens": 4}}}),
            ),
        ],
        "anthropic" => vec![
            sse(
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "model": "m", "usage": {"input_tokens": 20, "output_tokens": 1}}}),
            ),
            sse(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            sse(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
            ),
            sse(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            sse(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            ),
            sse("message_stop", json!({"type": "message_stop"})),
        ],
        "ollama" => vec![
            format!(
                "{}\n",
                json!({"model": "m", "message": {"role": "assistant", "content": text}, "done": false})
            ),
            format!(
                "{}\n",
                json!({"model": "m", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop", "eval_count": 4})
            ),
        ],
        other => panic!("{other} has no tools"),
    }
}

/// What each kind sends: a checked prompt at temperature 0, the tools in the protocol's own
/// shape, the answer's format where asked.
#[tokio::test(flavor = "multi_thread")]
async fn checked_prompts_go_at_temperature_zero_with_tools_in_each_kinds_shape() {
    let shapes: [(&str, &str, &str, &str); 4] = [
        (
            "openai_chat",
            "/v1/chat/completions",
            "/temperature",
            "/tools/0/function/parameters/required/0",
        ),
        (
            "openai_responses",
            "/v1/responses",
            "/temperature",
            "/tools/0/parameters/required/0",
        ),
        (
            "anthropic",
            "/v1/messages",
            "/temperature",
            "/tools/0/input_schema/required/0",
        ),
        (
            "ollama",
            "/api/chat",
            "/options/temperature",
            "/tools/0/function/parameters/required/0",
        ),
    ];
    for (kind, path, temperature, required) in shapes {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let addr = answering_server(move |r| {
            s.lock().unwrap().push(r.body.clone());
            reply(500, "{}")
        });
        run_probe(&format!(
            "name: t\nkind: {kind}\nurl: http://{addr}{path}\nmodel: m\nprompts: [\"The weather in Oslo?\"]\n{WEATHER}"
        ))
        .await;
        let body: serde_json::Value = serde_json::from_slice(&seen.lock().unwrap()[0]).unwrap();
        assert_eq!(
            body.pointer(temperature),
            Some(&serde_json::json!(0.0)),
            "{kind}: {body}"
        );
        assert_eq!(
            body.pointer(required),
            Some(&serde_json::json!("city")),
            "{kind}: {body}"
        );
    }
    // A schema asked for: the format in the protocol's place, at temperature 0; an
    // ordinary prompt keeps the server's temperature.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let addr = answering_server(move |r| {
        s.lock().unwrap().push(r.body.clone());
        reply(500, "{}")
    });
    let schema = "{type: object, properties: {city: {type: string}}}";
    run_probe(&format!(
        "name: t\nkind: openai_responses\nurl: http://{addr}/v1/responses\nmodel: m\nresponse_format: {{type: json_schema, json_schema: {{name: city, schema: {schema}}}}}\n"
    ))
    .await;
    run_probe(&format!(
        "name: t\nkind: openai_responses\nurl: http://{addr}/v1/responses\nmodel: m\n"
    ))
    .await;
    // A canary at 0 unless the probe says: `server` sends none, a number is sent as is.
    for (key, sent) in [
        ("", Some(0.0)),
        ("temperature: server\n", None),
        ("temperature: 0.7\n", Some(0.7)),
    ] {
        let before = seen.lock().unwrap().len();
        run_probe(&format!(
            "name: t\nkind: openai_responses\nurl: http://{addr}/v1/responses\nmodel: m\nprompts: {{builtin: [canary]}}\n{key}"
        ))
        .await;
        let body: serde_json::Value = serde_json::from_slice(&seen.lock().unwrap()[before]).unwrap();
        let got = body.get("temperature").and_then(|t| t.as_f64());
        assert_eq!(got.map(|t| (t * 10.0).round() / 10.0), sent, "{key}: {body}");
    }
    let ordinary: serde_json::Value = serde_json::from_slice(&seen.lock().unwrap()[1]).unwrap();
    assert!(ordinary.get("temperature").is_none(), "{ordinary}");
    let body: serde_json::Value = serde_json::from_slice(&seen.lock().unwrap()[0]).unwrap();
    assert_eq!(body.get("temperature"), Some(&serde_json::json!(0.0)), "{body}");
    assert_eq!(
        body.pointer("/text/format/type"),
        Some(&serde_json::json!("json_schema")),
        "{body}"
    );
    assert_eq!(
        body.pointer("/text/format/schema/properties/city/type"),
        Some(&serde_json::json!("string"))
    );
}

/// The next turn: with `tool_result`, the call is answered with the tool's result and the
/// final answer is the one judged. Against the simulator (answering right) every kind
/// passes, the whole exchange timed as the run's total.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_turn_sends_the_result_back_and_judges_the_final_answer() {
    let sim = simulator(quick()).await;
    for (kind, path) in TOOL_KINDS {
        let o = run_probe(&format!(
            "name: t\nkind: {kind}\nurl: http://{}{path}\nmodel: m\nprompts: [\"What is the weather in Paris?\"]\n{WEATHER}tool_result: {{temperature_c: 18, sky: clear}}\nexpect: {{contains: '\"temperature_c\":18'}}\n",
            sim.addr
        ))
        .await;
        let obs = &o.observation;
        assert!(obs.success(), "{kind}: {:?}", obs.result);
        let note = obs.note.as_deref().unwrap_or_default();
        assert!(note.contains("the next turn answered"), "{kind}: {note}");
        // Two requests, the second one carrying the result; total covers both.
        assert!(obs.total().unwrap() > obs.ttft().unwrap(), "{kind}");
    }
    let bodies: Vec<String> = sim.log.records().iter().map(|r| r.path.clone()).collect();
    assert_eq!(bodies.len(), 2 * TOOL_KINDS.len(), "{bodies:?}");
}

/// What a broken template does on the next turn: a 400 (the history does not render), or
/// an empty answer. Each fails with its reason, the message saying it was the next turn.
#[tokio::test(flavor = "multi_thread")]
async fn a_next_turn_that_breaks_fails_and_says_so() {
    let call = tool_call_events("openai_chat", "get_weather", &["{\"city\": \"Paris\"}"]);
    let empty = [
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    ];
    let second_replies = [
        (
            reply(
                400,
                "{\"error\": {\"message\": \"Jinja template error: unknown role tool\", \"type\": \"invalid_request_error\"}}",
            ),
            FailureReason::Http4xx,
            "template error",
        ),
        (
            chunked_reply("text/event-stream", &empty, BodyEnd::LastChunk),
            FailureReason::EmptyOutput,
            "no generated output",
        ),
    ];
    for (second, reason, words) in second_replies {
        let parts: Vec<&str> = call.iter().map(String::as_str).collect();
        let first = chunked_reply("text/event-stream", &parts, BodyEnd::LastChunk);
        let addr = answering_server(move |r| {
            let body = String::from_utf8_lossy(&r.body);
            if body.contains("\"role\":\"tool\"") {
                second.clone()
            } else {
                first.clone()
            }
        });
        let o = run_probe(&format!(
            "name: t\nkind: openai_chat\nurl: http://{addr}/v1/chat/completions\nmodel: m\ntimeout: 2s\nprompts: [\"What is the weather in Paris?\"]\n{WEATHER}tool_result: '{{\"temperature_c\": 18}}'\n"
        ))
        .await;
        let f = o.observation.failure().unwrap();
        assert_eq!(f.reason, reason, "{}", f.message);
        assert!(
            f.message
                .starts_with("the next turn (the tool's result sent back): "),
            "{}",
            f.message
        );
        assert!(f.message.contains(words), "{}", f.message);
    }
}
