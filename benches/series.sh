#!/bin/sh
# Series per probe, counted from one scrape: `inferprobe run` with one probe of every kind
# at `interval: 1s` against `inferprobe simulate`, scraped after SECONDS (default 8).
#
#   benches/series.sh BINARY [basic|full]    (no detail: the config says none, as before
#                                             the `metrics` key existed)
#
# Prints the sample lines of each probe (the lines whose first label is its `probe`) and
# of the agent (every other line). tests/it/series_budget.rs counts the same way and pins
# the figures.
set -eu
BIN=$1
DETAIL=${2:-}
WAIT=${SECONDS_BEFORE_SCRAPE:-8}
D=$(mktemp -d)
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SIM=127.0.0.1:$(port)
LISTEN=127.0.0.1:$(port)
"$BIN" simulate --listen "$SIM" >"$D/sim.log" 2>&1 &
SIM_PID=$!
trap 'kill $SIM_PID ${RUN_PID:-} 2>/dev/null || true' EXIT
METRICS=""
[ -n "$DETAIL" ] && METRICS=", metrics: {detail: $DETAIL}"
S="ttft=20ms&token_gap=2ms"
cat >"$D/probes.yaml" <<YAML
agent: {location: count$METRICS}
defaults: {interval: 1s, timeout: 900ms}
probes:
  - {name: openai_chat, kind: openai_chat, url: "http://$SIM/v1/chat/completions?$S", model: sim-model}
  - {name: openai_completions, kind: openai_completions, url: "http://$SIM/v1/completions?$S", model: sim-model}
  - {name: openai_responses, kind: openai_responses, url: "http://$SIM/v1/responses?$S", model: sim-model}
  - {name: ollama, kind: ollama, url: "http://$SIM/api/chat?$S", model: sim-model}
  - {name: tgi, kind: tgi, url: "http://$SIM/generate_stream?$S", model: sim-model}
  - {name: llamacpp, kind: llamacpp, url: "http://$SIM/completion?$S", model: sim-model}
  - {name: anthropic, kind: anthropic, url: "http://$SIM/v1/messages?$S", model: sim-model}
  - name: kserve_v2
    kind: kserve_v2
    url: "http://$SIM/v2/models/digits/infer?ttft=5ms"
    ready_check: true
    input: {name: input-0, datatype: FP32, shape: [1, 4], data: [0.1, 0.5, 0.2, 0.9]}
  - {name: http, kind: http, url: "http://$SIM/health"}
YAML
sleep 1
"$BIN" run -c "$D/probes.yaml" --listen "$LISTEN" --data-dir "$D/data" >"$D/run.log" 2>&1 &
RUN_PID=$!
sleep "$WAIT"
curl -s "http://$LISTEN/metrics" >"$D/metrics.txt"
if grep -q 'result="failure"' "$D/metrics.txt"; then echo "a run failed: see $D" >&2; exit 1; fi
echo "scrape: $D/metrics.txt"
for p in openai_chat openai_completions openai_responses ollama tgi llamacpp anthropic kserve_v2 http; do
  printf '%-20s %s\n' "$p" "$(grep -v '^#' "$D/metrics.txt" | grep -c "{probe=\"$p\",")"
done
printf '%-20s %s\n' agent "$(grep -v '^#' "$D/metrics.txt" | grep -v '^$' | grep -vc '{probe=')"
