#!/usr/bin/env bash
# Make sure the PostgreSQL server the Postgres store tests use answers on 127.0.0.1:5432.
# Starts the local Debian cluster when it is down, then waits (at most 30 s) until it is ready.
# Exits non-zero with a message saying what to do when it can't.
set -euo pipefail

HOST=127.0.0.1
PORT=5432
WAIT_S=30

ready() { pg_isready -q -h "$HOST" -p "$PORT"; }

if ! command -v pg_isready >/dev/null 2>&1; then
  echo "ensure_postgres: pg_isready not found; install the PostgreSQL client tools" \
    "(apt-get install postgresql-client) or start a server on $HOST:$PORT yourself" >&2
  exit 2
fi

if ready; then
  echo "ensure_postgres: PostgreSQL is ready on $HOST:$PORT"
  exit 0
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ ! -d /etc/postgresql ]; then
  echo "ensure_postgres: nothing answers on $HOST:$PORT and no local cluster to start" \
    "(pg_ctlcluster or /etc/postgresql missing); start PostgreSQL on $HOST:$PORT" >&2
  exit 1
fi

versions=(/etc/postgresql/*)
if [ "${#versions[@]}" -ne 1 ] || [ ! -d "${versions[0]}/main" ]; then
  echo "ensure_postgres: expected exactly one cluster at /etc/postgresql/<version>/main," \
    "found: ${versions[*]}; start the right one with pg_ctlcluster <version> main start" >&2
  exit 1
fi
version=$(basename "${versions[0]}")

echo "ensure_postgres: starting PostgreSQL $version (cluster main)"
if ! pg_ctlcluster --skip-systemctl-redirect "$version" main start; then
  # "already running" is not a failure: the wait below decides.
  echo "ensure_postgres: pg_ctlcluster start returned non-zero; waiting for readiness anyway" >&2
fi

for _ in $(seq 1 "$WAIT_S"); do
  if ready; then
    echo "ensure_postgres: PostgreSQL is ready on $HOST:$PORT"
    exit 0
  fi
  sleep 1
done

echo "ensure_postgres: PostgreSQL did not become ready on $HOST:$PORT within ${WAIT_S}s;" \
  "see /var/log/postgresql/postgresql-$version-main.log" >&2
exit 1
