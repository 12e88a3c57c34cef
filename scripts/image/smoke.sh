#!/bin/sh
# Starts the image built by scripts/image/build.sh, as a container runtime would (its root
# filesystem, its entrypoint, environment and user from the image's own config), and
# checks it works: `--version`, `check` of a probes.yaml, and a short `run` against the
# simulator (started from the same image) until a run succeeded and /metrics shows it.
# Root is needed for chroot; no container engine.
#
#   scripts/image/smoke.sh [OUT]      # OUT as given to build.sh, default target/image
set -eu
cd "$(dirname "$0")/../.."
out=${1:-target/image}
work=$(mktemp -d)
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

umoci unpack --image "$out/oci:latest" "$work/bundle" >/dev/null
rootfs=$work/bundle/rootfs
# rootfs.sh leaves out glibc's gconv modules: right only while nothing calls iconv.
if command -v nm >/dev/null; then
  if nm -D --undefined-only "$rootfs/usr/local/bin/inferprobe" | grep -qw 'iconv\(_open\)\?'; then
    echo "the binary imports iconv, but the image has no gconv modules (scripts/image/rootfs.sh)" >&2
    exit 1
  fi
elif [ "${CI:-}" = true ]; then
  echo "nm (binutils) is needed to check the binary's imports" >&2
  exit 1
fi
# The image's process: entrypoint + command, environment, user (umoci's runtime config).
python3 - "$work/bundle/config.json" > "$work/process" <<'PY'
import json, shlex, sys
p = json.load(open(sys.argv[1]))["process"]
print("uid=%d" % p["user"]["uid"])
print("gid=%d" % p["user"]["gid"])
print("args=%s" % shlex.quote(" ".join(shlex.quote(a) for a in p["args"])))
print("env=%s" % shlex.quote(" ".join(shlex.quote(e) for e in p["env"])))
PY
. "$work/process"
echo "image process: user $uid:$gid, args: $args"
[ "$uid" != 0 ] || { echo "the image runs as root" >&2; exit 1; }

# `in_image CMD...`: CMD inside the image's root, as its user, with only its environment.
# Through `exec`: started with `&`, the subshell becomes the process itself, so the pid in
# `$!` is the one to stop (killing a subshell would leave its child running).
in_image() {
  eval "exec env -i $env chroot --userspec=$uid:$gid \"\$rootfs\" \"\$@\""
}

(in_image /usr/local/bin/inferprobe --version)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sim_port=$(free_port)
agent_port=$(free_port)
cat > "$rootfs/etc/inferprobe/probes.yaml" <<YAML
agent:
  location: image-smoke
  listen: 127.0.0.1:$agent_port
probes:
  - name: chat
    kind: openai_chat
    url: http://127.0.0.1:$sim_port/v1/chat/completions
    model: sim-model
    interval: 1s
    timeout: 900ms
YAML
(in_image /usr/local/bin/inferprobe check -c /etc/inferprobe/probes.yaml)

in_image /usr/local/bin/inferprobe simulate --listen "127.0.0.1:$sim_port" --ttft 20ms > "$work/simulator.log" 2>&1 &
pids="$pids $!"
# The image's own entrypoint and command: `run -c /etc/inferprobe/probes.yaml`.
eval "exec env -i $env chroot --userspec=$uid:$gid \"\$rootfs\" $args" > "$work/agent.log" 2>&1 &
pids="$pids $!"

metrics() { python3 -c "import urllib.request,sys; print(urllib.request.urlopen('http://127.0.0.1:$agent_port/metrics', timeout=2).read().decode())" 2>/dev/null || true; }
i=0
until metrics | grep -q '^inferprobe_runs_total{.*result="success".*} [1-9]'; do
  i=$((i + 1))
  if [ "$i" -gt 60 ]; then
    echo "no successful run within 30 s; the agent's log:" >&2
    cat "$work/agent.log" >&2
    exit 1
  fi
  sleep 0.5
done
metrics | grep '^inferprobe_runs_total'
# The data directory is the image's, written by the non-root user.
owner=$(stat -c %u "$rootfs/var/lib/inferprobe/inferprobe.db" 2>/dev/null || echo none)
[ "$owner" = "$uid" ] || { echo "the store in /var/lib/inferprobe: owner $owner, not $uid" >&2; exit 1; }
echo "image smoke test passed: --version, check, and a run against the simulator inside the image"
