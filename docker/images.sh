#!/usr/bin/env bash
# Build the images of docker/compose.yaml (BuildKit; unchanged layers come from its cache).
#
#   bash docker/images.sh [IMAGE...]      # default: all of them; IMAGE is a name below, e.g. kafka
#
# Each Dockerfile takes its base as `ARG BASE` (default debian:bookworm-slim, what a user pulls).
# When that image is neither here nor pullable (no registry answers), the base is
# loglake-base:bookworm, made from Debian's packages by docker/base/build-base.sh.
# LOGLAKE_DOCKER_BASE=<image> names another base. A CA bundle (pip's, or the system's) and Java's
# truststore are given to the builds as BuildKit secrets, for HTTPS that a local CA re-signs.
set -euo pipefail
cd "$(dirname "$0")/.."

# BuildKit with --secret: the docker CLI with buildx, else Debian's 20.10 CLI (built-in BuildKit).
docker_bin=${DOCKER:-docker}
if ! "$docker_bin" buildx version >/dev/null 2>&1 && [ -x /usr/bin/docker ]; then docker_bin=/usr/bin/docker; fi
export DOCKER_BUILDKIT=1

public=debian:bookworm-slim
base=${LOGLAKE_DOCKER_BASE:-}
if [ -z "$base" ]; then
  if "$docker_bin" image inspect "$public" >/dev/null 2>&1 || timeout 60 "$docker_bin" pull -q "$public" >/dev/null 2>&1; then
    base=$public
  else
    base=loglake-base:bookworm
    "$docker_bin" image inspect "$base" >/dev/null 2>&1 || { echo "images: $public cannot be pulled; making $base"; bash docker/base/build-base.sh "$base"; }
  fi
fi

secrets=()
ca=${PIP_CERT:-$(.venv/bin/python -m pip config get global.cert 2>/dev/null || true)}
[ -n "$ca" ] || ca=/etc/ssl/certs/ca-certificates.crt
[ -s "$ca" ] && secrets+=(--secret "id=ca,src=$ca")
[ -s /etc/ssl/certs/java/cacerts ] && secrets+=(--secret "id=jks,src=/etc/ssl/certs/java/cacerts")

# name  tag  dockerfile  target
images=(
  "kafka      loglake-kafka:4.4.0        docker/Dockerfile.kafka      -"
  "versitygw  loglake-versitygw:1.8.0    docker/Dockerfile.versitygw  -"
  "statsd-exporter loglake-statsd-exporter:0.31.0 docker/Dockerfile.statsd-exporter -"
  "postgres   loglake-postgres:15        docker/Dockerfile.postgres   -"
  "redis      loglake-redis:7.0          docker/Dockerfile.redis      -"
  "registry-proxy loglake-registry-proxy:1.22 docker/Dockerfile.registry-proxy -"
  "prometheus loglake-prometheus:2.42     docker/Dockerfile.prometheus -"
  "spark      loglake-spark:0.1.0        docker/Dockerfile.loglake    spark"
  "airflow    loglake-airflow:0.1.0      docker/Dockerfile.loglake    airflow"
)
wanted=("$@")
log_dir=${LOGLAKE_CACHE:-$HOME/.cache/loglake}/logs
mkdir -p "$log_dir"
for line in "${images[@]}"; do
  read -r name tag file target <<<"$line"
  if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  args=(build --progress=plain --build-arg "BASE=$base" "${secrets[@]}" -f "$file" -t "$tag")
  [ "$target" = - ] || args+=(--target "$target")
  start=$(date +%s)
  if ! "$docker_bin" "${args[@]}" . >"$log_dir/docker-$name.log" 2>&1; then
    tail -30 "$log_dir/docker-$name.log" >&2
    echo "images: $tag FAILED (log: $log_dir/docker-$name.log)" >&2
    exit 1
  fi
  echo "images: $tag ($(( $(date +%s) - start )) s, base $base)"
done
