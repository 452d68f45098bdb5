#!/bin/bash
# versitygw serving /data (a bucket per directory) on :7070, single account: its keys are those of
# the AWS shared-credentials file every loglake process reads (the secret s3_credentials,
# [default] aws_access_key_id / aws_secret_access_key). They reach versitygw through its own
# environment only (it starts no other process), never a command line. No WebUI, no admin port.
# `health`: GET /health answers 200.
set -euo pipefail
if [ "${1:-}" = health ]; then
  exec 3<>/dev/tcp/127.0.0.1/7070
  printf 'GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  head -1 <&3 | grep -q ' 200'
  exit
fi
creds=${S3_CREDENTIALS_FILE:-/run/secrets/s3_credentials}
[ -s "$creds" ] || { echo "versitygw: $creds missing" >&2; exit 1; }
key() { sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*//p" "$creds" | head -1 | tr -d '\r'; }
ROOT_ACCESS_KEY=$(key aws_access_key_id) ROOT_SECRET_KEY=$(key aws_secret_access_key)
[ -n "$ROOT_ACCESS_KEY" ] && [ -n "$ROOT_SECRET_KEY" ] || { echo "versitygw: no keys in $creds" >&2; exit 1; }
export ROOT_ACCESS_KEY ROOT_SECRET_KEY
exec versitygw --port :7070 --region "${S3_REGION:-us-east-1}" --health /health --quiet posix /data
