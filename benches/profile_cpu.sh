#!/usr/bin/env bash
# Where the agent's CPU goes at 300 runs/s: 9,000 `http` probes of the simulator's
# /health on a 30 s interval (the `resources` bench's 300 runs/s row), profiled with
# `perf record --call-graph dwarf` once every probe has run, then split into components
# by benches/profile_components.py (log line, history write, metrics, allocation,
# connection setup, request/response, tokio, ...).
#
# Usage: benches/profile_cpu.sh [AGENT_BIN] [OUT_DIR]
#   AGENT_BIN defaults to target/release/inferprobe built with
#   `cargo build --profile bench` (line tables kept, so inlined frames are named).
#   Needs perf (root, or kernel.perf_event_paranoid <= 1 for the kernel's share).
# Environment: PROBES (9000), WARMUP_S (35), PROFILE_S (30), FREQ (499), SIM_BIN (the
# simulator, default target/release/inferprobe), PERF=0 to measure the CPU per run
# without profiling (the window's CPU is read from /proc either way; under perf it
# includes perf's own overhead in the agent).
set -euo pipefail
agent=${1:-target/release/inferprobe}
out=${2:-$(mktemp -d /tmp/inferprobe-profile.XXXXXX)}
sim_bin=${SIM_BIN:-target/release/inferprobe}
probes=${PROBES:-9000}
warmup=${WARMUP_S:-35}
seconds=${PROFILE_S:-30}
freq=${FREQ:-499}
mkdir -p "$out"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(port)
agent_port=$(port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
"$sim_bin" simulate --listen "127.0.0.1:$sim_port" --log-level warn >"$out/simulator.log" 2>&1 &
pids+=($!)
{
  echo "defaults: {overlap: true}"
  echo "probes:"
  for ((i = 0; i < probes; i++)); do
    echo "  - {name: health-$i, kind: http, url: \"http://127.0.0.1:$sim_port/health\", interval: 30s, timeout: 10s}"
  done
} >"$out/probes.yaml"
until curl -fs "http://127.0.0.1:$sim_port/health" >/dev/null; do sleep 0.1; done
"$agent" run -c "$out/probes.yaml" --listen "127.0.0.1:$agent_port" --location bench \
  --data-dir "$out/data" >"$out/agent.log" 2>&1 &
agent_pid=$!
pids+=($agent_pid)
until curl -fs "http://127.0.0.1:$agent_port/readyz" >/dev/null; do sleep 0.2; done
echo "agent pid $agent_pid ready; warming up ${warmup}s; load $(cut -d' ' -f1-3 /proc/loadavg)"
sleep "$warmup"
ticks() { awk '{print $14 + $15}' "/proc/$agent_pid/stat"; }
runs() { curl -fs "http://127.0.0.1:$agent_port/metrics" | awk '/^inferprobe_runs_total[{ ]/ {s += $NF} END {printf "%d", s}'; }
runs0=$(runs)
cpu0=$(ticks)
if [ "${PERF:-1}" = 0 ]; then
  sleep "$seconds"
else
  perf record -F "$freq" --call-graph dwarf,16384 -p "$agent_pid" -o "$out/perf.data" -- sleep "$seconds" 2>"$out/perf-record.log"
fi
cpu1=$(ticks)
runs1=$(runs)
clk=$(getconf CLK_TCK)
python3 - "$cpu0" "$cpu1" "$clk" "$runs0" "$runs1" <<'PY' | tee "$out/summary.txt"
import sys
c0, c1, clk, r0, r1 = map(float, sys.argv[1:])
runs = r1 - r0
print(f"window: {runs:.0f} runs, {(c1 - c0) / clk:.2f} CPU s, "
      f"{(c1 - c0) / clk / runs * 1e3:.3f} ms per run")
PY
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
# PERF=0: the CPU per run alone (for before/after comparisons without perf's overhead).
[ "${PERF:-1}" = 0 ] && exit 0
perf script -i "$out/perf.data" -F comm,tid,ip,sym --no-inline 2>/dev/null >"$out/perf.script" || perf script -i "$out/perf.data" >"$out/perf.script"
python3 "$(dirname "$0")/profile_components.py" "$out/perf.script" | tee -a "$out/summary.txt"
echo "profile in $out (perf report -i $out/perf.data --no-children)"
