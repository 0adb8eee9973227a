#!/usr/bin/env bash
# Where the database time goes, statement by statement (docs/benchmarks.md#where-the-database-time-goes-issue-35):
# starts a private PostgreSQL with pg_stat_statements preloaded (initdb into a temporary
# directory, its own port; the shared server is not touched), runs `onestep bench` once on a
# fresh database there, and prints per execution: every statement's calls, execution time,
# rows, shared blocks hit/dirtied/written and WAL (pg_stat_statements), each table's inserts,
# updates and HOT updates (pg_stat_user_tables), and each index's entries written
# (`pg_waldump` B-tree insert records over the run's WAL range). Row, block, index and WAL
# counts do not depend on the build, so the debug binary serves for them; times do.
#
#   scripts/bench-dbcost.sh                              # 5,000 executions, noop handler
#   scripts/bench-dbcost.sh -n 20000 -- --handler component:guest-examples/out/echo.wasm
#   scripts/bench-dbcost.sh --history 1000000 --backlog 1000000 --explain -- --fairness-keys 1000
#
# Options: -n N (default 5000), --port P (default 5440), --keep (leave the server running and
# its directory in place). Scale (docs/benchmarks.md#claim-cost-at-scale): --history H seeds H
# finished executions (the bench's own seeding) and --backlog B inserts B queued executions at
# priority 9 (least urgent; no fairness key, so in the namespace's key) in the bench's namespace
# and task before the measured run, so every claim runs beside a large queue and history;
# --explain also logs the plan of every statement of the measured run (auto_explain, ANALYZE
# and BUFFERS) and prints, per distinct statement, its calls and mean rows and buffers per call
# with the plan of its last call. Arguments after `--` go to `onestep bench`. ONESTEP_BIN names the
# binary (default target/release/onestep, else target/debug/onestep); PG_BIN the PostgreSQL
# binaries (default the newest /usr/lib/postgresql/*/bin). Run as root, the server runs as
# the `postgres` user. A server already answering on the port with pg_stat_statements loaded
# is reused (and left running).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N=5000
PORT=5440
KEEP=0
HISTORY=0
BACKLOG=0
EXPLAIN=0
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n) N="$2"; shift 2 ;;
        --port) PORT="$2"; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --history) HISTORY="$2"; shift 2 ;;
        --backlog) BACKLOG="$2"; shift 2 ;;
        --explain) EXPLAIN=1; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "bench-dbcost: unknown argument $1 (options: -n N, --port P, --keep, --history H, --backlog B, --explain, -- BENCH_ARGS)" >&2; exit 2 ;;
    esac
done
BIN="${ONESTEP_BIN:-}"
if [ -z "$BIN" ]; then
    if [ -x target/release/onestep ]; then BIN=target/release/onestep; else BIN=target/debug/onestep; fi
fi
[ -x "$BIN" ] || { echo "bench-dbcost: no onestep binary at $BIN (cargo build, or set ONESTEP_BIN)" >&2; exit 2; }
PG_BIN="${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}"
[ -x "$PG_BIN/pg_ctl" ] || { echo "bench-dbcost: no PostgreSQL binaries (set PG_BIN)" >&2; exit 2; }
PSQL=(psql -X -q -h 127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1)
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }

WORK=""
if "${PSQL[@]}" -At -d postgres -c "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'" 2>/dev/null | grep -q 1; then
    echo "== reusing the server on port $PORT" >&2
else
    WORK="$(mktemp -d -t onestep-dbcost.XXXXXX)"
    chmod 755 "$WORK"
    [ "$(id -u)" = 0 ] && chown postgres "$WORK"
    echo "== initdb in $WORK, port $PORT" >&2
    as_pg "'$PG_BIN/initdb' -D '$WORK/data' -U postgres --auth=trust -E UTF8 >'$WORK/initdb.log' 2>&1"
    cat >>"$WORK/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$WORK'
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.max = 5000
max_connections = 300
wal_keep_size = '4GB'
EOF
    as_pg "'$PG_BIN/pg_ctl' -D '$WORK/data' -l '$WORK/server.log' -w start >/dev/null"
    if [ "$KEEP" = 0 ]; then
        trap 'as_pg "\"$PG_BIN/pg_ctl\" -D \"$WORK/data\" -m fast -w stop >/dev/null" || true; rm -rf "$WORK"' EXIT
    else
        echo "== --keep: stop it with: $PG_BIN/pg_ctl -D $WORK/data stop" >&2
    fi
    "${PSQL[@]}" -d postgres -c "CREATE EXTENSION pg_stat_statements"
fi
DB="onestep_dbcost_$$"
"${PSQL[@]}" -d postgres -c "CREATE DATABASE $DB"
"${PSQL[@]}" -d "$DB" -c "CREATE EXTENSION pg_stat_statements"
DSN="postgres://postgres@127.0.0.1:$PORT/$DB"
Q() { "${PSQL[@]}" -d "$DB" "$@"; }

echo "== warm-up (creates the tables), then the measured run: $BIN bench -n $N ${EXTRA[*]}" >&2
"$BIN" bench -n 10 --dsn "$DSN" --history "$HISTORY" "${EXTRA[@]}" >/dev/null
if [ "$BACKLOG" -gt 0 ]; then
    echo "== backlog: $BACKLOG queued executions at priority 9 in bench/bench.noop" >&2
    # The reference's columns plus priority: no fairness key, no lease, available now. Ids are
    # time-ordered (UUIDv7 built from the row's millisecond), as `onestep serve` writes them.
    Q -c "INSERT INTO onestep_executions (id, namespace, task_name, status, payload, metadata, attempts, \
            available_at, created_at, updated_at, priority) \
          SELECT (lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint - $BACKLOG + n), 12, '0') || '7' \
                  || substr(r, 14, 3) || '8' || substr(r, 18, 15))::uuid, \
                 'bench', 'bench.noop', 'queued', jsonb_build_object('i', n), '{}'::jsonb, 0, \
                 now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', 9 \
          FROM (SELECT n, replace(gen_random_uuid()::text, '-', '') AS r FROM generate_series(1, $BACKLOG) AS n) s" >/dev/null
    Q -c "VACUUM (ANALYZE) onestep_executions" >/dev/null
fi
if [ "$EXPLAIN" = 1 ]; then
    # Only the measured run's sessions (new connections to this database) log their plans.
    Q -c "ALTER DATABASE $DB SET session_preload_libraries = 'auto_explain'" \
      -c "ALTER DATABASE $DB SET auto_explain.log_min_duration = 0" \
      -c "ALTER DATABASE $DB SET auto_explain.log_analyze = on" \
      -c "ALTER DATABASE $DB SET auto_explain.log_buffers = on" \
      -c "ALTER DATABASE $DB SET auto_explain.log_timing = off" \
      -c "ALTER DATABASE $DB SET auto_explain.log_nested_statements = on" >/dev/null
    LOG_FILE="$("${PSQL[@]}" -At -d postgres -c "SELECT pg_current_logfile()" 2>/dev/null || true)"
    DATA_DIR="$("${PSQL[@]}" -At -d postgres -c "SHOW data_directory")"
    if [ -z "$LOG_FILE" ] && [ -n "$WORK" ]; then LOG_FILE="$WORK/server.log"; fi
    case "$LOG_FILE" in /*) ;; "") ;; *) LOG_FILE="$DATA_DIR/$LOG_FILE" ;; esac
    LOG_FROM="$(stat -c %s "$LOG_FILE" 2>/dev/null || echo 0)"
fi
# Nothing but the run in the counters: no autovacuum on the tables, a checkpoint, fresh stats.
Q -At -c "SELECT format('ALTER TABLE %I SET (autovacuum_enabled = false);', relname) FROM pg_stat_user_tables" | Q >/dev/null
Q -c "CHECKPOINT" -c "SELECT pg_stat_reset()" -c "SELECT pg_stat_statements_reset()" >/dev/null
LSN0="$(Q -At -c "SELECT pg_current_wal_insert_lsn()")"
BENCH_OUT="$(mktemp)"
"$BIN" bench -n "$N" --dsn "$DSN" "${EXTRA[@]}" >"$BENCH_OUT"
LSN1="$(Q -At -c "SELECT pg_current_wal_insert_lsn()")"
Q -c "SELECT pg_stat_force_next_flush()" >/dev/null 2>&1 || true
sleep 1
grep -E "^  (submit|completed|CPU per)" "$BENCH_OUT" >&2 || true
rm -f "$BENCH_OUT"
if [ "$EXPLAIN" = 1 ]; then
    Q -c "ALTER DATABASE $DB RESET ALL" >/dev/null
fi

echo
echo "### Statements per execution ($N executions; pg_stat_statements, this database)"
echo
Q -At -v n="$N" <<'SQL'
SELECT '| statement | calls | ms | rows | blks hit | dirtied | written | WAL records | WAL bytes |';
SELECT '|---|---|---|---|---|---|---|---|---|';
WITH s AS (
  SELECT regexp_replace(regexp_replace(query, '\s+', ' ', 'g'), '"onestep_([a-z_]+)"', '\1', 'g') AS q,
         calls, total_exec_time, rows, shared_blks_hit, shared_blks_dirtied, shared_blks_written,
         wal_records, wal_bytes
  FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT format('| `%s` | %s | %s | %s | %s | %s | %s | %s | %s |',
  replace(left(q, 90), '|', '\|'),
  round(calls::numeric / :n, 4), round((total_exec_time / :n)::numeric, 4), round(rows::numeric / :n, 2),
  round(shared_blks_hit::numeric / :n, 2), round(shared_blks_dirtied::numeric / :n, 3),
  round(shared_blks_written::numeric / :n, 3), round(wal_records::numeric / :n, 2),
  round(wal_bytes / :n, 0))
FROM s ORDER BY total_exec_time DESC LIMIT 25;
SELECT format('| **all %s statements** | %s | %s | %s | %s | %s | %s | %s | %s |', count(*),
  round(sum(calls) / :n, 3), round((sum(total_exec_time) / :n)::numeric, 4), round(sum(rows) / :n, 2),
  round(sum(shared_blks_hit) / :n, 2), round(sum(shared_blks_dirtied) / :n, 3),
  round(sum(shared_blks_written) / :n, 3), round(sum(wal_records) / :n, 2), round(sum(wal_bytes) / :n, 0))
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database());
SQL

echo
echo "### Rows written per execution (pg_stat_user_tables)"
echo
Q -At -v n="$N" <<'SQL'
SELECT '| table | inserts | updates | HOT updates | HOT ratio | deletes |';
SELECT '|---|---|---|---|---|---|';
SELECT format('| %s | %s | %s | %s | %s | %s |', relname,
  round(n_tup_ins::numeric / :n, 3), round(n_tup_upd::numeric / :n, 3), round(n_tup_hot_upd::numeric / :n, 3),
  CASE WHEN n_tup_upd > 0 THEN round(100.0 * n_tup_hot_upd / n_tup_upd, 1) || '%' ELSE '-' END,
  round(n_tup_del::numeric / :n, 3))
FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname;
SQL

echo
echo "### Index entries written per execution (pg_waldump B-tree inserts, $LSN0 .. $LSN1)"
echo
DBOID="$(Q -At -c "SELECT oid FROM pg_database WHERE datname = current_database()")"
DATA="$(Q -At -c "SHOW data_directory")"
WALDUMP_OUT="$(mktemp)"
as_pg "'$PG_BIN/pg_waldump' -p '$DATA/pg_wal' -s $LSN0 -e $LSN1 -r Btree" >"$WALDUMP_OUT" 2>/dev/null || true
# rel <tablespace>/<database>/<relfilenode> of each leaf or upper insert and split.
COUNTS="$(grep -E 'desc: (INSERT_LEAF|INSERT_UPPER|INSERT_POST|SPLIT_L|SPLIT_R)' "$WALDUMP_OUT" \
    | grep -oE "rel [0-9]+/$DBOID/[0-9]+" | awk -F/ '{c[$3]++} END {for (k in c) print k, c[k]}')"
rm -f "$WALDUMP_OUT"
{
    echo "CREATE TEMP TABLE w(node oid, n bigint);"
    while read -r node n; do [ -n "$node" ] && echo "INSERT INTO w VALUES ($node, $n);"; done <<<"$COUNTS"
    cat <<'SQL'
SELECT '| index | entries (and splits) per execution |';
SELECT '|---|---|';
SELECT format('| %s | %s |', c.relname, round(w.n::numeric / :n, 3))
FROM w JOIN pg_class c ON c.relfilenode = w.node ORDER BY c.relname;
SELECT format('| **all** | %s |', round(sum(n)::numeric / :n, 3)) FROM w;
SQL
} | Q -At -v n="$N"
if [ "$KEEP" = 0 ]; then "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $DB" >/dev/null; fi

if [ "$EXPLAIN" = 1 ]; then
    echo
    echo "### Plans of the measured run (auto_explain: ANALYZE, BUFFERS; history $HISTORY, backlog $BACKLOG)"
    echo
    if [ -z "${LOG_FILE:-}" ] || [ ! -r "$LOG_FILE" ]; then
        echo "(no readable server log: reuse a server started by this script, or run without --explain)"
    else
        tail -c +"$((LOG_FROM + 1))" "$LOG_FILE" | python3 "$ROOT/scripts/lib/explain_summary.py"
    fi
fi
