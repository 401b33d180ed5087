#!/bin/sh
# TLS for Postgres (docs/OPERATIONS.md, "TLS"), run at the first start of an
# empty data volume like every file here, and by hand to turn TLS on for an
# existing one (docker compose exec -u postgres postgres sh
# /docker-entrypoint-initdb.d/20-tls.sh). Off unless the postgres container's
# environment names the server's certificate and key:
#   POSTGRES_TLS_CERT_FILE  the certificate chain (PEM), e.g. /tls/server.crt
#   POSTGRES_TLS_KEY_FILE   its key (PEM), readable by the postgres user
# It copies both into the data directory (the key 0600 and owned by postgres,
# as Postgres requires), turns ssl on, and replaces pg_hba.conf so that a
# TCP client must use TLS and one in plaintext is refused (hostnossl
# reject); clients then connect with sslmode=verify-full&sslrootcert=<CA>.
# Local (Unix socket) connections stay as they were.
set -eu
[ -n "${POSTGRES_TLS_CERT_FILE:-}" ] || exit 0
: "${POSTGRES_TLS_KEY_FILE:?is required with POSTGRES_TLS_CERT_FILE}"
install -m 0644 "$POSTGRES_TLS_CERT_FILE" "$PGDATA/server.crt"
install -m 0600 "$POSTGRES_TLS_KEY_FILE" "$PGDATA/server.key"
cat >"$PGDATA/pg_hba.conf" <<'HBA'
# TYPE    DATABASE  USER  ADDRESS  METHOD   (written by 20-tls.sh)
local     all       all            trust
hostnossl all       all   all      reject
hostssl   all       all   all      scram-sha-256
HBA
psql -X -q -v ON_ERROR_STOP=1 -d postgres <<'SQL'
ALTER SYSTEM SET ssl = on;
ALTER SYSTEM SET ssl_cert_file = 'server.crt';
ALTER SYSTEM SET ssl_key_file = 'server.key';
ALTER SYSTEM SET ssl_min_protocol_version = 'TLSv1.2';
SELECT pg_reload_conf();
SQL
echo "postgres: TLS on, plaintext TCP connections refused"
