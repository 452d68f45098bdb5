#!/bin/sh
# redis-server with its configuration on standard input (`redis-server -`): the password of the
# secret redis_password is never on a command line nor in the environment. `health`: PING answered.
set -eu
pwfile=/run/secrets/redis_password
[ -s "$pwfile" ] || { echo "redis: $pwfile missing" >&2; exit 1; }
if [ "${1:-}" = health ]; then
  REDISCLI_AUTH=$(cat "$pwfile") redis-cli -h 127.0.0.1 ping | grep -q PONG
  exit
fi
# Celery needs none of the commands renamed away here.
exec redis-server - <<CONF
bind 0.0.0.0 -::*
port 6379
dir /data
appendonly yes
protected-mode yes
requirepass $(cat "$pwfile")
rename-command FLUSHALL ""
rename-command FLUSHDB ""
rename-command DEBUG ""
CONF
