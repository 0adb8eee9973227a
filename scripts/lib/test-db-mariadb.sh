# shellcheck shell=bash
# test-db-mariadb.sh: a private MariaDB for scripts/test-db.sh (sourced, not run).
#
# The tests never use or change the machine's shared MariaDB (127.0.0.1:3306): this starts
# a server of their own from the system's mariadb-server binaries (installed with apt-get
# if /usr/sbin/mariadbd is missing), on its own port (3308), data dir and socket, with the
# settings the tests need (max_connections, utf8mb4) given at start-up, then makes sure that
#   - root@127.0.0.1 logs in over TCP with an empty password (created through the
#     server's own unix socket),
#   - root can CREATE DATABASE / CREATE USER / GRANT (a probe that is dropped again).
#
# Uses from test-db.sh: TESTDB_HOST MAX_CONNECTIONS START_TIMEOUT log die port_open elapsed.

MARIADB_PORT=${ONESTEP_MARIADB_PORT:-3308}
MARIADB_CACHE=${ONESTEP_MARIADB_CACHE:-/var/cache/onestep-mariadb}
# Extra mariadbd options (word-split).
MARIADB_ARGS=${ONESTEP_MARIADB_ARGS:-}
MARIADBD=/usr/sbin/mariadbd
[[ $MARIADB_PORT =~ ^[0-9]+$ ]] || die "ONESTEP_MARIADB_PORT must be a number"
MARIADB_DATADIR=$MARIADB_CACHE/data-$MARIADB_PORT
MARIADB_RUNDIR=$MARIADB_CACHE/run-$MARIADB_PORT
MARIADB_SOCKET=$MARIADB_RUNDIR/mysqld.sock
MARIADB_PIDFILE=$MARIADB_RUNDIR/mysqld.pid
MARIADB_LAUNCHPID=$MARIADB_RUNDIR/launch.pid
MARIADB_ERRLOG=$MARIADB_RUNDIR/mysqld.err

MARIADB_SERVER_ARGS=(
  --skip-name-resolve
  --skip-log-bin
  --character-set-server=utf8mb4
  --collation-server=utf8mb4_general_ci
  --innodb-buffer-pool-size=256M
  --performance-schema=OFF
)

mariadb_url() { echo "mysql://root@$TESTDB_HOST:$MARIADB_PORT/"; }

# The client as root over TCP / over our unix socket; --no-defaults so that no
# ~/.my.cnf (password, other host) changes what is being checked.
mariadb_tcp() {
  mariadb --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MARIADB_PORT" -uroot \
    --connect-timeout=5 --batch --skip-column-names "$@"
}
mariadb_sock() {  # SQL on stdin
  mariadb --no-defaults --protocol=SOCKET -S"$MARIADB_SOCKET" -uroot \
    --connect-timeout=5 --batch --skip-column-names
}
mariadb_client() {
  command -v mariadb >/dev/null || die "mariadb client not installed; run: $0 up mariadb"
  mariadb --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MARIADB_PORT" -uroot "$@"
}

# 0 when a server answers on our TCP port or socket, even if it refuses the login.
mariadb_ping() {
  local admin=mariadb-admin
  command -v mariadb-admin >/dev/null || admin=mysqladmin
  "$admin" --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MARIADB_PORT" \
      --connect-timeout=2 ping >/dev/null 2>&1 ||
    "$admin" --no-defaults --protocol=SOCKET -S"$MARIADB_SOCKET" \
      --connect-timeout=2 ping >/dev/null 2>&1
}

# Prints the pid of our server (the mariadbd whose command line has our data dir), or nothing.
mariadb_pid() {
  local pid f
  for f in "$MARIADB_PIDFILE" "$MARIADB_LAUNCHPID"; do
    [[ -s $f ]] || continue
    pid=$(tr -dc 0-9 <"$f")
    [[ -n $pid && -r /proc/$pid/cmdline ]] || continue
    if tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "--datadir=$MARIADB_DATADIR"; then
      echo "$pid"; return 0
    fi
  done
  return 0
}

mariadb_install() {
  command -v apt-get >/dev/null || die "MariaDB is not installed and there is no apt-get"
  log "mariadb: not installed; apt-get install mariadb-server (its binaries only: the system server is not used)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >&2 ||
    die "apt-get install -y mariadb-server failed"
  [[ -x $MARIADBD ]] || die "$MARIADBD still missing after installing mariadb-server"
}

mariadb_user_args() { MARIADB_USER=(); [[ $(id -u) == 0 ]] && MARIADB_USER=(--user=root); return 0; }

mariadb_init_datadir() {
  if [[ -d $MARIADB_DATADIR ]] && [[ -n $(ls -A "$MARIADB_DATADIR" 2>/dev/null) ]]; then return 0; fi
  local t0=$EPOCHREALTIME tmp=$MARIADB_DATADIR.partial
  rm -rf "$tmp"
  mkdir -p "$tmp" "$MARIADB_RUNDIR"
  log "mariadb: initialising data dir $MARIADB_DATADIR"
  mariadb_user_args
  if ! mariadb-install-db --no-defaults "${MARIADB_USER[@]}" --datadir="$tmp" \
        --auth-root-authentication-method=normal --skip-test-db \
        >"$MARIADB_RUNDIR/init.log" 2>&1; then
    tail -n 30 "$MARIADB_RUNDIR/init.log" >&2 || true
    die "mariadb: mariadb-install-db failed (log: $MARIADB_RUNDIR/init.log)"
  fi
  rmdir "$MARIADB_DATADIR" 2>/dev/null || true
  mv "$tmp" "$MARIADB_DATADIR"
  log "mariadb: data dir initialised in $(elapsed "$t0")"
}

mariadb_start() {
  local -a extra
  read -r -a extra <<<"$MARIADB_ARGS"
  rm -f "$MARIADB_PIDFILE" "$MARIADB_LAUNCHPID"
  mariadb_init_datadir
  mariadb_user_args
  local logoff; logoff=$(stat -c %s "$MARIADB_ERRLOG" 2>/dev/null || echo 0)
  log "mariadb: starting a private mariadbd on $TESTDB_HOST:$MARIADB_PORT (data dir $MARIADB_DATADIR, max_connections=$MAX_CONNECTIONS)"
  # setsid: own session, survives the caller; all output to files, so that
  # "$(scripts/test-db.sh up)" does not wait for mariadbd; fd 7 (the lock) closed.
  # shellcheck disable=SC2016  # $$ and $@ belong to the inner bash
  setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$MARIADB_LAUNCHPID" \
    "$MARIADBD" --no-defaults "${MARIADB_USER[@]}" \
    --datadir="$MARIADB_DATADIR" --port="$MARIADB_PORT" --bind-address="$TESTDB_HOST" \
    --socket="$MARIADB_SOCKET" --pid-file="$MARIADB_PIDFILE" --log-error="$MARIADB_ERRLOG" \
    --max-connections="$MAX_CONNECTIONS" "${MARIADB_SERVER_ARGS[@]}" "${extra[@]}" \
    </dev/null >>"$MARIADB_RUNDIR/mariadbd.out" 2>&1 7>&- &
  local deadline=$((SECONDS + START_TIMEOUT)) lpid=""
  until mariadb_ping; do
    [[ -z $lpid && -s $MARIADB_LAUNCHPID ]] && lpid=$(tr -dc 0-9 <"$MARIADB_LAUNCHPID")
    if [[ -n $lpid ]] && ! kill -0 "$lpid" 2>/dev/null; then
      tail -c "+$((logoff + 1))" "$MARIADB_ERRLOG" 2>/dev/null | tail -n 30 >&2 || true
      die "mariadb: mariadbd exited during start-up (log: $MARIADB_ERRLOG)"
    fi
    ((SECONDS < deadline)) || die "mariadb: mariadbd did not answer within ${START_TIMEOUT}s (log: $MARIADB_ERRLOG)"
    sleep 0.2
  done
}

# root@localhost (from mariadb-install-db) only matches socket connections under
# --skip-name-resolve; TCP clients from 127.0.0.1 need root@127.0.0.1.
mariadb_ensure_tcp_root() {
  mariadb_tcp -e 'SELECT 1' >/dev/null 2>&1 && return 0
  log "mariadb: creating root@$TESTDB_HOST (empty password, all privileges)"
  local err
  err=$(mariadb_sock 2>&1 >/dev/null <<SQL
CREATE USER IF NOT EXISTS 'root'@'$TESTDB_HOST' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'$TESTDB_HOST' WITH GRANT OPTION;
SQL
  ) || die "mariadb: cannot create root@$TESTDB_HOST over the socket $MARIADB_SOCKET: $err"
  err=$(mariadb_tcp -e 'SELECT 1' 2>&1 >/dev/null) ||
    die "mariadb: root@$TESTDB_HOST over TCP with an empty password still fails: $err"
}

# As the tests do: root creates a database and a user 'p'@'%', the user logs in over
# TCP and uses the database; then both are dropped.
mariadb_probe() {
  local p="onestep_probe_$$_$RANDOM" err who
  err=$(mariadb_tcp 2>&1 >/dev/null <<SQL
CREATE DATABASE \`$p\`;
CREATE USER '$p'@'%' IDENTIFIED BY 'Probe-$p';
GRANT ALL PRIVILEGES ON \`$p\`.* TO '$p'@'%';
SQL
  ) || die "mariadb: root cannot CREATE DATABASE / CREATE USER / GRANT: $err"
  who=$(mariadb --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MARIADB_PORT" -u"$p" -p"Probe-$p" \
        --connect-timeout=5 --batch --skip-column-names -D"$p" -e "SELECT CURRENT_USER()" 2>&1) ||
    who="FAILED: $who"
  mariadb_tcp -e "DROP USER '$p'@'%'; DROP DATABASE \`$p\`" >/dev/null 2>&1 || true
  [[ $who == "$p@%" ]] || die "mariadb: a user created by root cannot log in over TCP: $who"
}

mariadb_up() {
  (
    # Serialise concurrent `up`s.
    flock -w "$START_TIMEOUT" 7 || die "mariadb: could not take the lock ${TMPDIR:-/tmp}/onestep-test-db-mariadb.lock"
    if [[ ! -x $MARIADBD ]] || ! command -v mariadb >/dev/null || ! command -v mariadb-install-db >/dev/null; then
      mariadb_install
    fi
    if [[ -n $(mariadb_pid) ]] && mariadb_ping; then
      log "mariadb: already running on $TESTDB_HOST:$MARIADB_PORT"
    else
      port_open "$TESTDB_HOST" "$MARIADB_PORT" &&
        die "mariadb: $TESTDB_HOST:$MARIADB_PORT is in use by a server this script did not start (set ONESTEP_MARIADB_PORT)"
      mariadb_start
    fi
    mariadb_ensure_tcp_root
    local mc
    mc=$(mariadb_tcp -e 'SELECT @@max_connections') || die "mariadb: query failed"
    ((mc >= MAX_CONNECTIONS)) ||
      log "mariadb: WARNING: max_connections is $mc (started with other settings? run: $0 restart mariadb)"
    mariadb_probe
    log "mariadb: up: $(mariadb_tcp -e 'SELECT VERSION()') at $(mariadb_url) (max_connections=$mc)"
  ) 7>"${TMPDIR:-/tmp}/onestep-test-db-mariadb.lock"
}

mariadb_down() {
  local pid; pid=$(mariadb_pid)
  if [[ -z $pid ]]; then
    log "mariadb: not running (the private server on $TESTDB_HOST:$MARIADB_PORT)"
    return 0
  fi
  log "mariadb: stopping the private mariadbd (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 120))
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS < deadline)) || { kill -KILL "$pid" 2>/dev/null || true; break; }
    sleep 0.2
  done
  rm -f "$MARIADB_LAUNCHPID"
  log "mariadb: stopped"
}

mariadb_status() {
  local v
  if v=$(mariadb_tcp -e 'SELECT CONCAT(VERSION(), " max_connections=", @@max_connections)' 2>/dev/null); then
    echo "mariadb: up $v at $(mariadb_url)"
    return 0
  fi
  if command -v mariadb >/dev/null && mariadb_ping; then
    echo "mariadb: answers on $TESTDB_HOST:$MARIADB_PORT but root over TCP fails (run: $0 up mariadb)"
  else
    echo "mariadb: down ($TESTDB_HOST:$MARIADB_PORT)"
  fi
  return 3
}
