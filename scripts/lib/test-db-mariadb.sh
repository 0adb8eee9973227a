# shellcheck shell=bash
# test-db-mariadb.sh: the system MariaDB for scripts/test-db.sh (sourced, not run).
#
# Installs mariadb-server with apt-get if /usr/sbin/mariadbd is missing, starts the
# server with start-stop-daemon if nothing answers, then makes sure that
#   - root@127.0.0.1 logs in over TCP with an empty password (created through the
#     unix socket, where the OS user root is MariaDB's root, if it does not),
#   - max_connections >= ONESTEP_DB_MAX_CONNECTIONS (SET GLOBAL at run time),
#   - root can CREATE DATABASE / CREATE USER / GRANT (a probe that is dropped again).
#
# Uses from test-db.sh: TESTDB_HOST MAX_CONNECTIONS START_TIMEOUT log die port_open.

MARIADB_PORT=${ONESTEP_MARIADB_PORT:-3306}
MARIADB_SOCKET=${ONESTEP_MARIADB_SOCKET:-/run/mysqld/mysqld.sock}
MARIADB_PIDFILE=${ONESTEP_MARIADB_PIDFILE:-/run/mysqld/mysqld.pid}
# Extra mariadbd options, only used when this script starts the server (word-split).
MARIADB_ARGS=${ONESTEP_MARIADB_ARGS:-}
MARIADBD=/usr/sbin/mariadbd
[[ $MARIADB_PORT =~ ^[0-9]+$ ]] || die "ONESTEP_MARIADB_PORT must be a number"

mariadb_url() { echo "mysql://root@$TESTDB_HOST:$MARIADB_PORT/"; }

# The client as root over TCP / over the unix socket; --no-defaults so that no
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

# 0 when a server answers on the TCP port or on the socket, even if it refuses the
# login (mariadb-admin ping exits 0 on "Access denied").
mariadb_ping() {
  local admin=mariadb-admin
  command -v mariadb-admin >/dev/null || admin=mysqladmin
  "$admin" --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MARIADB_PORT" \
      --connect-timeout=2 ping >/dev/null 2>&1 ||
    "$admin" --no-defaults --protocol=SOCKET -S"$MARIADB_SOCKET" \
      --connect-timeout=2 ping >/dev/null 2>&1
}

# 0 when the mariadbd recorded in the server's own pid file is alive.
mariadb_running() {
  [[ -s $MARIADB_PIDFILE ]] &&
    start-stop-daemon --status --pidfile "$MARIADB_PIDFILE" --exec "$MARIADBD" >/dev/null 2>&1
}

mariadb_extra_args() { MARIADB_EXTRA=(); read -r -a MARIADB_EXTRA <<<"$MARIADB_ARGS"; }

# The error log the server writes (from its option files, or ONESTEP_MARIADB_ARGS).
mariadb_errlog() {
  local -a defaults
  local a f=""
  read -r -a defaults < <("$MARIADBD" --print-defaults 2>/dev/null | tail -n1)
  mariadb_extra_args
  for a in "${defaults[@]}" "${MARIADB_EXTRA[@]}"; do
    case "$a" in --log-error=* | --log_error=*) f=${a#*=} ;; esac
  done
  echo "$f"
}

mariadb_die_with_log() {
  local f; f=$(mariadb_errlog)
  if [[ -n $f && -r $f ]]; then
    log "last lines of $f:"
    tail -n 25 "$f" >&2 || true
  fi
  die "$*"
}

mariadb_install() {
  command -v apt-get >/dev/null || die "MariaDB is not installed and there is no apt-get"
  log "mariadb: not installed; apt-get install mariadb-server"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >&2 ||
    die "apt-get install -y mariadb-server failed"
  [[ -x $MARIADBD ]] || die "$MARIADBD still missing after installing mariadb-server"
}

mariadb_start() {
  local d f launch pid
  mariadb_extra_args
  # /run is a tmpfs: the socket/pid folder may be missing on a fresh boot (the init
  # script normally creates it), and so may the error log's folder.
  f=$(mariadb_errlog)
  for d in "$(dirname "$MARIADB_SOCKET")" "$(dirname "$MARIADB_PIDFILE")" ${f:+"$(dirname "$f")"}; do
    [[ -d $d ]] && continue
    if id mysql >/dev/null 2>&1; then
      install -d -o mysql -g mysql -m 0755 "$d"
    else
      install -d -m 0755 "$d"
    fi
  done
  launch=$(dirname "$MARIADB_PIDFILE")/onestep-launch-$MARIADB_PORT.pid
  rm -f "$launch"
  log "mariadb: starting $MARIADBD (max_connections=$MAX_CONNECTIONS${MARIADB_ARGS:+, $MARIADB_ARGS})"
  # --make-pidfile writes mariadbd's pid to a file of our own (the server writes its
  # pid file only late in start-up), to notice when it dies during start-up.
  start-stop-daemon --start --oknodo --background --make-pidfile --pidfile "$launch" \
      --exec "$MARIADBD" -- --max-connections="$MAX_CONNECTIONS" "${MARIADB_EXTRA[@]}" \
      </dev/null >&2 || die "start-stop-daemon could not start $MARIADBD"
  local deadline=$((SECONDS + START_TIMEOUT))
  until mariadb_ping; do
    pid=$(tr -dc 0-9 <"$launch" 2>/dev/null || true)
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      mariadb_die_with_log "mariadbd (pid $pid) exited during start-up"
    fi
    ((SECONDS < deadline)) || mariadb_die_with_log "mariadbd did not answer within ${START_TIMEOUT}s"
    sleep 0.3
  done
}

# Makes root@127.0.0.1 log in over TCP without a password. A fresh Debian install
# only has root@localhost (unix_socket auth); the OS user root gets in over the socket.
mariadb_ensure_tcp_root() {
  mariadb_tcp -e 'SELECT 1' >/dev/null 2>&1 && return 0
  log "mariadb: root@$TESTDB_HOST cannot log in over TCP without a password; creating it (via the socket $MARIADB_SOCKET)"
  local err
  err=$(mariadb_sock 2>&1 >/dev/null <<SQL
CREATE USER IF NOT EXISTS 'root'@'$TESTDB_HOST' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'$TESTDB_HOST' WITH GRANT OPTION;
SQL
  ) || die "mariadb: cannot create root@$TESTDB_HOST: root over the socket $MARIADB_SOCKET failed too: $err"
  err=$(mariadb_tcp -e 'SELECT 1' 2>&1 >/dev/null) && return 0
  # Without skip-name-resolve (Debian's default configuration) the server resolves
  # 127.0.0.1 to "localhost" and matches root@localhost (unix_socket only) first:
  # let root@localhost also accept the empty password (as root@127.0.0.1 does).
  if [[ $err == *"'root'@'localhost'"* ]]; then
    log "mariadb: TCP logins from $TESTDB_HOST match root@localhost (name resolution is on); adding an empty-password alternative to its unix_socket authentication"
    err=$(mariadb_sock 2>&1 >/dev/null <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
SQL
    ) || die "mariadb: ALTER USER root@localhost failed: $err"
    err=$(mariadb_tcp -e 'SELECT 1' 2>&1 >/dev/null) && return 0
  fi
  die "mariadb: root@$TESTDB_HOST over TCP with an empty password still fails (a password set?): $err"
}

# Anonymous accounts (''@localhost, left by an install with the test database) match
# TCP logins from 127.0.0.1 before 'user'@'%': users created by tests could not log in.
mariadb_drop_anonymous() {
  local drops
  drops=$(mariadb_tcp -e "SELECT CONCAT('DROP USER ''''@', QUOTE(host), ';') FROM mysql.user WHERE user = '' AND is_role = 'N'") ||
    die "mariadb: listing anonymous accounts failed"
  [[ -n $drops ]] || return 0
  log "mariadb: dropping anonymous accounts (they shadow 'user'@'%' logins): ${drops//$'\n'/ }"
  mariadb_tcp -e "$drops" || die "mariadb: dropping anonymous accounts failed"
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
    if [[ ! -x $MARIADBD ]] || ! command -v mariadb >/dev/null; then mariadb_install; fi
    if mariadb_ping; then
      log "mariadb: already running on $TESTDB_HOST:$MARIADB_PORT"
    elif mariadb_running; then
      log "mariadb: mariadbd is running but does not answer yet; waiting"
      local deadline=$((SECONDS + START_TIMEOUT))
      until mariadb_ping; do
        mariadb_running || mariadb_die_with_log "mariadbd exited during start-up"
        ((SECONDS < deadline)) || mariadb_die_with_log "mariadbd did not answer within ${START_TIMEOUT}s"
        sleep 0.3
      done
    else
      port_open "$TESTDB_HOST" "$MARIADB_PORT" &&
        die "mariadb: $TESTDB_HOST:$MARIADB_PORT is in use by something that is not a MariaDB server"
      mariadb_start
    fi
    mariadb_ensure_tcp_root
    mariadb_drop_anonymous
    local mc
    mc=$(mariadb_tcp -e 'SELECT @@max_connections') || die "mariadb: query failed"
    if ((mc < MAX_CONNECTIONS)); then
      log "mariadb: raising max_connections from $mc to $MAX_CONNECTIONS (SET GLOBAL)"
      mariadb_tcp -e "SET GLOBAL max_connections = $MAX_CONNECTIONS" ||
        log "mariadb: WARNING: SET GLOBAL max_connections = $MAX_CONNECTIONS failed"
      mc=$(mariadb_tcp -e 'SELECT @@max_connections')
    fi
    ((mc >= 300)) || log "mariadb: WARNING: max_connections is only $mc"
    mariadb_probe
    log "mariadb: up: $(mariadb_tcp -e 'SELECT VERSION()') at $(mariadb_url) (max_connections=$mc)"
  ) 7>"${TMPDIR:-/tmp}/onestep-test-db-mariadb.lock"
}

mariadb_down() {
  if ! mariadb_running; then
    if mariadb_ping; then
      die "mariadb: a server answers on $TESTDB_HOST:$MARIADB_PORT but $MARIADB_PIDFILE names no running $MARIADBD; not stopping it"
    fi
    log "mariadb: not running"
    return 0
  fi
  log "mariadb: stopping mariadbd (pid $(cat "$MARIADB_PIDFILE"))"
  start-stop-daemon --stop --oknodo --pidfile "$MARIADB_PIDFILE" --exec "$MARIADBD" \
      --retry TERM/120/KILL/5 >&2 || die "mariadb: could not stop mariadbd"
  rm -f "$(dirname "$MARIADB_PIDFILE")/onestep-launch-$MARIADB_PORT.pid"
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
