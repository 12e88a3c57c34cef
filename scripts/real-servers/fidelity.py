#!/usr/bin/env python3
"""Fidelity of inferprobe's TTFT and total against an independent streaming client and the
server's own `timings`, on a real llama.cpp `llama-server` (see llama_server.sh).

Runs alternate: one `inferprobe once` run, then one run of the reference client below,
with the same request body, each on a fresh connection (inferprobe's default). The
reference client is Python's standard library only: a raw socket, `time.perf_counter_ns`
(monotonic) taken just before connect (inferprobe's t0 also includes connect), TTFT at the
recv() that completed the first event with non-empty `delta.content`, total at the recv()
that completed `data: [DONE]`. Both clients count the same events the same way.

    scripts/real-servers/fidelity.py --inferprobe target/release/inferprobe --runs 40

Prints one line per run pair and a summary (median, p10, p90 of each and of the paired
difference inferprobe - reference), plus the server's `timings` (prompt_ms, predicted_ms)
from the final chunk of the reference client's streams.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "Write a short story about a cat."


def body(model, max_tokens):
    # Exactly what inferprobe's openai_chat kind sends for a text prompt.
    return json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        separators=(",", ":"),
    ).encode()


def reference_run(host, port, payload):
    """One streamed request on a fresh connection; returns (ttft_s, total_s, timings)."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    t0 = time.perf_counter_ns()
    s = socket.create_connection((host, port))
    connected = time.perf_counter_ns() - t0
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head + payload)
    buf = b""
    ttft = total = first_byte = None
    timings = None
    finish = None
    while total is None:
        data = s.recv(65536)
        at = time.perf_counter_ns()
        if not data:
            break
        if first_byte is None:
            first_byte = at - t0
        buf += data
        # Events end at a blank line; chunk-size lines of the chunked encoding sit
        # between them, so each event is read from its `data: ` on.
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            i = event.find(b"data: ")
            if i < 0:
                continue
            d = event[i + 6 :]
            if d == b"[DONE]":
                total = at - t0
                break
            chunk = json.loads(d)
            for c in chunk.get("choices") or []:
                if ttft is None and (c.get("delta") or {}).get("content"):
                    ttft = at - t0
                if c.get("finish_reason"):
                    finish = c["finish_reason"]
            if "timings" in chunk:
                timings = chunk["timings"]
    s.close()
    secs = lambda ns: ns / 1e9 if ns else None
    return secs(ttft), secs(total), timings, finish, secs(connected), secs(first_byte)


def inferprobe_run(binary, config):
    out = subprocess.run(
        [binary, "once", "--format", "json", "-c", config],
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.splitlines()[0])
    return r["ttft_seconds"], r["total_seconds"], r["success"], r.get("finish_reason"), r


def daemon_runs(binary, config, n, on_run):
    """The probe inside a running agent (a warm process, as in production): polls the
    agent's API for each new run and calls `on_run(last_run)` right after it, so the
    reference client's run falls between two of the agent's (interval 2 s)."""
    data = tempfile.mkdtemp()
    agent = subprocess.Popen(
        [binary, "run", "-c", config, "--listen", "127.0.0.1:19499", "--location", "fidelity", "--data-dir", data],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen, got = None, 0
    try:
        while got < n + 1:
            time.sleep(0.05)
            try:
                s = socket.create_connection(("127.0.0.1", 19499))
            except OSError:
                continue
            s.sendall(b"GET /api/v1/probes HTTP/1.0\r\nHost: x\r\n\r\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
            s.close()
            probes = json.loads(raw.split(b"\r\n\r\n", 1)[1])["probes"]
            last = probes[0].get("last_run") if probes else None
            if not last or last["started_at"] == seen:
                continue
            seen = last["started_at"]
            got += 1
            if got > 1:  # the first run is the warm-up
                on_run(last)
    finally:
        agent.terminate()
        agent.wait()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))]


def summary(name, xs):
    ms = [x * 1000 for x in xs]
    return f"{name}: median {statistics.median(ms):.3f} ms, p10 {pct(ms, 10):.3f}, p90 {pct(ms, 90):.3f} (n={len(ms)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inferprobe", default="target/release/inferprobe")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", 18080)))
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument(
        "--daemon",
        action="store_true",
        help="measure inferprobe inside a running agent (warm process) instead of `once`",
    )
    a = ap.parse_args()

    config = os.path.join(tempfile.mkdtemp(), "fidelity.yaml")
    with open(config, "w") as f:
        f.write(
            "probes:\n  - name: fidelity\n    kind: openai_chat\n"
            f"    url: http://{a.host}:{a.port}/v1/chat/completions\n"
            f"    model: {a.model}\n    max_tokens: {a.max_tokens}\n"
            f"    prompts: {{inline: [{json.dumps(PROMPT)}]}}\n    timeout: 2s\n"
            "    interval: 2s\n"
        )
    payload = body(a.model, a.max_tokens)
    # Warm-up: the server's prompt cache and page cache, both clients' first run.
    reference_run(a.host, a.port, payload)
    inferprobe_run(a.inferprobe, config)
    print(f"load average at start: {os.getloadavg()}")

    ip_ttft, ip_total, ref_ttft, ref_total, d_ttft, d_total = [], [], [], [], [], []
    d_connect, d_first_byte = [], []
    prompt_ms, predicted_ms, failures = [], [], []
    pairs = []
    if a.daemon:
        def on_run(last):
            ip = (last["ttft_seconds"], last["total_seconds"], last["success"], last.get("finish_reason"), last)
            pairs.append((["ip", "ref"], {"ip": ip, "ref": reference_run(a.host, a.port, payload)}))

        daemon_runs(a.inferprobe, config, a.runs, on_run)
    else:
        for i in range(a.runs):
            # Alternate which client goes first, so neither always follows the other.
            order = ["ip", "ref"] if i % 2 == 0 else ["ref", "ip"]
            got = {}
            for who in order:
                if who == "ip":
                    got["ip"] = inferprobe_run(a.inferprobe, config)
                else:
                    got["ref"] = reference_run(a.host, a.port, payload)
            pairs.append((order, got))
    for i, (order, got) in enumerate(pairs):
        it, itot, ok, ifinish, raw = got["ip"]
        rt, rtot, timings, rfinish, rconnect, rfirst = got["ref"]
        if not ok:
            failures.append(raw)
            print(f"run {i}: inferprobe FAILED: {raw.get('reason')}: {raw.get('message')}", file=sys.stderr)
            continue
        if rt is None or rtot is None:
            print(f"run {i}: reference saw no token or no [DONE]", file=sys.stderr)
            continue
        ip_ttft.append(it)
        ip_total.append(itot)
        ref_ttft.append(rt)
        ref_total.append(rtot)
        d_ttft.append(it - rt)
        d_total.append(itot - rtot)
        # inferprobe's t0 also covers resolving the (literal) host: dns + connect.
        d_connect.append((raw["dns_seconds"] or 0) + (raw["connect_seconds"] or 0) - rconnect)
        # inferprobe's TTFB is the response head; the reference's, the first recv (the
        # head, often with the first events).
        d_first_byte.append(raw["ttfb_seconds"] - rfirst)
        if timings:
            prompt_ms.append(timings["prompt_ms"] / 1000)
            predicted_ms.append(timings["predicted_ms"] / 1000)
        print(
            f"run {i:2d} ({order[0]} first): inferprobe ttft {it*1000:.3f} total {itot*1000:.3f} finish {ifinish} | "
            f"reference ttft {rt*1000:.3f} total {rtot*1000:.3f} finish {rfinish} | "
            f"server prompt_ms {timings['prompt_ms'] if timings else '-'} predicted_ms {timings['predicted_ms'] if timings else '-'}"
        )
    print()
    print(summary("inferprobe TTFT", ip_ttft))
    print(summary("reference  TTFT", ref_ttft))
    print(summary("difference TTFT (inferprobe - reference, paired)", d_ttft))
    print(summary("difference connect (dns + connect - connect)", d_connect))
    print(summary("difference first byte (ttfb - first recv)", d_first_byte))
    print(summary("inferprobe total", ip_total))
    print(summary("reference  total", ref_total))
    print(summary("difference total (inferprobe - reference, paired)", d_total))
    if prompt_ms:
        print(summary("server prompt_ms (prefill)", prompt_ms))
        print(summary("server prompt_ms + predicted_ms", [p + q for p, q in zip(prompt_ms, predicted_ms)]))
    print(f"inferprobe failures: {len(failures)} of {a.runs}")


if __name__ == "__main__":
    main()
