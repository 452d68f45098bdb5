#!/usr/bin/env bash
# Debian packages only the suite needs (`make setup-test`, run by loglake.local.fetch): Chromium
# (headless, for the Airflow UI system tests), nginx (the tests' reverse proxy with TLS and a login
# in front of a schema registry), Prometheus (the tests scrape loglake's metrics and evaluate its
# alerting rules with it; without its recommended exporters) and faketime (a process whose clock
# runs ahead of the others', for the lease tests). Installs only what is missing; needs root (or
# sudo) only then.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
updated=""
if ((${#need[@]})); then
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq && updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "installing Debian packages: prometheus"
  [ -n "$updated" ] || $SUDO apt-get update -qq
  # Without its recommended exporters (not wanted, nor started).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
fi
