#!/bin/bash
# One /metrics scrape in one format, its size, time and what it adds to the agent's peak
# RSS: `inferprobe run` with N `http` probes (interval 30 s) against `inferprobe simulate`,
# scraped once after WAIT seconds (every probe has run by then).
#
#   benches/scrape_formats.sh BINARY N text|openmetrics|protobuf [WAIT, default 60]
#
# Run it once per format (VmHWM only grows, so each format needs its own agent).
set -eu
BIN=$1; N=$2; FORMAT=$3; WAIT=${4:-60}
case $FORMAT in
  text) ACCEPT='text/plain;version=0.0.4';;
  openmetrics) ACCEPT='application/openmetrics-text;version=1.0.0';;
  protobuf) ACCEPT='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited';;
  *) echo "format: text, openmetrics or protobuf" >&2; exit 64;;
esac
D=$(mktemp -d)
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
SIM=127.0.0.1:$(port)
LISTEN=127.0.0.1:$(port)
"$BIN" simulate --listen "$SIM" >"$D/sim.log" 2>&1 &
SIM_PID=$!
trap 'kill $SIM_PID ${RUN_PID:-} 2>/dev/null || true; rm -rf "$D"' EXIT
{
  echo "agent: {location: bench}"
  echo "defaults: {interval: 30s, timeout: 10s, overlap: true}"
  echo "probes:"
  for i in $(seq 1 "$N"); do echo "  - {name: p$i, kind: http, url: \"http://$SIM/health\"}"; done
} >"$D/probes.yaml"
"$BIN" run -c "$D/probes.yaml" --listen "$LISTEN" --data-dir "$D/data" >"$D/run.log" 2>&1 &
RUN_PID=$!
sleep "$WAIT"
hwm() { awk '/VmHWM/ {print $2}' "/proc/$RUN_PID/status"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$RUN_PID/status"; }
BEFORE=$(hwm)
RSS_BEFORE=$(rss)
T0=$(date +%s.%N)
curl -s -H "Accept: $ACCEPT" "http://$LISTEN/metrics" -o "$D/scrape" &
CURL_PID=$!
# VmHWM only shows a scrape that goes past the start-up peak; VmRSS, sampled while the
# scrape runs, shows what the scrape itself holds.
PEAK=$RSS_BEFORE
while kill -0 $CURL_PID 2>/dev/null; do
  R=$(rss); [ "$R" -gt "$PEAK" ] && PEAK=$R
  sleep 0.01
done
wait $CURL_PID
T1=$(date +%s.%N)
SIZE=$(wc -c <"$D/scrape")
sleep 1
echo "$N probes, $FORMAT: $SIZE bytes in $(echo "$T1 - $T0" | bc) s; VmHWM $BEFORE kB before the scrape, $(hwm) kB after; VmRSS $RSS_BEFORE kB before, at most $PEAK kB during (sampled every 10 ms)"
