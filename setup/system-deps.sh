#!/usr/bin/env bash
# Debian packages loglake needs: Java 17 (Kafka broker, Spark), Maven (resolves jars),
# Chromium (headless, for the Airflow UI system tests), nginx (the tests' reverse proxy with
# TLS and a login in front of a schema registry) and Prometheus (the tests scrape loglake's
# metrics and evaluate its alerting rules with it; without its recommended exporters).
# Installs only what is missing; needs root (or sudo) only then.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#need[@]})); then
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
if ! command -v prometheus >/dev/null 2>&1; then
  echo "installing Debian packages: prometheus"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
fi
java -version 2>&1 | grep -qE 'version "(17|21)' || { echo "loglake needs Java 17 or 21: $(java -version 2>&1 | head -1)"; exit 1; }
