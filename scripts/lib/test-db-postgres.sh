# shellcheck shell=bash
# test-db-postgres.sh: the PostgreSQL part of scripts/test-db.sh (sourced; uses log, die,
# port_open, TESTDB_HOST, START_TIMEOUT, MAX_CONNECTIONS).
#
# Installs Debian's `postgresql` with apt-get if no server binary is present, creates the
# cluster if there is none (pg_createcluster), starts it with pg_ctlcluster if it is down,
# and makes sure 127.0.0.1 accepts the users `postgres` and `root` without a password (trust
# for loopback TCP only, written to the cluster's pg_hba.conf and reloaded) and that `root`
# may create databases. Idempotent; serialised with a lock file.

PG_PORT=${ONESTEP_POSTGRES_PORT:-5432}

postgres_url() { echo "postgres://postgres@$TESTDB_HOST:$PG_PORT/"; }

postgres_psql() { PGCONNECT_TIMEOUT=5 psql -X -q -v ON_ERROR_STOP=1 -h "$TESTDB_HOST" -p "$PG_PORT" -U postgres -d postgres -At "$@"; }

postgres_ping() { command -v pg_isready >/dev/null && pg_isready -q -h "$TESTDB_HOST" -p "$PG_PORT" -t 2; }

# The newest installed major version with a server binary, or empty.
postgres_version() {
  local d v=""
  for d in /usr/lib/postgresql/*/bin/postgres; do
    [[ -x $d ]] || continue
    v=$(basename "$(dirname "$(dirname "$d")")")
  done
  echo "$v"
}

postgres_install() {
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and there is no apt-get"
  log "postgres: not installed; apt-get install postgresql"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 ||
    die "apt-get install -y postgresql failed"
}

# The cluster of version $1 on PG_PORT ("<version> <name>"), or empty.
postgres_cluster() {
  pg_lsclusters -h 2>/dev/null | awk -v v="$1" -v p="$PG_PORT" '$1 == v && $3 == p {print $1, $2; exit}'
}

# Trust for the loopback address (tests only), placed before any other rule.
postgres_ensure_hba() {
  local ver=$1 name=$2 hba="/etc/postgresql/$1/$2/pg_hba.conf"
  [[ -f $hba ]] || die "postgres: $hba not found"
  if ! grep -qE '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
    log "postgres: adding 'host all all 127.0.0.1/32 trust' to $hba (loopback only)"
    local tmp; tmp=$(mktemp)
    { echo "host all all 127.0.0.1/32 trust  # onestep tests (scripts/test-db.sh)"; cat "$hba"; } >"$tmp"
    cat "$tmp" >"$hba"; rm -f "$tmp"
    if postgres_ping; then pg_ctlcluster "$ver" "$name" reload >&2 || die "postgres: reload failed"; fi
  fi
}

postgres_up() {
  (
    flock -w "$START_TIMEOUT" 8 || die "postgres: could not take the lock ${TMPDIR:-/tmp}/onestep-test-db-postgres.lock"
    local ver; ver=$(postgres_version)
    if [[ -z $ver ]] || ! command -v psql >/dev/null; then postgres_install; ver=$(postgres_version); fi
    [[ -n $ver ]] || die "postgres: no server binary after installing"
    local cluster; cluster=$(postgres_cluster "$ver")
    if [[ -z $cluster ]]; then
      port_open "$TESTDB_HOST" "$PG_PORT" && ! postgres_ping &&
        die "postgres: $TESTDB_HOST:$PG_PORT is in use by something that is not PostgreSQL"
      log "postgres: creating cluster $ver/main on port $PG_PORT"
      pg_createcluster "$ver" main -p "$PG_PORT" >&2 || die "postgres: pg_createcluster failed"
      cluster=$(postgres_cluster "$ver")
    fi
    local name=${cluster#* }
    postgres_ensure_hba "$ver" "$name"
    if ! postgres_ping; then
      log "postgres: starting cluster $ver/$name"
      pg_ctlcluster "$ver" "$name" start >&2 || die "postgres: pg_ctlcluster $ver $name start failed (see /var/log/postgresql/)"
      local deadline=$((SECONDS + START_TIMEOUT))
      until postgres_ping; do
        ((SECONDS < deadline)) || die "postgres: did not answer within ${START_TIMEOUT}s"
        sleep 0.3
      done
    else
      log "postgres: already running on $TESTDB_HOST:$PG_PORT"
    fi
    postgres_psql -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'root') THEN CREATE ROLE root LOGIN SUPERUSER; END IF; END \$\$" ||
      die "postgres: cannot connect as postgres over TCP, or cannot create role root"
    local mc; mc=$(postgres_psql -c 'SHOW max_connections')
    ((mc >= 100)) || log "postgres: WARNING: max_connections is only $mc"
    postgres_psql -c 'CREATE DATABASE onestep_probe_db' >/dev/null 2>&1 || true
    postgres_psql -c 'DROP DATABASE IF EXISTS onestep_probe_db' || die "postgres: cannot create and drop a database"
    log "postgres: up: $(postgres_psql -c 'SHOW server_version') at $(postgres_url) (max_connections=$mc)"
  ) 8>"${TMPDIR:-/tmp}/onestep-test-db-postgres.lock"
}

postgres_down() {
  local ver cluster; ver=$(postgres_version)
  cluster=$([[ -n $ver ]] && postgres_cluster "$ver")
  if [[ -z ${cluster:-} ]] || ! postgres_ping; then log "postgres: not running"; return 0; fi
  log "postgres: stopping cluster $cluster"
  # shellcheck disable=SC2086
  pg_ctlcluster $cluster stop >&2 || die "postgres: could not stop $cluster"
}

postgres_status() {
  local v
  if v=$(postgres_psql -c "SELECT current_setting('server_version') || ' max_connections=' || current_setting('max_connections')" 2>/dev/null); then
    echo "postgres: up $v at $(postgres_url)"
    return 0
  fi
  echo "postgres: down ($TESTDB_HOST:$PG_PORT)"
  return 3
}
