#!/bin/sh
# First start (empty volume): a cluster whose superuser is airflow, with the password of the
# secret postgres_password (read from the file by initdb, never on a command line), the database
# airflow, and SCRAM on every network connection. Then the server, in the foreground.
set -eu
pwfile=/run/secrets/postgres_password
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -s "$pwfile" ] || { echo "postgres: $pwfile missing" >&2; exit 1; }
  initdb -D "$PGDATA" -U airflow --pwfile="$pwfile" --auth-local=peer --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >/dev/null
  # The socket inside the container: the postgres OS user (this entrypoint) only, as airflow.
  printf 'local all airflow peer map=self\nhost all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n' \
    > "$PGDATA/pg_hba.conf"
  printf 'self postgres airflow\n' > "$PGDATA/pg_ident.conf"
  echo "CREATE DATABASE airflow OWNER airflow;" | postgres --single -D "$PGDATA" -j template1 >/dev/null
  echo "postgres: initialised $PGDATA"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c password_encryption=scram-sha-256
