#!/bin/sh
# Entrypoint of the project's Postgres image (Debian's postgresql-15), with
# the environment of the official image: POSTGRES_PASSWORD (required),
# POSTGRES_USER (default postgres), POSTGRES_DB (default: the user), PGDATA.
# Like the official image, at first initialisation it runs the files of
# /docker-entrypoint-initdb.d in name order: *.sql through psql and *.sh
# with sh, against a temporary server that listens on the Unix socket only
# (so a TCP health probe does not see it), then stops that server.
# Extra arguments go to postgres, e.g. -c fsync=off.
set -eu
PGBIN=/usr/lib/postgresql/15/bin
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
INITDIR=/docker-entrypoint-initdb.d

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

# run_initdb_scripts runs the init files against a temporary local server.
run_initdb_scripts() {
  set -- "$INITDIR"/*.sql "$INITDIR"/*.sh
  case "$*" in *"$INITDIR/*.sql $INITDIR/*.sh"*) return 0 ;; esac
  "$PGBIN/pg_ctl" -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" start >/dev/null
  for f in "$INITDIR"/*; do
    [ -f "$f" ] || continue
    case "$f" in
      *.sql) echo "postgres: running $f"
        psql -v ON_ERROR_STOP=1 -h /var/run/postgresql -U "$POSTGRES_USER" -d "$POSTGRES_DB" -q -f "$f" ;;
      *.sh) echo "postgres: running $f"
        PGHOST=/var/run/postgresql PGUSER="$POSTGRES_USER" PGDATABASE="$POSTGRES_DB" sh "$f" ;;
      *) echo "postgres: ignoring $f" ;;
    esac
  done
  "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres: POSTGRES_PASSWORD is required" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  "$PGBIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.auto.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" |
      "$PGBIN/postgres" --single -D "$PGDATA" -j postgres >/dev/null
  fi
  run_initdb_scripts
  echo "postgres: initialized $PGDATA"
fi
exec "$PGBIN/postgres" -D "$PGDATA" "$@"
