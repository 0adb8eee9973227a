#!/usr/bin/env bash
# The history-scale benchmark (docs/benchmarks.md#history-at-scale): `onestep bench` with
# 0 / 1M / 10M finished rows in the table, v7 against v4 ids, our tables against reference-created
# tables before and after `onestep migrate --upgrade`, idempotency keys, and purge steady state,
# on each server, printing one Markdown table row per run (and every run's full report to
# $OUT/*.json). Long: about an hour per server at the default sizes; not part of CI
# (scripts/bench.sh runs a 200k-row variant). Needs a release build and the test databases:
#
#   cargo build --release -p onestep-cli
#   set -a; eval "$(scripts/test-db.sh up)"; set +a
#   scripts/bench-history.sh                      # every server, every part
#   SERVERS=mariadb SIZES="0 1000000" PARTS="ids" scripts/bench-history.sh
#
# On PostgreSQL the reference part measures tables without our indexes (docs/postgres.md).
# Knobs: SERVERS (mariadb mysql postgres), SIZES (0 1000000 10000000), N (20000 executions per
# run), PARTS (ids reference keys purge), V4_MAX (largest history seeded with v4 ids, 1000000:
# random ids seed slowly), REF_N (500: executions drained on un-upgraded reference tables, which
# are slow by design), REF_MAX and KEYS_MAX (1000000: the largest history of the reference and
# idempotency-key parts), ROUNDS (8) and PURGE_OLDER_THAN (30s) for the purge steady state, OUT
# (target/bench-history).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${ONESTEP_BIN_RELEASE:-${CARGO_TARGET_DIR:-$ROOT/target}/release/onestep}"
[[ -x "$BIN" ]] || { echo "bench-history: build first: cargo build --release -p onestep-cli" >&2; exit 2; }
SERVERS="${SERVERS:-mariadb mysql postgres}"
SIZES="${SIZES:-0 1000000 10000000}"
N="${N:-20000}"
PARTS="${PARTS:-ids reference keys purge}"
V4_MAX="${V4_MAX:-1000000}"
REF_N="${REF_N:-500}"
REF_MAX="${REF_MAX:-1000000}"
KEYS_MAX="${KEYS_MAX:-1000000}"
ROUNDS="${ROUNDS:-8}"
PURGE_OLDER_THAN="${PURGE_OLDER_THAN:-30s}"
OUT="${OUT:-$ROOT/target/bench-history}"
mkdir -p "$OUT"

url_of() {
    case "$1" in
        mariadb) echo "${ONESTEP_TEST_MARIADB_URL:-mysql://root@127.0.0.1:3306/}" ;;
        mysql) echo "${ONESTEP_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3307/}" ;;
        postgres) echo "${ONESTEP_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/}" ;;
        *) echo "bench-history: unknown server '$1'" >&2; exit 2 ;;
    esac
}

# One Markdown row from a report (or an array of round reports: the last round's row, plus the
# first round's figures for comparison).
row() {
    python3 - "$1" "$2" <<'PY'
import json, sys
label, path = sys.argv[1], sys.argv[2]
data = json.load(open(path))
reports = data if isinstance(data, list) else [data]
def mib(r):
    return sum(t["bytes"] for t in r["footprint"]) / 2**20
def fig(r):
    s, d = r["submit_io"], r["drain_io"]
    cpu = r["db_cpu_ms_per_execution"]
    rows = r["footprint"][0]["rows"] if r["footprint"] else 0
    return (f"{r['submit_per_s']:,.0f} | {r['completed_per_s']:,.0f} | "
            f"{'n/a' if cpu is None else f'{cpu:.3f}'} | {s['buffer_pool_reads']} / {d['buffer_pool_reads']} | "
            f"{s['handler_reads']} / {d['handler_reads']} | {rows:,} | {mib(r):,.0f}")
if len(reports) == 1:
    print(f"| {label} | {fig(reports[0])} |")
else:
    for r in reports:
        p = r.get("purge")
        u = r.get("upgrade_before")
        note = ""
        if p:
            note = f", then purged {p['executions']:,} in {p['seconds']:.1f} s"
        if u:
            note = f", after migrate --upgrade ({u['seconds']:.2f} s)"
        print(f"| {label} round {r['round']}{note} | {fig(r)} |")
PY
}

header() {
    echo
    echo "### $1"
    echo
    echo "| run | submit/s | completed/s | DB CPU ms / exec | buffer-pool reads / exec (submit / drain) | rows read / exec (submit / drain) | executions rows after | MiB (all tables) |"
    echo "|---|---|---|---|---|---|---|---|"
}

bench() { # label json-name args...
    local label="$1" name="$2"
    shift 2
    echo "[bench-history] $label: onestep bench $*" >&2
    local started=$SECONDS
    if "$BIN" bench --json -n "$N" "$@" >"$OUT/$name.json" 2>"$OUT/$name.err"; then
        row "$label" "$OUT/$name.json"
        echo "[bench-history]   done in $((SECONDS - started)) s" >&2
    else
        echo "| $label | failed: $(tail -1 "$OUT/$name.err") |"
    fi
}

has() { [[ " $PARTS " == *" $1 "* ]]; }

for server in $SERVERS; do
    url="$(url_of "$server")"
    version="$("$BIN" bench --json -n 1 --server-url "$url" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["server"])' || echo "$server")"
    if has ids; then
        header "$server ($version): history × id version, our tables, N = $N"
        for size in $SIZES; do
            for ids in v7 v4; do
                if [[ "$ids" == v4 && "$size" -gt "$V4_MAX" ]]; then continue; fi
                bench "history $size, $ids ids" "$server-ours-$size-$ids" \
                    --server-url "$url" --history "$size" --history-ids "$ids" --ids "$ids"
            done
        done
    fi
    if has reference; then
        header "$server ($version): reference-created tables, round 1 before and round 2 after migrate --upgrade, N = $REF_N"
        for size in $SIZES; do
            [[ "$size" -gt 0 && "$size" -le "$REF_MAX" ]] || continue
            N="$REF_N" bench "reference DDL, history $size" "$server-ref-$size" --server-url "$url" \
                --reference-tables --history "$size" --rounds 2 --upgrade-after-round 1
        done
    fi
    if has keys; then
        header "$server ($version): idempotency keys on every submission and history row, v7 ids"
        for size in $SIZES; do
            [[ "$size" -le "$KEYS_MAX" ]] || continue
            bench "history $size, no keys" "$server-nokeys-$size" --server-url "$url" --history "$size"
            bench "history $size, random keys" "$server-keys-$size" --server-url "$url" --history "$size" --idempotency-keys random
            bench "history $size, ordered keys for the run" "$server-okeys-$size" --server-url "$url" --history "$size" --idempotency-keys ordered
        done
    fi
    if has purge; then
        size="$(echo "$SIZES" | tr ' ' '\n' | sort -n | sed -n 2p)"
        size="${size:-1000000}"
        header "$server ($version): steady state, history $size, $ROUNDS rounds of $N, purge > $PURGE_OLDER_THAN after each"
        bench "purge" "$server-purge" --server-url "$url" --history "$size" --rounds "$ROUNDS" \
            --purge-older-than "$PURGE_OLDER_THAN"
        header "$server ($version): the same rounds without purge"
        bench "no purge" "$server-nopurge" --server-url "$url" --history "$size" --rounds "$ROUNDS"
    fi
done
