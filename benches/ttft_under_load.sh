#!/bin/bash
# Whether the agent's other work delays a run's timestamps: 4 `openai_chat` probes every
# second against `inferprobe simulate --ttft 20ms` beside N `http` probes on a 30 s
# interval (N / 30 runs a second), while a client fetches /metrics, /api/v1/probes and
# the status page every SCRAPE_S seconds (0: never). Prints the chat probes' reported TTFT: p50, p90, p99
# and max over every run in SECONDS. The stream's first token is written 20 ms after the
# request (plus the simulator's own ~1 ms), so anything far past ~22 ms is time the run
# waited for the agent's thread, not the endpoint.
#
#   benches/ttft_under_load.sh AGENT_BIN [N, default 9000] [SECONDS, default 60]
#
# Environment: SCRAPE_S (2), NO_API=1 to fetch /metrics only (no probe list or page), SIM_BIN (the simulator,
# default AGENT_BIN), TOKIO_WORKER_THREADS (passed to the agent).
set -eu
agent=$1; n=${2:-9000}; secs=${3:-60}
sim=${SIM_BIN:-$agent}
scrape_s=${SCRAPE_S:-2}
out=$(mktemp -d /tmp/inferprobe-ttft-load.XXXXXX)
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
sp=$(port)
ap=$(port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
"$sim" simulate --listen "127.0.0.1:$sp" --ttft 20ms --log-level warn >/dev/null 2>&1 &
pids+=($!)
{
  echo "probes:"
  for ((i = 0; i < 4; i++)); do
    echo "  - {name: chat-$i, kind: openai_chat, url: \"http://127.0.0.1:$sp/v1/chat/completions\", model: m, interval: 1s, timeout: 900ms}"
  done
  for ((i = 0; i < n; i++)); do
    echo "  - {name: health-$i, kind: http, url: \"http://127.0.0.1:$sp/health\", interval: 30s, timeout: 10s}"
  done
} >"$out/probes.yaml"
until curl -fs "http://127.0.0.1:$sp/health" >/dev/null; do sleep 0.1; done
"$agent" --log-format json run -c "$out/probes.yaml" --listen "127.0.0.1:$ap" --location bench \
  --data-dir "$out/data" >"$out/agent.log" 2>&1 &
apid=$!
pids+=($apid)
until curl -fs "http://127.0.0.1:$ap/readyz" >/dev/null; do sleep 0.2; done
if [ "$scrape_s" != 0 ]; then
  (
    while kill -0 "$apid" 2>/dev/null; do
      curl -s -o /dev/null "http://127.0.0.1:$ap/metrics"
      if [ -z "${NO_API:-}" ]; then
        curl -s -o /dev/null "http://127.0.0.1:$ap/api/v1/probes"
        curl -s -o /dev/null "http://127.0.0.1:$ap/"
      fi
      sleep "$scrape_s"
    done
  ) &
  pids+=($!)
fi
sleep "$secs"
kill "$apid"
wait "$apid" 2>/dev/null || true
python3 - "$out/agent.log" "$n" "$scrape_s" <<'PY'
import json, sys
ttft = []
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if str(d.get("probe", "")).startswith("chat-") and d.get("ttft_ms") is not None:
        ttft.append(d["ttft_ms"])
if not ttft:
    sys.exit("no chat run reported a TTFT")
ttft.sort()
q = lambda p: ttft[min(len(ttft) - 1, int(p * len(ttft)))]
print(f"{sys.argv[2]} http probes, fetches every {sys.argv[3]} s: {len(ttft)} chat runs, "
      f"TTFT p50 {q(.5):.1f} p90 {q(.9):.1f} p99 {q(.99):.1f} max {ttft[-1]:.1f} ms")
PY
