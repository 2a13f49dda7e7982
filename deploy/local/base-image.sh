#!/bin/sh
# Makes the Debian bookworm base image the local images build FROM, where no registry serves one:
# a minimal root filesystem from Debian's own packages (debootstrap, 1-3 min), imported into the engine.
# Usage: deploy/local/base-image.sh [image]   (engine: $CONTAINER_ENGINE, default podman; run as root)
# Does nothing when the image exists already.
set -eu
engine=${CONTAINER_ENGINE:-podman}
image=${1:-localhost/srm-debian:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if "$engine" image inspect "$image" >/dev/null 2>&1; then
  echo "$image exists"
  exit 0
fi
root=$(mktemp -d "${TMPDIR:-/tmp}/srm-debian.XXXXXX")
trap 'rm -rf "$root"' EXIT INT TERM
debootstrap --variant=minbase bookworm "$root" "$mirror"
cat > "$root/etc/apt/sources.list" <<SOURCES
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} bookworm-security main
SOURCES
# The certificate authorities this machine adds to Debian's (a TLS-inspecting proxy's, say): images that
# install ca-certificates then trust them too, so pip and Maven reach PyPI and Maven Central as here.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | "$engine" import --change 'CMD ["/bin/bash"]' - "$image"
echo "$image imported"
