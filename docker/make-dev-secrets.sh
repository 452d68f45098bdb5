#!/usr/bin/env bash
# For trying docker/compose.yaml on one machine: every file of docker/secrets/ that is missing
# (secrets/README.md says what each is): a throwaway CA and the brokers' certificate signed by it,
# random passwords and keys, and the files derived from them. Files already there are kept, so
# running it again changes nothing; delete a file (and the volumes: make compose-down VOLUMES=1)
# to make it anew. Real hosts bring their own CA and passwords. Needs openssl and python3.
set -euo pipefail
cd "$(dirname "$0")/secrets"
chmod 700 .
umask 022
made=()
rand() { openssl rand -hex "${1:-24}" | tr -d '\n'; }
# put FILE CONTENT: write FILE (no trailing newline) unless it exists.
put() { [ -e "$1" ] && return 0; printf '%s' "$2" > "$1.tmp" && mv "$1.tmp" "$1"; made+=("$1"); }

# The CA's key is thrown away once it signed: the brokers' and the registry's certificates are
# made together (a missing one makes the CA and both anew).
if [ ! -e kafka_ca.pem ] || [ ! -e kafka.p12 ] || [ ! -e kafka_keystore_password ] || [ ! -e registry_tls.crt ] \
   || [ ! -e registry_tls.key ]; then
  rm -f kafka_ca.pem kafka.p12 kafka_keystore_password registry_tls.crt registry_tls.key
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=loglake dev CA" \
    -keyout "$work/ca.key" -out kafka_ca.pem 2>/dev/null
  openssl req -newkey rsa:3072 -nodes -subj "/CN=kafka" -keyout "$work/kafka.key" -out "$work/kafka.csr" 2>/dev/null
  # The names clients reach the brokers by: on the compose network, and localhost from the host.
  printf 'subjectAltName=DNS:kafka-1,DNS:kafka-2,DNS:kafka-3,DNS:localhost,IP:127.0.0.1\n' > "$work/san.ext"
  openssl x509 -req -in "$work/kafka.csr" -CA kafka_ca.pem -CAkey "$work/ca.key" -CAcreateserial \
    -CAserial "$work/ca.srl" -days 825 -extfile "$work/san.ext" -out "$work/kafka.crt" 2>/dev/null
  rand > kafka_keystore_password
  openssl pkcs12 -export -in "$work/kafka.crt" -inkey "$work/kafka.key" -certfile kafka_ca.pem -name kafka \
    -passout file:kafka_keystore_password -out kafka.p12
  # The registry's front (nginx, docker/registry-proxy): its name on the compose network.
  openssl req -newkey rsa:3072 -nodes -subj "/CN=schema-registry" -keyout registry_tls.key -out "$work/registry.csr" 2>/dev/null
  printf 'subjectAltName=DNS:schema-registry,DNS:localhost,IP:127.0.0.1\n' > "$work/registry-san.ext"
  openssl x509 -req -in "$work/registry.csr" -CA kafka_ca.pem -CAkey "$work/ca.key" -CAserial "$work/ca.srl" \
    -days 825 -extfile "$work/registry-san.ext" -out registry_tls.crt 2>/dev/null
  made+=(kafka_ca.pem kafka.p12 kafka_keystore_password registry_tls.crt registry_tls.key)
fi
for f in kafka_broker_password kafka_controller_password kafka_admin_password kafka_loglake_password \
         kafka_guest_password ; do put "$f" "$(rand)"; done

# The registry's one user (nginx's basic auth: the htpasswd holds the same password).
put registry_loglake_password "$(rand)"
put registry_htpasswd "$(printf 'loglake:{PLAIN}%s\n' "$(cat registry_loglake_password)")"

put s3_credentials "$(printf '[default]\naws_access_key_id = loglake-%s\naws_secret_access_key = %s\n' "$(rand 6)" "$(rand 24)")"
put spark-defaults.conf "$(printf '# Spark RPC authentication (master, workers, every spark-submit).\nspark.authenticate true\nspark.authenticate.secret %s\n' "$(rand 32)")"

put postgres_password "$(rand)"
put redis_password "$(rand)"
pg=$(cat postgres_password) redis=$(cat redis_password)
put airflow_db_url "postgresql+psycopg2://airflow:$pg@postgres:5432/airflow"
put airflow_result_backend "db+postgresql+psycopg2://airflow:$pg@postgres:5432/airflow"
put airflow_broker_url "redis://:$redis@redis:6379/0"
put airflow_jwt_secret "$(rand 32)"
put airflow_api_secret_key "$(rand 32)"
put airflow_fernet_key "$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '\n')"
put airflow_users.json "$(python3 -c '
import json, secrets
print(json.dumps({name: {"role": role, "password": secrets.token_hex(16)}
                  for name, role in (("admin", "Admin"), ("operator", "Op"), ("viewer", "Viewer"))}, indent=1))')"

# The containers run as other users than yours; this folder (0700) keeps the files from others here.
chmod 644 ./*
if ((${#made[@]})); then echo "docker/secrets: made ${made[*]}"; else echo "docker/secrets: all there"; fi
