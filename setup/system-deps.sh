#!/usr/bin/env bash
# Debian packages `make setup` (and so `make demo`) needs: Java 17 (the Kafka broker, Spark) and
# Maven (resolves the jars). What only the suite needs is in setup/test-deps.sh (`make setup-test`).
# Installs only what is missing; needs root (or sudo) only then.
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ((${#need[@]})); then
  echo "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
java -version 2>&1 | grep -qE 'version "(17|21)' || { echo "loglake needs Java 17 or 21: $(java -version 2>&1 | head -1)"; exit 1; }
