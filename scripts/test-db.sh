#!/usr/bin/env bash
# test-db.sh: bring up the databases onestep's tests run against, idempotently.
#
#   MariaDB      127.0.0.1:3308  a private server run from the system's mariadb-server
#                                binaries (installed with apt-get if missing), its own data
#                                dir; the machine's shared MariaDB (3306) is never changed,
#                                see scripts/lib/test-db-mariadb.sh
#   Oracle MySQL 127.0.0.1:3307  a private server: Debian trixie/sid's mysql-server-core
#                                (9.x), unpacked into a cache folder without installing
#                                anything into the system, see scripts/lib/test-db-mysql.sh
#   PostgreSQL   127.0.0.1:5432  the system's postgresql (installed with apt-get if missing,
#                                cluster created and started with pg_ctlcluster if down),
#                                see scripts/lib/test-db-postgres.sh
#
# MariaDB/MySQL: user root over TCP with an empty password, allowed to CREATE DATABASE,
# CREATE USER and GRANT (tests create their own databases and users). PostgreSQL: users
# postgres and root over loopback TCP without a password (trust), both superusers.
#
# Usage:  scripts/test-db.sh COMMAND [mariadb] [mysql] [postgres]
#   up [SERVER...]       start the servers (default: all three), wait until they answer,
#                        check root over TCP, then print the env lines on stdout:
#                          ONESTEP_TEST_MARIADB_URL=mysql://root@127.0.0.1:3308/
#                          ONESTEP_TEST_MYSQL_URL=mysql://root@127.0.0.1:3307/
#                          ONESTEP_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/
#                        Progress, versions and timings go to stderr. Exit != 0 when
#                        a server cannot be brought up.
#   down [SERVER...]     stop servers. Default: mariadb and mysql (the private servers this
#                        script owns); `down postgres` / `down all` also stop the system
#                        PostgreSQL.
#   restart [SERVER...]  down + up (default: mariadb mysql), e.g. to apply changed options.
#   status [SERVER...]   print state and version; exit 0 if all named are up, else 3.
#   env [SERVER...]      print the env lines only (no checks).
#   client SERVER [ARGS] run a client as root over TCP (mariadb, or the unpacked mysql).
#
# Typical use:
#   set -a; eval "$(scripts/test-db.sh up)"; set +a; cargo test
#
# Environment (all optional): see docs/test-databases.md.
#   ONESTEP_MARIADB_PORT (3308)   ONESTEP_MYSQL_PORT (3307)   ONESTEP_POSTGRES_PORT (5432)
#   ONESTEP_MYSQL_CACHE (/var/cache/onestep-mysql)   ONESTEP_DB_MAX_CONNECTIONS (500)
#   ONESTEP_DB_START_TIMEOUT (180 s)
set -euo pipefail

TESTDB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTDB_HOST=127.0.0.1  # used by the libs
MAX_CONNECTIONS=${ONESTEP_DB_MAX_CONNECTIONS:-500}
START_TIMEOUT=${ONESTEP_DB_START_TIMEOUT:-180}
[[ $MAX_CONNECTIONS =~ ^[0-9]+$ ]] || { echo "[test-db] ONESTEP_DB_MAX_CONNECTIONS must be a number" >&2; exit 2; }
[[ $START_TIMEOUT =~ ^[0-9]+$ ]] || { echo "[test-db] ONESTEP_DB_START_TIMEOUT must be a number" >&2; exit 2; }

log() { printf '[test-db] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# Elapsed wall time since $1 (an EPOCHREALTIME value), e.g. "12.3s".
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# shellcheck source-path=SCRIPTDIR source=lib/test-db-mariadb.sh
. "$TESTDB_DIR/lib/test-db-mariadb.sh"
# shellcheck source-path=SCRIPTDIR source=lib/test-db-mysql.sh
. "$TESTDB_DIR/lib/test-db-mysql.sh"
# shellcheck source-path=SCRIPTDIR source=lib/test-db-postgres.sh
. "$TESTDB_DIR/lib/test-db-postgres.sh"

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"; }

# Sets SERVERS from the arguments (default: $1).
SERVERS=()
parse_servers() {
  local default=$1; shift
  SERVERS=()
  local a
  for a in "$@"; do
    case "$a" in
      mariadb|mysql|postgres) [[ " ${SERVERS[*]-} " == *" $a "* ]] || SERVERS+=("$a") ;;
      all) SERVERS=(mariadb mysql postgres) ;;
      both) SERVERS=(mariadb mysql) ;;
      *) die "unknown server '$a' (mariadb|mysql|postgres|all)" ;;
    esac
  done
  if (( ${#SERVERS[@]} == 0 )); then read -r -a SERVERS <<<"$default"; fi
  return 0
}

env_line() {
  case "$1" in
    mariadb) echo "ONESTEP_TEST_MARIADB_URL=$(mariadb_url)" ;;
    mysql) echo "ONESTEP_TEST_MYSQL_URL=$(mysql_url)" ;;
    postgres) echo "ONESTEP_TEST_POSTGRES_URL=$(postgres_url)" ;;
  esac
}

cmd_up() {
  local t0=$EPOCHREALTIME s t
  local -a lines=()
  for s in "${SERVERS[@]}"; do
    t=$EPOCHREALTIME
    "${s}_up"
    log "$s ready in $(elapsed "$t")"
    lines+=("$(env_line "$s")")
  done
  log "all up (${SERVERS[*]}) in $(elapsed "$t0")"
  printf '%s\n' "${lines[@]}"
}

cmd_down() {
  local s
  for s in "${SERVERS[@]}"; do "${s}_down"; done
}

cmd_status() {
  local s rc=0
  for s in "${SERVERS[@]}"; do "${s}_status" || rc=3; done
  return "$rc"
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    up) parse_servers "mariadb mysql postgres" "$@"; cmd_up ;;
    down) parse_servers "mariadb mysql" "$@"; cmd_down ;;
    restart) parse_servers "mariadb mysql" "$@"; cmd_down; cmd_up ;;
    status) parse_servers "mariadb mysql postgres" "$@"; cmd_status ;;
    env) parse_servers "mariadb mysql postgres" "$@"; local s; for s in "${SERVERS[@]}"; do env_line "$s"; done ;;
    client)
      local s=${1:-}; [[ $# -gt 0 ]] && shift
      case "$s" in
        mariadb) mariadb_client "$@" ;;
        mysql) mysql_client "$@" ;;
        postgres) postgres_psql "$@" ;;
        *) die "usage: $0 client mariadb|mysql|postgres [client args...]" ;;
      esac ;;
    -h|--help|help) usage ;;
    "") usage >&2; exit 2 ;;
    *) usage >&2; die "unknown command '$cmd' (up|down|restart|status|env|client)" ;;
  esac
}

main "$@"
