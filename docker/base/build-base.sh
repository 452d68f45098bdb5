#!/usr/bin/env bash
# The stack's base image when no image registry answers: a trimmed Debian bookworm made
# from Debian's own packages (debootstrap --variant=minbase), imported as loglake-base:bookworm.
# Every Dockerfile takes its base as `ARG BASE` whose default is the public image a user pulls
# (debian:bookworm-slim); docker/images.sh passes --build-arg BASE=loglake-base:bookworm when
# that one cannot be pulled. Like debian:bookworm-slim it has the security and updates suites,
# no apt lists and no downloaded .debs, and an apt configuration that keeps none after installs.
#
#   bash docker/base/build-base.sh [TAG]        # needs root, debootstrap and a running dockerd
set -euo pipefail
tag=${1:-loglake-base:bookworm}
suite=bookworm
# The mirror the machine's own apt uses (deb822 or one-line sources), else Debian's CDN.
mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | grep -v security | head -1 | awk '{print $2}' || true)
mirror=${mirror:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security
command -v debootstrap >/dev/null || { echo "build-base: debootstrap missing (bash setup/docker-deps.sh)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "build-base: debootstrap needs root" >&2; exit 1; }

root=$(mktemp -d /tmp/loglake-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

cat > "$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES
# As Debian's official images: no .debs nor package caches kept after an install.
cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
cat > "$root/etc/apt/apt.conf.d/docker-no-languages" <<'APT'
Acquire::Languages "none";
APT
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/log/* "$root"/tmp/* "$root"/root/.bash_history
# Host-specific files debootstrap copied in: Docker provides its own at run time.
: > "$root/etc/resolv.conf"; : > "$root/etc/hostname"
tar --numeric-owner -C "$root" -c . | docker import \
  -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' -m "debootstrap --variant=minbase $suite $mirror" - "$tag" >/dev/null
echo "built $tag"
