#!/usr/bin/env python3
"""Soak: the agent at ~300 runs/s against the simulator for an hour, with paging and the
store on, reloaded with a valid and a broken config every few seconds.

What it checks and prints (a Markdown table for RELIABILITY.md):
  - RSS, open file descriptors and threads of the agent, sampled every minute; the mean
    of the first ten minutes against the last ten;
  - runs done against runs scheduled (no missed ticks: inferprobe_skipped_runs_total);
  - the store's disk use against its bound (agent.history.max_disk_mb);
  - pages: every webhook notification id is seen once (no duplicate pages), and every
    faulty probe paged;
  - reloads: a broken file never replaced the running config (runs go on, the reload
    gauge drops to 0 and comes back with the next valid file);
  - SIGTERM at the end drains runs in flight within the drain deadline.

Run from the repository root after `cargo build --release`:

    python3 scripts/soak.py                 # 60 minutes (the recorded run)
    python3 scripts/soak.py --minutes 3     # a quick look
"""

import argparse
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BIN = os.environ.get("INFERPROBE_BIN", "target/release/inferprobe")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Hook(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that remembers every notification id."""

    ids = []
    lock = threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            n = json.loads(body)
            with Hook.lock:
                Hook.ids.append((n.get("id"), n.get("event"), n.get("probe") or n.get("alert", {}).get("probe")))
        except ValueError:
            pass
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def config_text(sim, hook, probes, interval_ms, data_dir, variant):
    """Variant 2 adds a `canary` probe, so each valid reload really changes something
    (a probe added or removed) while the others stay unchanged and keep their schedule."""
    lines = [
        "agent:",
        "  location: soak",
        f"  data_dir: {data_dir}",
        "  history: {retention: 1h, max_disk_mb: 64}",
        "receivers:",
        "  - name: hook",
        "    kind: webhook",
        f"    url: http://127.0.0.1:{hook}/hook",
        "    max_backoff: 1s",
        "defaults:",
        f"  interval: {interval_ms}ms",
        "  timeout: 900ms",
        "  first_token_timeout: 700ms",
        "  alert: {failure_threshold: 3, success_threshold: 2}",
        "probes:",
    ]
    for i in range(probes):
        # 85 % healthy, then 5 % each: 500s, truncated streams, stalls (timeouts).
        kind = i % 20
        query = "ttft=20ms&token_gap=2ms&tokens=8"
        if kind == 17:
            query += "&fault=http-500"
        elif kind == 18:
            query += "&fault=truncate"
        elif kind == 19:
            query += "&fault=stall-stream"
        lines += [
            f"  - name: p{i:04}",
            "    kind: openai_chat",
            f"    url: http://127.0.0.1:{sim}/v1/chat/completions?{query}",
            "    model: sim",
            "    max_tokens: 8",
        ]
    if variant == 2:
        lines += [
            "  - name: canary",
            "    kind: openai_chat",
            f"    url: http://127.0.0.1:{sim}/v1/chat/completions?ttft=20ms&tokens=4",
            "    model: sim",
        ]
    return "\n".join(lines) + "\n"


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_sum(text, name, *parts):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(p in line for p in parts):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return total


def proc_sample(pid):
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--reload-every", type=float, default=5.0)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="inferprobe-soak-")
    data = os.path.join(work, "data")
    sim_port, hook_port, agent_port = free_port(), free_port(), free_port()
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", hook_port), Hook)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    sim = subprocess.Popen([BIN, "simulate", "--listen", f"127.0.0.1:{sim_port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = os.path.join(work, "probes.yaml")
    good = [config_text(sim_port, hook_port, args.probes, args.interval_ms, data, v) for v in (1, 2)]
    broken = good[0].replace("  timeout: 900ms", "  timeout: soon")
    with open(cfg, "w") as f:
        f.write(good[0])
    log = open(os.path.join(work, "agent.log"), "w")
    agent = subprocess.Popen([BIN, "--log-format", "json", "--log-level", "warn", "run", "-c", cfg,
                              "--listen", f"127.0.0.1:{agent_port}", "--drain-timeout", "10s"],
                             stdout=log, stderr=log)
    time.sleep(2)
    start = time.time()
    end = start + args.minutes * 60
    rate = args.probes * 1000 / args.interval_ms
    print(f"soak: {args.probes} probes every {args.interval_ms} ms = {rate:.0f} runs/s for {args.minutes:g} min; work dir {work}", flush=True)

    samples = []  # (minute, rss MB, fds, threads, runs, skipped, disk bytes)
    reloads = {"valid": 0, "broken": 0, "kept_on_broken": 0, "applied": 0}
    next_sample = start
    next_reload = start + args.reload_every
    n_reload = 0
    runs_at_start = metric_sum(metrics(agent_port), "inferprobe_runs_total", 'probe="p')
    while time.time() < end:
        now = time.time()
        if now >= next_reload:
            n_reload += 1
            is_broken = n_reload % 2 == 0
            with open(cfg, "w") as f:
                f.write(broken if is_broken else good[((n_reload + 1) // 2) % 2])
            agent.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            m = metrics(agent_port)
            ok = metric_sum(m, "inferprobe_config_last_reload_successful")
            if is_broken:
                reloads["broken"] += 1
                reloads["kept_on_broken"] += ok == 0 and metric_sum(m, "inferprobe_probes") >= args.probes
            else:
                reloads["valid"] += 1
                reloads["applied"] += ok == 1
            next_reload += args.reload_every
        if now >= next_sample:
            m = metrics(agent_port)
            rss, fds, threads = proc_sample(agent.pid)
            runs = metric_sum(m, "inferprobe_runs_total", 'probe="p')
            skipped = metric_sum(m, "inferprobe_skipped_runs_total", 'probe="p')
            disk = metric_sum(m, "inferprobe_history_disk_bytes")
            minute = (now - start) / 60
            samples.append((minute, rss, fds, threads, runs, skipped, disk))
            print(f"  {minute:5.1f} min  rss {rss:6.1f} MB  fds {fds:4d}  threads {threads:3d}  runs {runs:9.0f}  skipped {skipped:4.0f}  store {disk / 1e6:6.1f} MB", flush=True)
            next_sample += 60
        if agent.poll() is not None:
            print("error: the agent exited", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.2)

    # The last file is valid (so the drain measures a running agent).
    with open(cfg, "w") as f:
        f.write(good[0])
    agent.send_signal(signal.SIGHUP)
    time.sleep(1)
    m = metrics(agent_port)
    elapsed = time.time() - start
    runs = metric_sum(m, "inferprobe_runs_total", 'probe="p') - runs_at_start
    skipped = metric_sum(m, "inferprobe_skipped_runs_total", 'probe="p')
    t_term = time.time()
    agent.send_signal(signal.SIGTERM)
    code = agent.wait(timeout=60)
    drain = time.time() - t_term
    sim.terminate()
    hook.shutdown()
    time.sleep(1)

    ids = [i for i, _, _ in Hook.ids]
    dups = len(ids) - len(set(ids))
    firing = {p for _, e, p in Hook.ids if e == "firing"}
    faulty = {f"p{i:04}" for i in range(args.probes) if i % 20 in (17, 18, 19)}
    db = os.path.join(data, "inferprobe.db")
    db_bytes = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)

    def mean(rows, col):
        return sum(r[col] for r in rows) / max(1, len(rows))

    k = min(10, max(1, len(samples) // 3))
    first, last = samples[:k], samples[-k:]
    print()
    print(f"| figure | first {k} min | last {k} min |")
    print("|---|---|---|")
    print(f"| RSS (MB, mean) | {mean(first, 1):.1f} | {mean(last, 1):.1f} |")
    print(f"| open fds (mean) | {mean(first, 2):.1f} | {mean(last, 2):.1f} |")
    print(f"| threads (mean) | {mean(first, 3):.1f} | {mean(last, 3):.1f} |")
    print()
    print("| figure | value |")
    print("|---|---|")
    print(f"| duration | {elapsed / 60:.1f} min |")
    print(f"| runs done / scheduled | {runs:.0f} / {rate * elapsed:.0f} ({runs / (rate * elapsed) * 100:.2f} %) |")
    print(f"| skipped ticks (`inferprobe_skipped_runs_total`) | {skipped:.0f} |")
    print(f"| store on disk at the end / bound | {db_bytes / 1e6:.1f} MB / 67.1 MB (64 MiB) |")
    print(f"| reloads: valid applied | {reloads['applied']} / {reloads['valid']} |")
    print(f"| reloads: broken, running config kept | {reloads['kept_on_broken']} / {reloads['broken']} |")
    print(f"| webhook notifications / duplicate ids | {len(ids)} / {dups} |")
    print(f"| faulty probes that paged | {len(firing & faulty)} / {len(faulty)} |")
    print(f"| SIGTERM to exit (drain deadline 10 s) | {drain:.1f} s, exit code {code} |")
    shutil.rmtree(work, ignore_errors=True)
    ok = dups == 0 and code == 0 and drain < 12 and skipped == 0 and reloads["kept_on_broken"] == reloads["broken"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
