#!/usr/bin/env bash
# Runs the benchmarks (figures, not timed tests) on a release build, bounded in count and
# time, against the local test databases:
#   1. wasm runtime: echo (new store + instantiate + call) with pooling on/off at 1 and 4 tasks,
#      and compile vs cached load of `summarize` and the JavaScript `js-echo`
#      (host/bench/src/bin/wasm-bench.rs); then the time of a cached `onestep check` of every
#      shipped config (components loaded from the compile cache);
#   1b. outbound rate limit: the fetch guest's sequential requests to a loopback server without
#      and with a `sandbox.network.rate_limits` entry (in-process, MariaDB and PostgreSQL
#      buckets): the limiter's overhead per outbound request
#      (host/bench/src/bin/outbound-limit-bench.rs);
#   2. worker throughput: `onestep bench` submits N no-op executions with submit_many and drains
#      them with one worker, on MariaDB and then on PostgreSQL (completed/s, queued→started
#      p50/p99, CPU ms per execution);
#      then the same with BENCH_HISTORY (200000) finished rows in the table; on PostgreSQL the
#      same N spread over 1, 1,000 and 10,000 fairness keys (the fair claim);
#   3. outbound HTTP: `onestep bench --http-delay-ms 1000` with the fetch guest, 1,000 executions
#      in flight in one worker against a loopback server that answers after 1 s (completed/s,
#      RSS per in-flight execution, heartbeat calls per tick);
#   4. waiting callers: one `onestep serve` holding 0, 1,000 and 10,000 `?wait=60` requests
#      (host/bench/src/bin/waiters-bench.rs), with `api.notify: poll` and then `listen`
#      (PostgreSQL LISTEN/NOTIFY): its RSS per caller, the database's commits/s while they
#      wait, and completion-to-answer latency p50/p99 while 5,000 complete; then the drain's
#      cost of the notifications (`onestep bench`, 1 and 2 worker processes, WAITERS_DRAIN
#      executions each, notify trigger off / on with nobody listening / on with an API
#      listening, WAITERS_ROUNDS rounds interleaved); then on MariaDB (`api.notify: poll`, the
#      only mode there) 0 and 1,000 callers: RSS per caller, the server's statements/s
#      (`Questions`) while they wait, and the same latency (about a minute);
#   5. webhook deliveries: the real completion-webhook sender posting BENCH_WEBHOOKS ended
#      executions' callbacks to a loopback receiver (host/bench/src/bin/webhooks-bench.rs,
#      SQLite, a few seconds): deliveries/s;
#   6. deployments (host/bench/src/bin/deploy-bench.rs): deploy -> first execution on the new
#      version across 3 workers (p50/p99), and the 12 MB js-echo.wasm fetched and compiled once
#      per worker, cold then warm compile cache (SQLite); then an idle follower's statements and
#      round trips per minute, counted on the wire, on MariaDB and PostgreSQL;
#   7. HTTP API: submit requests/s and p50/p99 with 1, 16 and 64 concurrent clients
#      (host/bench/src/bin/api-bench.rs);
#   8. durable steps (host/bench/src/bin/steps-bench.rs): a real `onestep run` worker and the
#      `steps` guest on MariaDB, PostgreSQL and SQLite: statements (counted on the wire), worker
#      and database CPU and wall time per step save and per step load of a resume with 1,000
#      recorded steps, and a sleep's park/wake against a plain retry (`flaky`), per cycle
#      (about 20 s).
# Sizes: BENCH_WASM_CALLS (default 5000), BENCH_EXECUTIONS (10000), BENCH_HTTP_EXECUTIONS
# (3000), BENCH_HISTORY (200000), BENCH_REQUESTS (2000), BENCH_SECONDS (15, per API level),
# BENCH_WEBHOOKS (2000), BENCH_DEPLOYS (20), BENCH_IDLE_WINDOW_S (20), BENCH_STEP_EXECUTIONS (5,
# of BENCH_STEPS 100 steps each), BENCH_STEP_CYCLES (20).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

set -a
eval "$(scripts/test-db.sh up mariadb postgres)"
set +a
SKIP_PYTHON=1 scripts/build-guests.sh >&2

echo "== release build (one build shared by the benchmarks)" >&2
t0=$SECONDS
cargo build --release -p onestep-cli -p onestep-bench --bins
echo "release build: $((SECONDS - t0)) s"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"

echo "== wasm runtime"
"$TARGET/wasm-bench" "${BENCH_WASM_CALLS:-5000}"

echo "== outbound rate limit: overhead per request (docs/semantics.md#outbound-rate-limits)"
"$TARGET/outbound-limit-bench" "${BENCH_OUTBOUND_REQUESTS:-2000}" "$ONESTEP_TEST_MARIADB_URL" "$ONESTEP_TEST_POSTGRES_URL"

echo "== cached onestep check (shipped configs; the first run fills the compile cache)"
for config in $(find config -name '*.yaml' | sort); do
    "$TARGET/onestep" check "$config" >/dev/null 2>&1 || true
    start=$(date +%s%N)
    "$TARGET/onestep" check "$config" >/dev/null 2>&1 || echo "  (check of $config reported problems)"
    end=$(date +%s%N)
    printf '  %-40s %6d ms\n' "$config" "$(( (end - start) / 1000000 ))"
done

echo "== worker throughput (onestep bench, MariaDB)"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --server-url "$ONESTEP_TEST_MARIADB_URL"
echo "== the same without attempt diagnostics (their cost: compare completed/s with the run above)"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --server-url "$ONESTEP_TEST_MARIADB_URL" --no-diagnostics

echo "== worker throughput (onestep bench, PostgreSQL; same N and flags)"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --server-url "$ONESTEP_TEST_POSTGRES_URL"

echo "== fair claim on PostgreSQL: the same N over 1, 1,000 and 10,000 fairness keys (docs/benchmarks.md#fair-claim)"
for keys in 1 1000 10000; do
    echo "-- $keys fairness keys"
    "$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --server-url "$ONESTEP_TEST_POSTGRES_URL" --fairness-keys "$keys"
done

echo "== worker throughput (onestep bench, embedded SQLite file; same N and flags)"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --server-url sqlite://

echo "== SQLite: 3 processes on one file, each submitting and draining N/3 in its own namespace"
SQLITE_DIR="$(mktemp -d)"
SQLITE_DSN="sqlite://$SQLITE_DIR/bench.db"
"$TARGET/onestep" migrate --dsn "$SQLITE_DSN" >/dev/null
t0=$(date +%s%N)
pids=()
for i in 1 2 3; do
    "$TARGET/onestep" bench -n "$(( ${BENCH_EXECUTIONS:-10000} / 3 ))" --dsn "$SQLITE_DSN" \
        --namespace "bench-$i" >"$SQLITE_DIR/p$i.out" 2>&1 &
    pids+=("$!")
done
ok=1
for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
t1=$(date +%s%N)
for i in 1 2 3; do grep -E '^  (submit|completed):' "$SQLITE_DIR/p$i.out" | sed "s/^/  process $i:/" || tail -n 5 "$SQLITE_DIR/p$i.out"; done
echo "  3 processes: $(( ${BENCH_EXECUTIONS:-10000} / 3 * 3 )) executions submitted and drained in $(( (t1 - t0) / 1000000 )) ms wall (all ok: $ok)"
rm -rf "$SQLITE_DIR"

# The small-history variant of docs/benchmarks.md#history-at-scale (scripts/bench-history.sh
# runs 1M and 10M): the same runs with BENCH_HISTORY finished rows already in the table; compare
# completed/s and the buffer-pool reads per execution with the empty-table runs above.
echo "== with ${BENCH_HISTORY:-200000} finished executions in the table (MariaDB, PostgreSQL, then SQLite)"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --history "${BENCH_HISTORY:-200000}" \
    --server-url "$ONESTEP_TEST_MARIADB_URL"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --history "${BENCH_HISTORY:-200000}" \
    --server-url "$ONESTEP_TEST_POSTGRES_URL"
"$TARGET/onestep" bench -n "${BENCH_EXECUTIONS:-10000}" --history "${BENCH_HISTORY:-200000}" \
    --server-url sqlite://

echo "== outbound HTTP: 1,000 executions in flight in one worker, each waiting 1 s on a loopback server"
# A small variant of docs/benchmarks.md#outbound-http-1000-in-flight (about 5 s of drain).
"$TARGET/onestep" bench -n "${BENCH_HTTP_EXECUTIONS:-3000}" --concurrency 1000 --batch-size 500 \
    --http-delay-ms 1000 --handler component:guest-examples/out/fetch.wasm \
    --server-url "$ONESTEP_TEST_MARIADB_URL"

echo "== waiting callers: one onestep serve, 0 / 1,000 / 10,000 callers on ?wait=60, polled and notified, and the drain cost of LISTEN/NOTIFY (PostgreSQL; docs/benchmarks.md#waiting-callers)"
"$TARGET/waiters-bench" "$TARGET/onestep" "$ONESTEP_TEST_POSTGRES_URL" 0 1000 10000
echo "== waiting callers on MariaDB: 0 / 1,000 callers on ?wait=60, polled every 100 ms (the default) and every 50 ms (api.poll_ms; docs/benchmarks.md#waiting-callers)"
WAITERS_POLL_MS="100 50" "$TARGET/waiters-bench" "$TARGET/onestep" "$ONESTEP_TEST_MARIADB_URL" 0 1000

echo "== webhook deliveries: 2,000 completion webhooks to a loopback receiver (SQLite; docs/benchmarks.md#webhook-deliveries)"
"$TARGET/webhooks-bench" "" "${BENCH_WEBHOOKS:-2000}"

echo "== deployments: deploy -> first execution on the new version, a 12 MB component once per worker (SQLite; docs/benchmarks.md#deployments)"
# The large component is guest-examples/out/js-echo.wasm (12 MB, built above), cold then warm
# compile cache.
"$TARGET/deploy-bench" --onestep "$TARGET/onestep" --deploys "${BENCH_DEPLOYS:-20}" --skip-idle
echo "== deployments: an idle follower's cost per worker (counted on the wire; MariaDB, then PostgreSQL)"
for url in "$ONESTEP_TEST_MARIADB_URL" "$ONESTEP_TEST_POSTGRES_URL"; do
    "$TARGET/deploy-bench" --onestep "$TARGET/onestep" --server-url "$url" --skip-deploys \
        --skip-big --idle-window-s "${BENCH_IDLE_WINDOW_S:-20}"
done

echo "== HTTP API submit"
BENCH_REQUESTS="${BENCH_REQUESTS:-2000}" BENCH_SECONDS="${BENCH_SECONDS:-15}" \
    "$TARGET/api-bench"

echo "== durable steps: step save, resume with 1,000 recorded steps, park/wake vs a plain retry (MariaDB, PostgreSQL, SQLite; docs/benchmarks.md#durable-steps)"
"$TARGET/steps-bench" --onestep "$TARGET/onestep" --executions "${BENCH_STEP_EXECUTIONS:-5}" \
    --steps "${BENCH_STEPS:-100}" --cycles "${BENCH_STEP_CYCLES:-20}" --idle-s 1 \
    "$ONESTEP_TEST_MARIADB_URL" "$ONESTEP_TEST_POSTGRES_URL" sqlite://
