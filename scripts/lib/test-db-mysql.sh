# shellcheck shell=bash
# test-db-mysql.sh: a real Oracle MySQL for scripts/test-db.sh (sourced, not run).
#
# Debian 12 (bookworm) has no Oracle MySQL; Debian trixie/sid have mysql-server-core
# (9.x). Nothing is installed into the system:
#   1. a private apt configuration (temporary folder, suites trixie+sid, this system's
#      Debian mirror and archive keyring) downloads mysql-server-core,
#      mysql-client-core and their library closure (which includes sid's glibc);
#   2. `dpkg-deb -x` unpacks them into $ONESTEP_MYSQL_CACHE/root;
#   3. the binaries run through the unpacked dynamic loader:
#        <root>/usr/lib/<triplet>/ld-linux-*.so --library-path <root libs> mysqld ...
#   4. the data dir is initialised with --initialize-insecure (root@localhost, empty
#      password), root@127.0.0.1 is added (the server runs with --skip-name-resolve),
#      and the time zone tables are filled once from the system's tzdata.
# The system's packages, /etc/apt and dpkg's state are left untouched. The default
# authentication plugin stays caching_sha2_password.
#
# Layout (compatible with the earlier internal tool, so a server it started is reused):
#   $CACHE/root  unpacked packages     $CACHE/data-$PORT  data dir
#   $CACHE/run-$PORT  socket, pid file, error log (mysqld.err)
#   $CACHE/files-$PORT  secure_file_priv   $CACHE/.lock-*  flock files
#
# Uses from test-db.sh: TESTDB_HOST MAX_CONNECTIONS START_TIMEOUT log die elapsed port_open.

MY_CACHE=${ONESTEP_MYSQL_CACHE:-/var/cache/onestep-mysql}
MY_PORT=${ONESTEP_MYSQL_PORT:-3307}
MY_DATADIR=${ONESTEP_MYSQL_DATADIR:-$MY_CACHE/data-$MY_PORT}
MY_SUITES=${ONESTEP_MYSQL_SUITES:-trixie sid}
MY_KEYRING=${ONESTEP_MYSQL_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
MY_EXTRA_ARGS=${ONESTEP_MYSQL_EXTRA_ARGS:-}
MY_TIMEZONES=${ONESTEP_MYSQL_TIMEZONES:-1}
[[ $MY_PORT =~ ^[0-9]+$ ]] || die "ONESTEP_MYSQL_PORT must be a number"

MY_ROOT=$MY_CACHE/root
MY_RUNDIR=$MY_CACHE/run-$MY_PORT
MY_PIDFILE=$MY_RUNDIR/mysqld.pid
MY_LAUNCHPID=$MY_RUNDIR/launch.pid
MY_SOCK=$MY_RUNDIR/mysqld.sock
MY_ERRLOG=$MY_RUNDIR/mysqld.err
MY_FILESDIR=$MY_CACHE/files-$MY_PORT

# Server options (besides paths). Non-durable commits and no binary log: fast on small
# machines; modest memory.
MY_SERVER_ARGS=(
  --skip-name-resolve
  --mysqlx=OFF
  --skip-log-bin
  --innodb-flush-log-at-trx-commit=2
  --sync-binlog=0
  --innodb-buffer-pool-size=256M
  --performance-schema=OFF
)

# Packages of the dependency closure that mysqld/mysql do not need at run time.
MY_EXCLUDE_RE='^(perl|perl-base|perl-modules-.*|libperl.*|libgdbm.*|libdb5\.3.*|libc-gconv-modules-extra|gcc-[0-9]+-base|debconf.*|mysql-common)$'

mysql_url() { echo "mysql://root@$TESTDB_HOST:$MY_PORT/"; }

mysql_arch() {
  case "$(dpkg --print-architecture)" in
    amd64) MY_TRIPLET=x86_64-linux-gnu; MY_LDNAME=ld-linux-x86-64.so.2 ;;
    arm64) MY_TRIPLET=aarch64-linux-gnu; MY_LDNAME=ld-linux-aarch64.so.1 ;;
    *) die "mysql: unsupported architecture $(dpkg --print-architecture)" ;;
  esac
}

# Sets MY_LOADER and MY_LIBPATH for the unpacked tree in $MY_ROOT.
MY_LOADER=
MY_LIBPATH=
mysql_find_loader() {
  [[ -n ${MY_TRIPLET:-} ]] || mysql_arch
  local c
  MY_LOADER=
  for c in "$MY_ROOT/usr/lib/$MY_TRIPLET/$MY_LDNAME" "$MY_ROOT/lib/$MY_TRIPLET/$MY_LDNAME" \
           "$MY_ROOT/usr/lib64/$MY_LDNAME" "$MY_ROOT/lib64/$MY_LDNAME"; do
    [[ -e $c ]] && { MY_LOADER=$c; break; }
  done
  [[ -n $MY_LOADER ]] || return 1
  MY_LIBPATH="$MY_ROOT/usr/lib/$MY_TRIPLET"
  [[ -d $MY_ROOT/lib/$MY_TRIPLET && ! -L $MY_ROOT/lib ]] && MY_LIBPATH="$MY_LIBPATH:$MY_ROOT/lib/$MY_TRIPLET"
  return 0
}

# The environment unpacked binaries run in: no preloads, no MYSQL_* client variables.
MY_ENV=()
mysql_env() {
  MY_ENV=(env -u LD_PRELOAD -u LD_LIBRARY_PATH -u MYSQL_PWD -u MYSQL_HOST -u MYSQL_TCP_PORT
          -u MYSQL_UNIX_PORT -u MYSQL_HISTFILE LC_ALL=C.UTF-8
          GCONV_PATH="$MY_ROOT/usr/lib/$MY_TRIPLET/gconv")
}

# Runs an unpacked binary (path below usr/) through the unpacked loader.
mysql_run() {
  local bin=$1; shift
  mysql_env
  "${MY_ENV[@]}" "$MY_LOADER" --library-path "$MY_LIBPATH" "$MY_ROOT/usr/$bin" "$@"
}
mysql_tcp() {
  mysql_run bin/mysql --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MY_PORT" -uroot \
    --connect-timeout=5 --batch --skip-column-names "$@"
}
mysql_sock() {
  mysql_run bin/mysql --no-defaults --protocol=SOCKET --socket="$MY_SOCK" -uroot \
    --connect-timeout=5 --batch --skip-column-names "$@"
}
mysql_client() {
  mysql_find_loader || die "mysql: not unpacked in $MY_ROOT; run: $0 up mysql"
  mysql_run bin/mysql --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MY_PORT" -uroot "$@"
}
mysql_ping() {
  mysql_run bin/mysqladmin --no-defaults --socket="$MY_SOCK" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}

# The Debian archive this machine's apt already uses (deb822 or one-line format).
mysql_system_mirror() {
  local m
  m=$(grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
  [[ -n $m ]] || m=$(grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
  echo "$m"
}

# ---------------------------------------------------------------- download + unpack
mysql_ensure_root() {
  if [[ -f $MY_ROOT/.onestep-complete ]] && mysql_find_loader; then return 0; fi
  local t0=$EPOCHREALTIME mirror
  mirror=${ONESTEP_MYSQL_MIRROR:-$(mysql_system_mirror)}
  [[ -n $mirror ]] || die "mysql: no Debian mirror found in the apt sources; set ONESTEP_MYSQL_MIRROR"
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then die "mysql: apt-get/dpkg-deb missing"; fi
  [[ -r $MY_KEYRING ]] || die "mysql: keyring $MY_KEYRING not readable"
  local t; t=$(mktemp -d "${TMPDIR:-/tmp}/onestep-mysql-apt.XXXXXX")
  # shellcheck disable=SC2064  # expand $t now
  trap "rm -rf '$t'" EXIT
  mkdir -p "$t/sources.list.d" "$t/preferences.d" "$t/lists/partial" "$t/cache/archives/partial" "$t/debs"
  : >"$t/status"
  cat >"$t/sources.list.d/onestep-mysql.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $MY_SUITES
Components: main
Signed-By: $MY_KEYRING
EOF
  local -a A=(
    -o Dir::Etc::SourceList=/dev/null
    -o "Dir::Etc::SourceParts=$t/sources.list.d"
    -o "Dir::Etc::PreferencesParts=$t/preferences.d"
    -o Dir::Etc::Preferences=/dev/null
    -o "Dir::State::Lists=$t/lists"
    -o "Dir::State::status=$t/status"
    -o "Dir::State::extended_states=$t/extended_states"
    -o "Dir::Cache=$t/cache"
    -o APT::Sandbox::User=root
    -o Acquire::Languages=none
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false
    -o Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false
  )
  log "mysql: apt update (private config in $t; $mirror, suites: $MY_SUITES)"
  apt-get "${A[@]}" -qq update >&2 || die "mysql: apt-get update (private config) failed"
  local cand
  cand=$(apt-cache "${A[@]}" policy mysql-server-core | awk '/Candidate:/{print $2}')
  [[ -n $cand && $cand != "(none)" ]] || die "mysql: no mysql-server-core in suites '$MY_SUITES'"
  log "mysql: mysql-server-core candidate: $cand"
  local -a pkgs
  mapfile -t pkgs < <(apt-cache "${A[@]}" depends --recurse --no-recommends --no-suggests \
      --no-conflicts --no-breaks --no-replaces --no-enhances \
      mysql-server-core mysql-client-core | grep -v '^[ <]' | sort -u | grep -Ev "$MY_EXCLUDE_RE")
  ((${#pkgs[@]} > 2)) || die "mysql: could not resolve the dependencies of mysql-server-core"
  log "mysql: downloading ${#pkgs[@]} packages"
  (cd "$t/debs" && apt-get "${A[@]}" -qq download "${pkgs[@]}" >&2) || die "mysql: apt-get download failed"
  log "mysql: downloaded $(du -cb "$t"/debs/*.deb | tail -1 | awk '{printf "%.1f MB", $1/1e6}') in $(elapsed "$t0")"
  local partial=$MY_ROOT.partial f
  rm -rf "$partial"; mkdir -p "$partial"
  for f in "$t"/debs/*.deb; do dpkg-deb -x "$f" "$partial" || die "mysql: dpkg-deb -x $f failed"; done
  (cd "$t/debs" && ls) >"$partial/.onestep-packages"
  # Check that the binaries resolve all their libraries inside the unpacked tree.
  local keep=$MY_ROOT out bad
  MY_ROOT=$partial
  mysql_find_loader || die "mysql: no dynamic loader in the unpacked packages"
  for f in sbin/mysqld bin/mysql bin/mysqladmin; do
    out=$("$MY_LOADER" --library-path "$MY_LIBPATH" --list "$MY_ROOT/usr/$f" 2>&1) || die "mysql: cannot load $f: $out"
    bad=$(grep -E 'not found' <<<"$out" || true)
    [[ -z $bad ]] || die "mysql: unresolved libraries for $f: $bad"
  done
  MY_ROOT=$keep
  rm -rf "$MY_ROOT"
  mv "$partial" "$MY_ROOT"
  echo "$cand" >"$MY_ROOT/.onestep-complete"
  mysql_find_loader || die "mysql: loader vanished"
  rm -rf "$t"; trap - EXIT
  log "mysql: unpacked into $MY_ROOT ($(du -sh "$MY_ROOT" | cut -f1)) in $(elapsed "$t0")"
}

# ---------------------------------------------------------------- server
MY_COMMON=()
mysql_common_args() {
  MY_COMMON=(--no-defaults
    --basedir="$MY_ROOT/usr"
    --plugin-dir="$MY_ROOT/usr/lib/mysql/plugin"
    --lc-messages-dir="$MY_ROOT/usr/share/mysql"
    --character-sets-dir="$MY_ROOT/usr/share/mysql/charsets")
  [[ $(id -u) == 0 ]] && MY_COMMON+=(--user=root)
  return 0
}

# Prints the pid of our server (the mysqld whose command line has our data dir), or nothing.
mysql_pid() {
  local pid f
  for f in "$MY_PIDFILE" "$MY_LAUNCHPID"; do
    [[ -s $f ]] || continue
    pid=$(tr -dc 0-9 <"$f")
    [[ -n $pid && -r /proc/$pid/cmdline ]] || continue
    if tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "--datadir=$MY_DATADIR"; then
      echo "$pid"; return 0
    fi
  done
  return 0
}

mysql_init_datadir() {
  if [[ -d $MY_DATADIR ]] && [[ -n $(ls -A "$MY_DATADIR" 2>/dev/null) ]]; then return 0; fi
  local t0=$EPOCHREALTIME tmp=$MY_DATADIR.partial
  rm -rf "$tmp"
  mkdir -p "$(dirname "$MY_DATADIR")" "$MY_RUNDIR"
  log "mysql: initialising data dir $MY_DATADIR"
  if ! mysql_run sbin/mysqld "${MY_COMMON[@]}" --initialize-insecure --datadir="$tmp" \
        --log-error="$MY_RUNDIR/init.err" >/dev/null 2>&1; then
    tail -n 30 "$MY_RUNDIR/init.err" >&2 || true
    die "mysql: mysqld --initialize-insecure failed (log: $MY_RUNDIR/init.err)"
  fi
  rmdir "$MY_DATADIR" 2>/dev/null || true
  mv "$tmp" "$MY_DATADIR"
  log "mysql: data dir initialised in $(elapsed "$t0")"
}

mysql_start() {
  local -a extra
  read -r -a extra <<<"$MY_EXTRA_ARGS"
  rm -f "$MY_PIDFILE" "$MY_LAUNCHPID"
  mysql_init_datadir
  local logoff; logoff=$(stat -c %s "$MY_ERRLOG" 2>/dev/null || echo 0)
  log "mysql: starting mysqld on $TESTDB_HOST:$MY_PORT (data dir $MY_DATADIR)"
  mysql_env
  # setsid: own session, survives the caller; all output to files, so that
  # "$(scripts/test-db.sh up)" does not wait for mysqld; fd 9 (the lock) closed.
  # shellcheck disable=SC2016  # $$ and $@ belong to the inner bash
  setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$MY_LAUNCHPID" \
    "${MY_ENV[@]}" "$MY_LOADER" --library-path "$MY_LIBPATH" "$MY_ROOT/usr/sbin/mysqld" "${MY_COMMON[@]}" \
    --datadir="$MY_DATADIR" --port="$MY_PORT" --bind-address="$TESTDB_HOST" --socket="$MY_SOCK" \
    --pid-file="$MY_PIDFILE" --log-error="$MY_ERRLOG" --secure-file-priv="$MY_FILESDIR" \
    --max-connections="$MAX_CONNECTIONS" "${MY_SERVER_ARGS[@]}" "${extra[@]}" \
    </dev/null >>"$MY_RUNDIR/mysqld.out" 2>&1 9>&- &
  local deadline=$((SECONDS + START_TIMEOUT)) lpid=""
  until mysql_ping; do
    [[ -z $lpid && -s $MY_LAUNCHPID ]] && lpid=$(tr -dc 0-9 <"$MY_LAUNCHPID")
    if [[ -n $lpid ]] && ! kill -0 "$lpid" 2>/dev/null; then
      tail -c "+$((logoff + 1))" "$MY_ERRLOG" 2>/dev/null | tail -n 30 >&2 || true
      die "mysql: mysqld exited during start-up (log: $MY_ERRLOG)"
    fi
    ((SECONDS < deadline)) || die "mysql: mysqld did not answer within ${START_TIMEOUT}s (log: $MY_ERRLOG)"
    sleep 0.2
  done
}

# root@localhost (from --initialize-insecure) only matches socket connections under
# --skip-name-resolve; TCP clients from 127.0.0.1 need root@127.0.0.1.
mysql_ensure_tcp_root() {
  local n err
  n=$(mysql_sock -e "SELECT COUNT(*) FROM mysql.user WHERE user='root' AND host='$TESTDB_HOST'") ||
    die "mysql: root over the socket $MY_SOCK failed"
  if [[ $n == 0 ]]; then
    log "mysql: creating root@$TESTDB_HOST (empty password, all privileges)"
    err=$(mysql_sock 2>&1 >/dev/null <<SQL
CREATE USER 'root'@'$TESTDB_HOST' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'$TESTDB_HOST' WITH GRANT OPTION;
GRANT PROXY ON ''@'' TO 'root'@'$TESTDB_HOST' WITH GRANT OPTION;
SQL
    ) || die "mysql: creating root@$TESTDB_HOST failed: $err"
  fi
  err=$(mysql_tcp -e 'SELECT 1' 2>&1 >/dev/null) ||
    die "mysql: root@$TESTDB_HOST over TCP fails: $err"
}

# Named time zones (CONVERT_TZ(.., 'Europe/Berlin')) need the mysql.time_zone* tables;
# fill them once per data dir from the system's tzdata, if present.
mysql_load_timezones() {
  [[ $MY_TIMEZONES == 1 ]] || return 0
  [[ -e $MY_DATADIR/.onestep-tz-loaded || ! -d /usr/share/zoneinfo ]] && return 0
  local t0=$EPOCHREALTIME
  if mysql_run bin/mysql_tzinfo_to_sql /usr/share/zoneinfo 2>/dev/null |
      mysql_run bin/mysql --no-defaults --socket="$MY_SOCK" -uroot mysql; then
    touch "$MY_DATADIR/.onestep-tz-loaded"
    log "mysql: time zone tables loaded from /usr/share/zoneinfo in $(elapsed "$t0")"
  else
    log "mysql: WARNING: loading the time zone tables failed (named time zones unavailable)"
  fi
}

# As the tests do: root creates a database and a user with the server's default
# authentication plugin (caching_sha2_password); the new user logs in over plain TCP
# (no TLS, so the cold-cache full authentication uses the server's RSA key); all dropped.
mysql_probe() {
  local p="onestep_probe_$$_$RANDOM" err plugin who
  err=$(mysql_tcp 2>&1 >/dev/null <<SQL
CREATE DATABASE \`$p\`;
CREATE USER '$p'@'%' IDENTIFIED BY 'Probe-$p';
GRANT ALL PRIVILEGES ON \`$p\`.* TO '$p'@'%';
SQL
  ) || die "mysql: root cannot CREATE DATABASE / CREATE USER / GRANT: $err"
  plugin=$(mysql_tcp -e "SELECT plugin FROM mysql.user WHERE user='$p'") || plugin="?"
  who=$(mysql_run bin/mysql --no-defaults --protocol=TCP -h"$TESTDB_HOST" -P"$MY_PORT" -u"$p" -p"Probe-$p" \
        --ssl-mode=DISABLED --get-server-public-key --connect-timeout=5 --batch --skip-column-names \
        -e "USE \`$p\`; SELECT CURRENT_USER()" 2>&1) || who="FAILED: $who"
  who=$(grep -v 'Using a password on the command line' <<<"$who" || true)
  mysql_tcp -e "DROP USER '$p'@'%'; DROP DATABASE \`$p\`" >/dev/null 2>&1 || true
  [[ $who == "$p@%" ]] ||
    die "mysql: a new $plugin user cannot log in over TCP without TLS: $who"
  [[ $plugin == caching_sha2_password ]] ||
    log "mysql: WARNING: new users get the plugin '$plugin', not caching_sha2_password"
}

# For a server that was already running: options that need a restart to change.
mysql_check_options() {
  local pid=$1 a missing=()
  local cmdline
  cmdline=$(tr '\0' '\n' <"/proc/$pid/cmdline")
  for a in "${MY_SERVER_ARGS[@]}"; do
    grep -qxF -- "$a" <<<"$cmdline" || missing+=("$a")
  done
  ((${#missing[@]} == 0)) ||
    log "mysql: note: the running server was started without ${missing[*]}; '$0 restart mysql' applies them"
}

mysql_up() {
  mkdir -p "$MY_CACHE" || die "mysql: cannot create $MY_CACHE"
  (
    [[ -n ${MY_TRIPLET:-} ]] || mysql_arch
    ((${#MY_SOCK} < 100)) || die "mysql: socket path too long (${#MY_SOCK} chars): use a shorter ONESTEP_MYSQL_CACHE"
    flock -w 900 9 || die "mysql: could not lock $MY_CACHE/.lock-$MY_PORT"
    (flock -w 900 8 || die "mysql: could not lock $MY_CACHE/.lock-download"; mysql_ensure_root) \
      8>"$MY_CACHE/.lock-download" || exit 1
    mysql_find_loader || die "mysql: unpacked tree incomplete: $MY_ROOT"
    mysql_common_args
    mkdir -p "$MY_RUNDIR" "$MY_FILESDIR"; chmod 700 "$MY_RUNDIR" "$MY_FILESDIR"
    local pid; pid=$(mysql_pid)
    if [[ -n $pid ]]; then
      mysql_ping || die "mysql: mysqld pid $pid exists but does not answer (see $MY_ERRLOG)"
      log "mysql: already running (pid $pid) on $TESTDB_HOST:$MY_PORT"
      mysql_check_options "$pid"
    elif port_open "$TESTDB_HOST" "$MY_PORT"; then
      die "mysql: $TESTDB_HOST:$MY_PORT is in use by a process this script did not start (data dir $MY_DATADIR); stop it or set ONESTEP_MYSQL_PORT"
    else
      mysql_start
      log "mysql: mysqld is up (pid $(mysql_pid))"
    fi
    mysql_ensure_tcp_root
    local mc
    mc=$(mysql_tcp -e 'SELECT @@max_connections') || die "mysql: query failed"
    if ((mc < MAX_CONNECTIONS)); then
      log "mysql: raising max_connections from $mc to $MAX_CONNECTIONS (SET GLOBAL)"
      mysql_tcp -e "SET GLOBAL max_connections = $MAX_CONNECTIONS" || die "mysql: SET GLOBAL max_connections failed"
      mc=$(mysql_tcp -e 'SELECT @@max_connections')
    fi
    mysql_load_timezones
    mysql_probe
    log "mysql: up: MySQL $(mysql_tcp -e 'SELECT VERSION()') at $(mysql_url) (max_connections=$mc)"
  ) 9>"$MY_CACHE/.lock-$MY_PORT"
}

mysql_down() {
  local pid; pid=$(mysql_pid)
  if [[ -z $pid ]]; then
    log "mysql: not running (port $MY_PORT, data dir $MY_DATADIR)"
    rm -f "$MY_PIDFILE" "$MY_LAUNCHPID"
    return 0
  fi
  log "mysql: stopping mysqld pid $pid"
  kill -TERM "$pid"
  local i
  for ((i = 0; i < 600; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "mysql: still running after 60s, sending SIGKILL to pid $pid"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 1
  fi
  rm -f "$MY_PIDFILE" "$MY_LAUNCHPID"
  log "mysql: stopped"
}

mysql_status() {
  local pid v
  pid=$(mysql_pid)
  if [[ -z $pid ]]; then
    echo "mysql: down ($TESTDB_HOST:$MY_PORT, data dir $MY_DATADIR)"
    return 3
  fi
  if mysql_find_loader && v=$(mysql_tcp -e 'SELECT CONCAT(VERSION(), " max_connections=", @@max_connections)' 2>/dev/null); then
    echo "mysql: up MySQL $v at $(mysql_url) (pid $pid, data dir $MY_DATADIR)"
    return 0
  fi
  echo "mysql: pid $pid alive but root over TCP does not answer (starting, or run: $0 up mysql; log: $MY_ERRLOG)"
  return 3
}
