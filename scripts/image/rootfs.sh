#!/bin/sh
# The image's root filesystem, from Debian packages and the release binary. Both ways of
# building the image use this one script, so they hold the same files:
#   - deploy/Dockerfile runs it in a `debian:bookworm` stage and copies the result into
#     an empty (`scratch`) image;
#   - scripts/image/build.sh runs it on a Debian host and packs the result as an OCI image
#     with umoci, with no Docker engine and no registry (what CI does).
#
#   scripts/image/rootfs.sh ROOTFS BINARY
#
# What goes in: the dynamic loader and C library the binary links (libc6, libgcc-s1), the
# CA certificates (one bundle, where rustls-native-certs looks), a passwd/group with the
# non-root user 65532 (`nonroot`, as in distroless), an empty data directory it owns, and
# the binary. No shell, no package manager: nothing to run but inferprobe.
set -eu
rootfs=$1
binary=$2
packages="libc6 libgcc-s1 ca-certificates"

mkdir -p "$rootfs"
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
# As root, apt would hand the download to its _apt user, who cannot write here.
(cd "$debs" && apt-get -o APT::Sandbox::User=root download $packages >/dev/null)
for deb in "$debs"/*.deb; do
  dpkg-deb -x "$deb" "$rootfs"
done
# Documentation and maintainer scripts' leftovers are not needed to run.
rm -rf "$rootfs/usr/share/doc" "$rootfs/usr/share/lintian" "$rootfs/usr/share/man" \
  "$rootfs/usr/sbin/update-ca-certificates" "$rootfs/etc/ca-certificates.conf"
# glibc's character-set converters (7.7 MiB of the 12.7 MiB Debian part) are loaded only
# by iconv(3), which the binary does not call: smoke.sh checks its dynamic imports.
rm -rf "$rootfs"/usr/lib/*-linux-gnu/gconv

# The bundle update-ca-certificates would write (the package's postinst, not run here).
mkdir -p "$rootfs/etc/ssl/certs"
cat "$rootfs"/usr/share/ca-certificates/mozilla/*.crt > "$rootfs/etc/ssl/certs/ca-certificates.crt"

printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  > "$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$rootfs/etc/group"
mkdir -p "$rootfs/home/nonroot" "$rootfs/tmp" "$rootfs/var/lib/inferprobe" "$rootfs/etc/inferprobe"
chown 65532:65532 "$rootfs/home/nonroot" "$rootfs/var/lib/inferprobe"
chmod 1777 "$rootfs/tmp"

install -D -m 0755 "$binary" "$rootfs/usr/local/bin/inferprobe"
