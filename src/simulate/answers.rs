//! The non-streaming answers: an Open Inference Protocol inference (`/v2/models/{m}/infer`)
//! and a TorchServe-style prediction for an uploaded image (`/predictions/{m}`), with the
//! stream's faults where they make sense.

use std::sync::atomic::Ordering;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::http1::{self, Request, wait_for_peer_close, write_json};
use super::{Fault, Shared, SimRecord, draw_fault, script_for};

/// The non-streaming answers: an Open Inference Protocol inference, or a TorchServe-style
/// prediction for an uploaded image.
#[derive(Debug, Clone, Copy)]
pub(super) enum Answer {
    Infer,
    Prediction,
}

/// One JSON answer after `ttft` (the processing time), with the same faults as streams
/// where they make sense: status codes, stalls, a closed connection, a body cut short,
/// garbage, a wrong content type.
pub(super) async fn answer(socket: &mut TcpStream, request: &Request, shared: &Shared, kind: Answer) -> bool {
    let received = Instant::now();
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let script = script_for(&shared.script, &request.query);
    let fault = draw_fault(&script, id);
    let mut record = SimRecord::new(id, &request.path, fault, received);
    let body = match kind {
        Answer::Infer => {
            let req: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
            let Some(input) = req.pointer("/inputs/0") else {
                shared.log.push(record);
                return write_json(socket, 400, "Bad Request", &json!({"error": "no inputs"}), &[]).await;
            };
            // A deterministic "prediction" from the input, so probes can expect a label.
            let label = (input.to_string().len() % 10) as i64;
            let proba: Vec<f64> = (0..10).map(|i| if i == label { 0.91 } else { 0.01 }).collect();
            json!({"model_name": request.path.split('/').nth(3).unwrap_or("sim"), "model_version": "1", "id": req.get("id"),
            "outputs": [
                {"name": "predict", "shape": [1, 1], "datatype": "INT64", "data": [label]},
                {"name": "predict_proba", "shape": [1, 10], "datatype": "FP64", "data": proba}
            ]})
        }
        Answer::Prediction => {
            if request.body.is_empty() {
                shared.log.push(record);
                return write_json(
                    socket,
                    400,
                    "Bad Request",
                    &json!({"error": "no image in the request"}),
                    &[],
                )
                .await;
            }
            let parts = request
                .body
                .windows(20)
                .filter(|w| w.starts_with(b"Content-Disposition"))
                .count();
            json!({"class": "street", "probability": 0.87, "bytes": request.body.len(), "parts": parts})
        }
    };
    let keep = match fault {
        Some(Fault::Close) => false,
        Some(Fault::StallHeaders | Fault::StallStream) => {
            wait_for_peer_close(socket).await;
            false
        }
        _ => {
            tokio::time::sleep_until(received + script.ttft).await;
            record.headers_written = Some(Instant::now());
            match fault {
                Some(Fault::Http500) => {
                    write_json(
                        socket,
                        500,
                        "Internal Server Error",
                        &json!({"error": "simulated internal error"}),
                        &[],
                    )
                    .await
                }
                Some(Fault::Http429) => {
                    write_json(
                        socket,
                        429,
                        "Too Many Requests",
                        &json!({"error": "simulated rate limit"}),
                        &[("Retry-After", "1")],
                    )
                    .await
                }
                Some(Fault::Truncate) => {
                    let text = body.to_string();
                    // A Content-Length the body never reaches.
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        text.len() + 100
                    );
                    let _ = socket.write_all(head.as_bytes()).await;
                    let _ = socket.write_all(&text.as_bytes()[..text.len() / 2]).await;
                    false
                }
                Some(Fault::AbortAfterDone) => {
                    let mut head = http1::chunked_head("application/json", &[]);
                    http1::push_chunk(&mut head, &body.to_string());
                    record.done_written = Some(Instant::now());
                    let _ = socket.write_all(head.as_bytes()).await;
                    false
                }
                Some(Fault::Garbage | Fault::InbandError) => {
                    let text = "Traceback (most recent call last):\n  File \"model.py\", line 1\nValueError: simulated";
                    let response = http1::json_response(200, "OK", text, &[]);
                    socket.write_all(response.as_bytes()).await.is_ok()
                }
                Some(Fault::Empty) => {
                    let text = if matches!(kind, Answer::Infer) {
                        "{\"outputs\":[]}"
                    } else {
                        ""
                    };
                    let response = http1::json_response(200, "OK", text, &[]);
                    socket.write_all(response.as_bytes()).await.is_ok()
                }
                _ => {
                    record.done_written = Some(Instant::now());
                    write_json(socket, 200, "OK", &body, &[]).await
                }
            }
        }
    };
    shared.log.push(record);
    keep
}
