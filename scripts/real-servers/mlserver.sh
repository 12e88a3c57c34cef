#!/usr/bin/env bash
# Real Open Inference Protocol (KServe v2) server: MLServer with a scikit-learn classifier
# trained here on sklearn's built-in 8x8 digits (no download), for acceptance checks.
#
#   scripts/real-servers/mlserver.sh [all|install|model|start|stop|status|smoke|grpc-smoke]
#
#   all (default)  install + model + start
#   install        venv $WORK/mlserver-venv with mlserver + mlserver-sklearn (PyPI)
#   model          train_digits.py: model.joblib + settings.json + model-settings.json
#   start          start MLServer in the background, wait until /v2/models/digits/ready is 200
#   stop / status  by pid file
#   smoke          curl health, readiness, metadata and one infer (digits.data[0], label 0)
#   grpc-smoke     the same over gRPC on GRPC_PORT, with MLServer's own grpcio stubs
#
# Environment: HOST (127.0.0.1), PORT (18081, HTTP), GRPC_PORT (18091), METRICS_PORT (18092),
# WORK (scripts/real-servers/.work; git-ignored), MLSERVER_VERSION (1.7.1).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HERE/.work}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-18081}"
GRPC_PORT="${GRPC_PORT:-18091}"
METRICS_PORT="${METRICS_PORT:-18092}"
MLSERVER_VERSION="${MLSERVER_VERSION:-1.7.1}"
PY="${PYTHON:-python3}"

VENV="$WORK/mlserver-venv"
REPO="$WORK/mlserver-models"
PIDFILE="$WORK/mlserver-$PORT.pid"
LOG="$WORK/mlserver-$PORT.log"
BASE="http://$HOST:$PORT"

log() { printf '[mlserver] %s\n' "$*" >&2; }

do_install() {
    if [[ -x "$VENV/bin/mlserver" ]]; then log "installed: $VENV"; return; fi
    mkdir -p "$WORK"
    "$PY" -m venv "$VENV"
    log "pip install mlserver==$MLSERVER_VERSION mlserver-sklearn==$MLSERVER_VERSION (about 1 min)"
    "$VENV/bin/pip" install -q "mlserver==$MLSERVER_VERSION" "mlserver-sklearn==$MLSERVER_VERSION"
}

do_model() {
    [[ -x "$VENV/bin/python" ]] || do_install
    "$VENV/bin/python" "$HERE/train_digits.py" "$REPO" --host "$HOST" --http-port "$PORT" \
        --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT"
}

do_start() {
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        log "already running (pid $(cat "$PIDFILE"))"; return
    fi
    [[ -x "$VENV/bin/mlserver" ]] || do_install
    [[ -f "$REPO/digits/model.joblib" ]] || do_model
    # MLServer writes .envs/ and .metrics/ into its working directory: keep them under $WORK.
    cd "$WORK"
    setsid nohup "$VENV/bin/mlserver" start "$REPO" >"$LOG" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 1 120); do
        if curl -fsS -m 2 -o /dev/null "$BASE/v2/models/digits/ready" 2>/dev/null; then
            log "ready on $BASE (pid $pid, log $LOG)"; echo "$pid"; return 0
        fi
        kill -0 "$pid" 2>/dev/null || { log "server exited; see $LOG"; tail -n 30 "$LOG" >&2; return 1; }
        sleep 0.5
    done
    log "not ready after 60 s; see $LOG"; return 1
}

do_stop() {
    if [[ -f "$PIDFILE" ]]; then
        local pid; pid="$(cat "$PIDFILE")"
        # mlserver spawns worker processes in its own process group (setsid above): stop the group.
        if kill -0 "$pid" 2>/dev/null; then kill -- "-$pid" 2>/dev/null || kill "$pid"; log "stopped pid $pid"; fi
        rm -f "$PIDFILE"
    else
        log "no pid file $PIDFILE"
    fi
}

do_status() {
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "pid $(cat "$PIDFILE")"; curl -sS -o /dev/null -w 'ready %{http_code}\n' "$BASE/v2/health/ready"
    else
        echo "not running"; return 1
    fi
}

# digits.data[0] (a "0"), the same body as v2-infer.txt
INFER_BODY='{"id":"req-1","inputs":[{"name":"input-0","shape":[1,64],"datatype":"FP32","data":[0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0]}]}'

do_smoke() {
    set -x
    curl -sS -i "$BASE/v2/health/ready"
    curl -sS -i "$BASE/v2/models/digits/ready"
    curl -sS "$BASE/v2/models/digits"; echo
    curl -sS -i -H 'Content-Type: application/json' -d "$INFER_BODY" "$BASE/v2/models/digits/infer"; echo
}

# ServerLive, ModelReady and ModelInfer (typed fp32_contents, then raw_input_contents) with
# the grpcio client MLServer itself depends on: what inferprobe's kserve_v2_grpc must match.
do_grpc_smoke() {
    GRPC_ADDR="$HOST:$GRPC_PORT" "$VENV/bin/python" - <<'PY'
import os, struct
import grpc
from mlserver.grpc import dataplane_pb2 as pb, dataplane_pb2_grpc as svc
stub = svc.GRPCInferenceServiceStub(grpc.insecure_channel(os.environ["GRPC_ADDR"]))
print("ServerLive:", stub.ServerLive(pb.ServerLiveRequest()).live)
print("ModelReady:", stub.ModelReady(pb.ModelReadyRequest(name="digits", version="v1")).ready)
d = [0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0]
tensor = dict(name="input-0", datatype="FP32", shape=[1, 64])
typed = stub.ModelInfer(pb.ModelInferRequest(model_name="digits", model_version="v1",
    inputs=[pb.ModelInferRequest.InferInputTensor(contents=pb.InferTensorContents(fp32_contents=d), **tensor)]))
print("typed in:", [(o.name, list(o.shape), list(o.contents.int64_contents)) for o in typed.outputs], "raw out:", list(typed.raw_output_contents))
raw = stub.ModelInfer(pb.ModelInferRequest(model_name="digits", model_version="v1",
    inputs=[pb.ModelInferRequest.InferInputTensor(**tensor)], raw_input_contents=[struct.pack("<64f", *d)]))
print("raw in:", [(o.name, list(o.shape)) for o in raw.outputs], "raw out:", [bytes(b).hex() for b in raw.raw_output_contents])
PY
}

case "${1:-all}" in
    all) do_install; do_model; do_start ;;
    install) do_install ;;
    model) do_model ;;
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    smoke) do_smoke ;;
    grpc-smoke) do_grpc_smoke ;;
    *) echo "usage: $0 [all|install|model|start|stop|status|smoke|grpc-smoke]" >&2; exit 2 ;;
esac
