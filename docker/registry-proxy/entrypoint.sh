#!/bin/sh
# nginx in front of the schema registry (nginx.conf beside this file). `health`: the registry
# answers loglake's login through the front (the password from its secret file, given to curl on
# its standard input, never on a command line).
set -eu
if [ "${1:-}" = health ]; then
  pw=$(cat /run/secrets/registry_loglake_password)
  printf 'user = "loglake:%s"\n' "$pw" | curl -sf -K - --cacert /run/secrets/kafka_ca -o /dev/null \
    https://localhost:8443/apis/ccompat/v7/subjects
  exit
fi
exec nginx -e stderr -c /etc/loglake/registry-proxy/nginx.conf
