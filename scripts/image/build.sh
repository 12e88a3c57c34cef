#!/bin/sh
# Builds the container image offline, as an OCI image layout, from Debian packages and the
# release binary: no Docker engine, no registry. The files come from scripts/image/rootfs.sh
# (which deploy/Dockerfile runs too); the image settings (entrypoint, command, user,
# environment, port, volume, stop signal) are read from deploy/Dockerfile's last stage, so
# the two ways of building give the same image. Needs umoci (`apt-get install umoci`).
#
#   scripts/image/build.sh [OUT]      # OUT defaults to target/image
#
# Leaves OUT/oci (the image, tag `latest`) and prints its size. `docker`/`podman` load it
# with `skopeo copy oci:OUT/oci:latest docker-daemon:inferprobe:latest` or `podman load`.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-target/image}

cargo build --release --locked
rm -rf "$out"
mkdir -p "$out"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:latest"
umoci unpack --image "$out/oci:latest" "$out/bundle"
scripts/image/rootfs.sh "$out/bundle/rootfs" target/release/inferprobe
umoci repack --image "$out/oci:latest" "$out/bundle"

# The settings of deploy/Dockerfile's last stage, as umoci flags.
set -- $(python3 - deploy/Dockerfile <<'PY'
import json, shlex, sys
lines = open(sys.argv[1]).read().split("\n")
last = max(i for i, l in enumerate(lines) if l.startswith("FROM "))
flags = []
for line in lines[last:]:
    word, _, rest = line.partition(" ")
    if word == "ENTRYPOINT":
        flags += [f"--config.entrypoint={a}" for a in json.loads(rest)]
    elif word == "CMD":
        flags += [f"--config.cmd={a}" for a in json.loads(rest)]
    elif word == "USER":
        flags.append(f"--config.user={rest}")
    elif word == "ENV":
        flags += [f"--config.env={kv}" for kv in shlex.split(rest)]
    elif word == "EXPOSE":
        flags += [f"--config.exposedports={p}/tcp" for p in rest.split()]
    elif word == "VOLUME":
        flags += [f"--config.volume={v}" for v in json.loads(rest)]
    elif word == "STOPSIGNAL":
        flags.append(f"--config.stopsignal={rest}")
# Values here have no spaces (checked), so the shell's word splitting keeps each flag whole.
assert all(" " not in f for f in flags), flags
print(" ".join(flags))
PY
)
umoci config --image "$out/oci:latest" --author inferprobe "$@"
umoci gc --layout "$out/oci"
rm -rf "$out/bundle"
echo "image: $out/oci:latest, $(du -sh "$out/oci/blobs" | cut -f1) in its blobs (compressed layer and config)"
