#!/bin/sh
# Entrypoint of ordertimeout/patroni:15. The first argument is the role:
#   patroni   a Postgres member managed by Patroni (the default): renders
#             /etc/patroni/patroni.yml from the environment, then runs
#             Patroni as the postgres user (Patroni refuses to run as root)
#   etcd      a member of a static etcd 3.4 cluster, as the etcd user
#   anything else is run as a command (psql, patronictl, sh ...)
# README.md lists the variables of each role and their defaults.
set -eu

# run_as USER CMD...: exec CMD as USER when started as root.
run_as() {
  user=$1; shift
  if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid="$user" --regid="$user" --init-groups "$@"
  fi
  exec "$@"
}

# yaml_str VALUE: VALUE as a single-quoted YAML scalar.
yaml_str() {
  printf "'%s'" "$(printf '%s' "$1" | sed "s/'/''/g")"
}

etcd_member() {
  : "${ETCD_NAME:?ETCD_NAME is required (e.g. etcd-1)}"
  : "${ETCD_INITIAL_CLUSTER:?ETCD_INITIAL_CLUSTER is required (e.g. etcd-1=http://etcd-1:2380,...)}"
  export ETCD_DATA_DIR="${ETCD_DATA_DIR:-/var/lib/etcd/$ETCD_NAME}"
  export ETCD_LISTEN_PEER_URLS="${ETCD_LISTEN_PEER_URLS:-http://0.0.0.0:2380}"
  export ETCD_LISTEN_CLIENT_URLS="${ETCD_LISTEN_CLIENT_URLS:-http://0.0.0.0:2379}"
  export ETCD_INITIAL_ADVERTISE_PEER_URLS="${ETCD_INITIAL_ADVERTISE_PEER_URLS:-http://$ETCD_NAME:2380}"
  export ETCD_ADVERTISE_CLIENT_URLS="${ETCD_ADVERTISE_CLIENT_URLS:-http://$ETCD_NAME:2379}"
  export ETCD_INITIAL_CLUSTER_STATE="${ETCD_INITIAL_CLUSTER_STATE:-new}"
  export ETCD_INITIAL_CLUSTER_TOKEN="${ETCD_INITIAL_CLUSTER_TOKEN:-ordertimeout-pg}"
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$ETCD_DATA_DIR"
    chown -R etcd:etcd "$ETCD_DATA_DIR"
    chmod 700 "$ETCD_DATA_DIR"
  fi
  run_as etcd etcd
}

patroni_member() {
  : "${PATRONI_NAME:?PATRONI_NAME is required (e.g. pg-1)}"
  # A name lookup of a member that just died can wait for the upstream
  # resolver (5 s, twice, by default): a standby's WAL receiver blocked in
  # one, reconnecting to the dead primary, holds its promotion back for as
  # long (seen: 3.5 s of a failover). glibc reads RES_OPTIONS.
  export RES_OPTIONS="${RES_OPTIONS:-timeout:1 attempts:1}"
  scope=${PATRONI_SCOPE:-ordertimeout}
  etcd_hosts=${PATRONI_ETCD3_HOSTS:-etcd-1:2379,etcd-2:2379,etcd-3:2379}
  connect_host=${PATRONI_ADVERTISE:-$PATRONI_NAME}
  su_user=${PATRONI_SUPERUSER_USERNAME:-postgres}
  su_pass=${PATRONI_SUPERUSER_PASSWORD:-postgres}
  repl_user=${PATRONI_REPLICATION_USERNAME:-replicator}
  repl_pass=${PATRONI_REPLICATION_PASSWORD:-replicator}
  rewind_user=${PATRONI_REWIND_USERNAME:-rewind}
  rewind_pass=${PATRONI_REWIND_PASSWORD:-rewind}
  allow=${PATRONI_ALLOW_NETWORK:-0.0.0.0/0}
  data=/var/lib/postgresql/data/pg15
  conf=/etc/patroni/patroni.yml
  bin_dir=/usr/lib/postgresql/15/bin
  # PATRONI_CLOCK_OFFSET (seconds, e.g. +0.25 or -0.4): this member's
  # Postgres runs its wall clock that far from the host's (libfaketime:
  # now(), pg_postmaster_start_time(); the monotonic clock stays the
  # host's), as on a host whose clock is off. Only the postmaster and its
  # backends: Patroni's Python under libfaketime fails its sleeps (EINVAL).
  # Patroni runs bin_dir/postgres, so bin_dir becomes a copy of the real one
  # of links, with postgres a wrapper that preloads the library.
  if [ -n "${PATRONI_CLOCK_OFFSET:-}" ]; then
    lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
    [ -e "$lib" ] || { echo "patroni: PATRONI_CLOCK_OFFSET needs $lib, not in this image" >&2; exit 1; }
    faked=/tmp/pgbin
    rm -rf "$faked" && mkdir -p "$faked"
    for f in "$bin_dir"/*; do ln -s "$f" "$faked/"; done
    rm "$faked/postgres"
    printf '#!/bin/sh\nLD_PRELOAD=%s FAKETIME=%s FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_DISABLE_SHM=1 exec %s/postgres "$@"\n' \
      "$lib" "$PATRONI_CLOCK_OFFSET" "$bin_dir" >"$faked/postgres"
    chmod 755 "$faked/postgres"
    bin_dir=$faked
  fi

  if [ "$(id -u)" = 0 ]; then
    mkdir -p /var/lib/postgresql/data /var/run/postgresql /etc/patroni
    chown postgres:postgres /var/lib/postgresql/data /var/run/postgresql /etc/patroni
    [ -d "$data" ] && chown -R postgres:postgres "$data" && chmod 700 "$data"
  fi

  umask 077
  cat >"$conf" <<YAML
scope: $(yaml_str "$scope")
name: $(yaml_str "$PATRONI_NAME")
log:
  level: ${PATRONI_LOG_LEVEL:-INFO}
restapi:
  listen: 0.0.0.0:8008
  connect_address: $connect_host:8008
etcd3:
  hosts: $(yaml_str "$etcd_hosts")
bootstrap:
  dcs:
    ttl: ${PATRONI_TTL:-6}
    loop_wait: ${PATRONI_LOOP_WAIT:-1}
    retry_timeout: ${PATRONI_RETRY_TIMEOUT:-2}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    # Both standbys synchronous (FIRST 2): a commit waits for the two.
    # The primary streams to both at once, so one can hold WAL the other
    # lacks; Patroni promotes only a synchronous standby, and one that
    # sees another member ahead of it refuses. With a single synchronous
    # standby behind the other, a dead primary was never replaced
    # (TestAFailoverPromotesTheStandbyFurthestAhead). With two, the one
    # furthest ahead is promoted; with one of them lost, Patroni keeps the
    # other alone synchronous.
    synchronous_node_count: ${PATRONI_SYNCHRONOUS_NODE_COUNT:-2}
    # A primary that cannot reach etcd for retry_timeout (its leader
    # elected anew, a member lost) keeps running while every member
    # answers its POST /failsafe, instead of demoting itself: losing
    # etcd's leader failed Postgres over in 1 of 8 kills without it.
    failsafe_mode: true
    postgresql:
      use_pg_rewind: true
      # No replication slots: Patroni 3.0 creates a member's slot on a new
      # primary only after its checkpoint after the promotion, and the
      # synchronous standby, refused for the missing slot, held every
      # commit back 2-3 s longer. A slot would keep WAL only while its
      # member's key lives (ttl); wal_keep_size keeps it for minutes.
      use_slots: false
      parameters:
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_connections: ${PATRONI_MAX_CONNECTIONS:-200}
        max_wal_senders: 10
        max_replication_slots: 10
        # What a standby or former primary away for a while (a restart, a
        # rewind) needs to stream again rather than be reinitialised.
        wal_keep_size: 1GB
        # After a failover a standby's first connection to the new primary
        # can come before it accepts connections; retry after 250 ms rather
        # than the default 5 s, which every commit waits for (strict mode).
        wal_retrieve_retry_interval: 250ms
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - data-checksums
  post_bootstrap: /usr/local/bin/entrypoint.sh post-bootstrap
postgresql:
  listen: 0.0.0.0:5432
  connect_address: $connect_host:5432
  data_dir: $data
  bin_dir: $bin_dir
  pgpass: /tmp/pgpass
  # A new replica's base backup starts with a checkpoint; spread (the
  # default) would make it wait up to checkpoint_timeout.
  basebackup:
    - checkpoint: fast
  authentication:
    superuser:
      username: $(yaml_str "$su_user")
      password: $(yaml_str "$su_pass")
    replication:
      username: $(yaml_str "$repl_user")
      password: $(yaml_str "$repl_pass")
    rewind:
      username: $(yaml_str "$rewind_user")
      password: $(yaml_str "$rewind_pass")
  pg_hba:
    - local all all trust
    - host replication $repl_user 127.0.0.1/32 scram-sha-256
    - host replication $repl_user $allow scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
    - host all all $allow scram-sha-256
  parameters:
    unix_socket_directories: /var/run/postgresql
    password_encryption: scram-sha-256
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
YAML
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$conf"
  run_as postgres patroni "$conf"
}

# post_bootstrap CONNSTRING: run by Patroni once, on the first primary,
# after initdb; creates the databases named in POSTGRES_DATABASES.
post_bootstrap() {
  for db in ${POSTGRES_DATABASES:-orders timeouts}; do
    echo "patroni: creating database $db"
    psql -v ON_ERROR_STOP=1 -q "$1" -c "CREATE DATABASE \"$db\""
  done
}

case "${1:-patroni}" in
  patroni) patroni_member ;;
  etcd) etcd_member ;;
  post-bootstrap) post_bootstrap "$2" ;;
  *) exec "$@" ;;
esac
