#!/usr/bin/env bash
# Real llama.cpp server (the C++ `llama-server`) with a tiny random-weight GGUF model built
# locally, for acceptance checks of inferprobe. Needs only PyPI (and a C++ compiler).
#
#   scripts/real-servers/llama_server.sh [all|build|model|start|stop|status|python-start]
#
#   all (default)  build + model + start
#   build          fetch llama.cpp's source (vendored in the llama-cpp-python sdist on PyPI)
#                  and compile only the `llama-server` target (no web UI, no HTTPS, no curl)
#   model          write the tiny model with make_tiny_gguf.py (gguf + numpy from PyPI)
#   start          start llama-server in the background on $HOST:$PORT, wait until /health is ok
#   stop           stop the server started by `start` (pid file)
#   status         print pid and /health
#   python-start   fallback: llama-cpp-python's FastAPI server (`pip install llama-cpp-python[server]`,
#                  builds the same llama.cpp from source) on the same port and model
#
# Environment: HOST (127.0.0.1), PORT (18080), MODEL_ALIAS (tiny-llama), CTX (2048),
# WORK (scripts/real-servers/.work: build tree, model, logs; git-ignored),
# LLAMA_CPP_PYTHON_VERSION (0.3.36), JOBS (nproc).
# Which server (one binary, as many instances as ports; defaults: the plain tiny model):
#   TOOLS=1   the tool-calling variant: model `make_tiny_gguf.py --no-space-prefix --tool-tokens`
#             served with Qwen2.5's chat template from the llama.cpp source tree
#             (models/templates/Qwen-Qwen2.5-7B-Instruct.jinja), so `tools` give real tool calls
#             and `response_format` json_schema/json_object works
#   SEED=N    the model's weights seed (0); another seed is another model of the same shape
#   MODEL     the model file ($WORK/tiny-llama[-tools][-seedN].gguf, written if missing)
#   JINJA=1|0 --jinja | --no-jinja (unset: neither; this build's default is jinja on)
#   CHAT_TEMPLATE_FILE  --chat-template-file (TOOLS=1: the Qwen2.5 template above)
#   SLOTS=N   -np N: requests generated at once (1: a small single-user deployment, each
#             request waits for the one before it; .ci/run's 18085 has 4 for the burst test)
#   THREADS=N -t N: compute threads (2). On a two-core machine 2 leave nothing for a client
#             timing the answers while the server generates (it then reads tokens in
#             bursts, late); the traffic tests' servers take 1
#   METRICS=1|0  --metrics (1, the default) or not: without it /metrics answers 501, as
#             on a server started with the defaults
#   LOG_VERBOSITY=N  --log-verbosity N (unset: the server's default, 3 = info). 5 adds the
#             debug lines that show when each request arrived ("new task, id = N" when it
#             is queued, "no slot is available, defer task" when it must wait for a slot)
#             and one line per generated token; tests/it/traffic_real.rs reads them
# Every log line starts with the time since the server started (M.SS.mmm.uuu, from
# --log-prefix --log-timestamps), so the log shows when each task ran on its slot.
# e.g. TOOLS=1 PORT=18083 llama_server.sh start;
#      TOOLS=1 SEED=1 MODEL_ALIAS=tiny-llama-v2 PORT=18084 llama_server.sh start
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WORK="${WORK:-$HERE/.work}"
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-18080}"
MODEL_ALIAS="${MODEL_ALIAS:-tiny-llama}"
CTX="${CTX:-2048}"
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-$(nproc)}"
PY="${PYTHON:-python3}"
TOOLS="${TOOLS:-0}"
SEED="${SEED:-0}"
JINJA="${JINJA:-}"
SLOTS="${SLOTS:-1}"
THREADS="${THREADS:-2}"
LOG_VERBOSITY="${LOG_VERBOSITY:-}"

SRC="$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
BUILD="$WORK/llama-build"
BIN="$BUILD/bin/llama-server"
# Python packages (pip for the sdist, gguf + numpy, cmake + ninja if missing) go to a venv:
# a Debian python3 has no pip and refuses installs into the system (PEP 668).
VENV="$WORK/llama-venv"
MODEL_NAME=tiny-llama
MODEL_ARGS=(--seed "$SEED")
SERVER_ARGS=()
if [[ "$TOOLS" == 1 ]]; then
    MODEL_NAME+=-tools
    MODEL_ARGS+=(--no-space-prefix --tool-tokens)
    CHAT_TEMPLATE_FILE="${CHAT_TEMPLATE_FILE:-$SRC/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja}"
fi
[[ "$SEED" == 0 ]] || MODEL_NAME+="-seed$SEED"
MODEL="${MODEL:-$WORK/$MODEL_NAME.gguf}"
case "$JINJA" in
    1) SERVER_ARGS+=(--jinja) ;;
    0) SERVER_ARGS+=(--no-jinja) ;;
    "") ;;
    *) echo "JINJA must be 1, 0 or unset" >&2; exit 2 ;;
esac
[[ -z "${CHAT_TEMPLATE_FILE:-}" ]] || SERVER_ARGS+=(--chat-template-file "$CHAT_TEMPLATE_FILE")
[[ "$SLOTS" =~ ^[1-9][0-9]*$ ]] || { echo "SLOTS must be a positive number" >&2; exit 2; }
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || { echo "THREADS must be a positive number" >&2; exit 2; }
[[ -z "$LOG_VERBOSITY" ]] || SERVER_ARGS+=(--log-verbosity "$LOG_VERBOSITY")
case "${METRICS:-1}" in
    1) SERVER_ARGS+=(--metrics) ;;
    0) ;;
    *) echo "METRICS must be 1 or 0" >&2; exit 2 ;;
esac
PIDFILE="$WORK/llama-server-$PORT.pid"
LOG="$WORK/llama-server-$PORT.log"

log() { printf '[llama_server] %s\n' "$*" >&2; }

py_env() {
    if [[ ! -x "$VENV/bin/pip" ]]; then mkdir -p "$WORK"; "$PY" -m venv "$VENV"; fi
    export PATH="$PATH:$VENV/bin"
}

need_tools() {
    command -v g++ >/dev/null || { log "installing g++"; apt-get update -qq && apt-get install -y -qq g++ make; }
    py_env
    command -v cmake >/dev/null || { log "installing cmake (PyPI wheel)"; "$VENV/bin/pip" install -q cmake; }
    command -v ninja >/dev/null || "$VENV/bin/pip" install -q ninja || true
}

do_build() {
    if [[ -x "$BIN" ]]; then log "already built: $BIN"; return; fi
    need_tools
    mkdir -p "$WORK"
    if [[ ! -d "$SRC" ]]; then
        log "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist (vendors llama.cpp)"
        # --no-binary for this one package only: its build deps (scikit-build-core, cmake) come as wheels.
        "$VENV/bin/pip" download -q --no-deps --no-binary llama-cpp-python \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$WORK/sdist"
        tar -xzf "$WORK/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$WORK"
    fi
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    # LLAMA_USE_PREBUILT_UI=OFF: the default would download the web UI from Hugging Face (unreachable).
    # The server then has no web UI at `/`, which the probe does not use.
    cmake -S "$SRC" -B "$BUILD" "${gen[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_LLGUIDANCE=OFF \
        -DGGML_NATIVE=ON -DGGML_OPENMP=OFF
    log "compiling llama-server with $JOBS jobs (10-20 min on 2 cores)"
    cmake --build "$BUILD" --target llama-server -j "$JOBS"
    "$BIN" --version >&2 || true
}

do_model() {
    if [[ -s "$MODEL" ]]; then log "model exists: $MODEL"; return; fi
    py_env
    "$VENV/bin/python" -c 'import gguf, numpy' 2>/dev/null || "$VENV/bin/pip" install -q gguf numpy
    "$VENV/bin/python" "$HERE/make_tiny_gguf.py" --out "$MODEL" "${MODEL_ARGS[@]}"
}

health() { curl -fsS -m 2 "http://$HOST:$PORT/health" 2>/dev/null; }

wait_ready() {
    local pid="$1"
    for _ in $(seq 1 120); do
        if health >/dev/null; then log "ready on http://$HOST:$PORT (pid $pid, log $LOG)"; echo "$pid"; return 0; fi
        kill -0 "$pid" 2>/dev/null || { log "server exited; see $LOG"; tail -n 30 "$LOG" >&2; return 1; }
        sleep 0.5
    done
    log "not ready after 60 s; see $LOG"; return 1
}

do_start() {
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        log "already running (pid $(cat "$PIDFILE"))"; return
    fi
    [[ -x "$BIN" ]] || do_build
    [[ -s "$MODEL" ]] || do_model
    # -np $SLOTS: one slot by default, like a small single-user deployment; --metrics
    # (METRICS=1): /metrics (llamacpp: prefix); --log-prefix --log-timestamps: each line
    # says when.
    # setsid + nohup: the server survives the shell that started it.
    log "starting $MODEL as $MODEL_ALIAS on $HOST:$PORT, $SLOTS slot(s), $THREADS thread(s) ${SERVER_ARGS[*]}"
    setsid nohup "$BIN" -m "$MODEL" --alias "$MODEL_ALIAS" --host "$HOST" --port "$PORT" \
        -c "$CTX" -np "$SLOTS" -t "$THREADS" --no-webui --log-prefix --log-timestamps \
        "${SERVER_ARGS[@]}" >"$LOG" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    wait_ready "$pid"
}

do_python_start() {
    local venv="$WORK/llama-py-venv"
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
        need_tools
        mkdir -p "$WORK"
        "$PY" -m venv "$venv"
        log "pip install llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION into $venv (compiles llama.cpp, 10-20 min)"
        # Same reason as in do_build: the web UI download from Hugging Face must stay off.
        CMAKE_ARGS="-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
            "$venv/bin/pip" install -q "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION"
    fi
    [[ -s "$MODEL" ]] || do_model
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        log "already running (pid $(cat "$PIDFILE"))"; return
    fi
    setsid nohup "$venv/bin/python" -m llama_cpp.server --model "$MODEL" --model_alias "$MODEL_ALIAS" \
        --host "$HOST" --port "$PORT" --n_ctx "$CTX" --n_threads 2 >"$LOG" 2>&1 < /dev/null &
    local pid=$!
    echo "$pid" >"$PIDFILE"
    # llama-cpp-python has no /health; poll /v1/models instead.
    for _ in $(seq 1 120); do
        if curl -fsS -m 2 -o /dev/null "http://$HOST:$PORT/v1/models" 2>/dev/null; then
            log "ready on http://$HOST:$PORT (pid $pid, log $LOG)"; echo "$pid"; return 0; fi
        kill -0 "$pid" 2>/dev/null || { log "server exited; see $LOG"; tail -n 30 "$LOG" >&2; return 1; }
        sleep 0.5
    done
    log "not ready after 60 s; see $LOG"; return 1
}

do_stop() {
    if [[ -f "$PIDFILE" ]]; then
        local pid; pid="$(cat "$PIDFILE")"
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            # Gone before returning, so that a `start` right after (a restart) binds the
            # port and waits for its own server's /health, not the old one's.
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; log "killed pid $pid: still there 10 s after TERM"; fi
            log "stopped pid $pid"
        fi
        rm -f "$PIDFILE"
    else
        log "no pid file $PIDFILE"
    fi
}

do_status() {
    if [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        echo "pid $(cat "$PIDFILE")"; health || true; echo
    else
        echo "not running"; return 1
    fi
}

case "${1:-all}" in
    all) do_build; do_model; do_start ;;
    build) do_build ;;
    model) do_model ;;
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    python-start) do_python_start ;;
    *) echo "usage: $0 [all|build|model|start|stop|status|python-start]" >&2; exit 2 ;;
esac
