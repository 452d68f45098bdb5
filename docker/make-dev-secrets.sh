#!/usr/bin/env bash
# For trying docker/compose.yaml: a throwaway CA, the brokers' certificate signed by it and
# an Airflow admin password, in docker/secrets/. Real hosts use their own CA (secrets/README.md).
# Needs openssl. Refuses to overwrite: delete the files to make new ones.
set -euo pipefail
cd "$(dirname "$0")/secrets"
for f in kafka.p12 kafka_keystore_password kafka_ca.pem airflow_passwords.json; do
  [ ! -e "$f" ] || { echo "docker/secrets/$f exists; delete it to make a new one" >&2; exit 1; }
done
chmod 700 .
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

openssl req -x509 -newkey rsa:3072 -nodes -days 825 -subj "/CN=loglake dev CA" \
  -keyout "$work/ca.key" -out kafka_ca.pem 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=kafka" -keyout "$work/kafka.key" -out "$work/kafka.csr" 2>/dev/null
printf 'subjectAltName=DNS:kafka-1,DNS:kafka-2,DNS:kafka-3\n' > "$work/san.ext"
openssl x509 -req -in "$work/kafka.csr" -CA kafka_ca.pem -CAkey "$work/ca.key" -CAserial "$work/ca.srl" -CAcreateserial \
  -days 825 -extfile "$work/san.ext" -out "$work/kafka.crt" 2>/dev/null
openssl rand -hex 24 | tr -d '\n' > kafka_keystore_password
openssl pkcs12 -export -in "$work/kafka.crt" -inkey "$work/kafka.key" -certfile kafka_ca.pem -name kafka \
  -passout file:kafka_keystore_password -out kafka.p12
printf '{"admin": "%s"}\n' "$(openssl rand -hex 16)" > airflow_passwords.json
chmod 644 kafka.p12 kafka_keystore_password kafka_ca.pem airflow_passwords.json
echo "made docker/secrets/{kafka.p12,kafka_keystore_password,kafka_ca.pem,airflow_passwords.json}"
[ -e aws_dynamodb_credentials ] || echo "still missing: docker/secrets/aws_dynamodb_credentials (see its README.md)"
