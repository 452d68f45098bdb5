#!/usr/bin/env bash
# What the docker/ stack needs on this host (make compose-up, make images; not make setup, so the
# suite needs no Docker): a Docker engine (Debian's docker.io) running, and debootstrap (the base
# image when no image registry answers: docker/base/build-base.sh). Compose v2 is built by
# docker/build-compose.py when the docker CLI lacks it. Installs only what is missing; needs
# root (or sudo) only then. Starts dockerd when none answers and this runs as root (a host with
# systemd starts it itself).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
[ -x /usr/sbin/dockerd ] || command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if ((${#need[@]})); then
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
docker=$(command -v docker || echo /usr/bin/docker)
if ! "$docker" info >/dev/null 2>&1; then
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    $SUDO systemctl start docker
  elif [ "$(id -u)" -eq 0 ]; then
    echo "starting dockerd (log: /var/log/loglake-dockerd.log)"
    nohup "$(command -v dockerd || echo /usr/sbin/dockerd)" >/var/log/loglake-dockerd.log 2>&1 &
  else
    echo "no Docker engine answers: start dockerd (as root) and run this again" >&2; exit 1
  fi
  for _ in $(seq 60); do "$docker" info >/dev/null 2>&1 && break; sleep 1; done
  "$docker" info >/dev/null 2>&1 || { echo "dockerd did not answer within 60 s (/var/log/loglake-dockerd.log)" >&2; exit 1; }
fi
