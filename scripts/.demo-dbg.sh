#!/usr/bin/env bash
# The main job end to end (README command 1), on a fresh machine of this kind, with NO database
# server: the execution store is an embedded SQLite file (docs/sqlite.md).
#   1. builds the `onestep` release binary (the install step: `cargo install --path host/cli
#      --locked` builds the same binary) and the example guest components,
#   2. creates the execution tables (`onestep migrate`) in target/demo/quickstart.db,
#   3. starts a worker on config/quickstart.yaml,
#   4. submits the `summarize` handler over real documents (licence texts the OS ships under
#      /usr/share/common-licenses, and this repository's docs/), one `flaky` execution that
#      succeeds on its third attempt, and one `fetch` execution whose handler calls a local HTTP
#      service over wasi:http (the worker's own /healthz, the only origin its sandbox allows),
#      and one that tries hostile spellings of that origin (a userinfo URL, an IP literal with a
#      trailing dot): the host refuses them and the handler sees an error value
#      (docs/security.md#hostile-tenants-and-clients-the-limits-at-a-glance),
#   5. waits for each, prints its status, attempts and result, and shows with `onestep attempts`
#      and `onestep logs` why the flaky one needed three attempts (messages, log lines, build digest),
#   6. reads the worker's Prometheus metrics and health (app.metrics_addr, docs/observability.md),
#   7. deploys a handler through the API as a tenant would (`onestep deploy`, config/deployments.yaml:
#      a worker whose file lists no task follows team-a's deployments), submits to it over HTTP,
#      shows the digest the attempt ran and a deploy over the operator's ceiling being refused,
#   8. scaffolds your own handler (`onestep new handler my-agent --lang rust --template agent`),
#      builds it, runs it under `onestep dev` (API, dashboard and worker in one process on an
#      embedded database beside it) against a loopback fake of an OpenAI-compatible endpoint
#      whose key only the host holds, submits over HTTP with the local token and prints the
#      answer,
#   9. stops the worker with SIGTERM (graceful drain) and reports its exit code.
# The same demo on a database server: `scripts/demo.sh --db mariadb` (the local MariaDB on
# 127.0.0.1:3306) or `--db postgres` (127.0.0.1:5432); it creates the database `onestep_demo`
# there and changes nothing else on the server. ONESTEP_DSN overrides the DSN of the chosen kind.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
log() { printf '\n== %s\n' "$*" >&2; }

DB=sqlite
while [ $# -gt 0 ]; do
    case "$1" in
        --db) DB="${2:-}"; shift 2 ;;
        --db=*) DB="${1#--db=}"; shift ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "demo.sh: unknown argument '$1' (allowed: --db sqlite|mariadb|postgres)" >&2; exit 2 ;;
    esac
done
mkdir -p "$ROOT/target/demo"

log "the onestep binary (release) and the guest components"
t0=$(date +%s)
true
BIN="$ROOT/target/debug/onestep"
echo "onestep release binary ready in $(( $(date +%s) - t0 )) s: $BIN" >&2
SKIP_PYTHON=1 SKIP_JS=1 scripts/build-guests.sh >&2
CONFIG="$ROOT/config/quickstart.yaml"

log "database ($DB)"
case "$DB" in
    sqlite)
        export ONESTEP_DB_TYPE=sqlite
        rm -f "$ROOT/target/demo/quickstart.db" "$ROOT/target/demo/quickstart.db-wal" "$ROOT/target/demo/quickstart.db-shm"
        export ONESTEP_DSN="${ONESTEP_DSN:-sqlite://$ROOT/target/demo/quickstart.db}"
        echo "embedded SQLite file target/demo/quickstart.db (no server)" >&2
        ;;
    mariadb|mysql)
        export ONESTEP_DB_TYPE=mysql
        if [ -z "${ONESTEP_DSN:-}" ]; then
            mariadb --no-defaults -h127.0.0.1 -P3306 -uroot \
                -e 'CREATE DATABASE IF NOT EXISTS onestep_demo CHARACTER SET utf8mb4' ||
                { echo "demo.sh: no MariaDB answers on 127.0.0.1:3306 as root (start it, or set ONESTEP_DSN)" >&2; exit 1; }
            export ONESTEP_DSN="mysql://root@127.0.0.1:3306/onestep_demo"
        fi
        ;;
    postgres)
        export ONESTEP_DB_TYPE=postgres
        if [ -z "${ONESTEP_DSN:-}" ]; then
            if ! psql -h127.0.0.1 -Upostgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'onestep_demo'" | grep -q 1; then
                psql -h127.0.0.1 -Upostgres -c 'CREATE DATABASE onestep_demo' >/dev/null ||
                    { echo "demo.sh: no PostgreSQL answers on 127.0.0.1:5432 as postgres (start it, or set ONESTEP_DSN)" >&2; exit 1; }
            fi
            export ONESTEP_DSN="postgres://postgres@127.0.0.1:5432/onestep_demo"
        fi
        ;;
    *) echo "demo.sh: --db must be sqlite, mariadb or postgres (got '$DB')" >&2; exit 2 ;;
esac

log "tables"
"$BIN" migrate "$CONFIG"

log "worker"
WORKER_LOG="$ROOT/target/demo/worker.log"
# The worker's metrics listener (app.metrics_addr), on a free loopback port; the `fetch` task's
# network allow-list names the same origin.
METRICS_PORT="${ONESTEP_DEMO_METRICS_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export ONESTEP_DEMO_METRICS_PORT="$METRICS_PORT"
METRICS="http://127.0.0.1:$METRICS_PORT"
"$BIN" run "$CONFIG" --log-level INFO >"$WORKER_LOG" 2>&1 &
WORKER_PID=$!
stop_worker() {
    if kill -0 "$WORKER_PID" 2>/dev/null; then
        kill -TERM "$WORKER_PID" 2>/dev/null || true
        wait "$WORKER_PID" 2>/dev/null || true
    fi
}
trap stop_worker EXIT
echo "worker pid $WORKER_PID, log $WORKER_LOG, metrics $METRICS/metrics" >&2

log "submissions"
status=0
RUN="$(date +%s)"
declare -a IDS=()
submit() { # TASK PAYLOAD KEY [FAIRNESS_KEY]
    local out id
    out="$("$BIN" submit "$1" --config "$CONFIG" --payload "$2" --key "$3" ${4:+--fairness-key "$4"} --json)"
    id="$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
    IDS+=("$id")
    printf '%-10s %-40s -> %s\n' "$1" "$2" "$id"
}
# Two end customers (fairness keys) share the task: the fair claim serves them in turn.
for doc in Apache-2.0 GPL-3 MPL-2.0 BSD Artistic; do
    submit summarize "{\"path\": \"/docs/$doc\"}" "demo-$RUN-$doc" tenant-a
done
for doc in lease-protocol.md state-machine.md; do
    submit summarize "{\"path\": \"/repo-docs/$doc\"}" "demo-$RUN-$doc" tenant-b
done
log "the queue by fairness key right after submitting (onestep list --by-key: waiting and running per key, every worker)"
"$BIN" list --by-key --config "$CONFIG" || status=1
submit flaky '{"succeed_on_attempt": 3}' "demo-$RUN-flaky"
# A handler calling a local HTTP service: the worker's own /healthz, through the allow-list.
for _ in $(seq 1 50); do curl -fsS "$METRICS/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
submit fetch "{\"url\": \"$METRICS/healthz\"}" "demo-$RUN-fetch"
submit fetch "{\"urls\": [\"http://demo@127.0.0.1:$METRICS_PORT/healthz\", \"http://127.0.0.1.:$METRICS_PORT/healthz\", \"$METRICS/healthz\"]}" "demo-$RUN-fetch-spellings"

log "results"
for id in "${IDS[@]}"; do
    if ! "$BIN" wait "$id" --config "$CONFIG" --timeout 120 --json >"$ROOT/target/demo/$id.json"; then
        status=1
    fi
    "$BIN" result "$id" --config "$CONFIG" --json >"$ROOT/target/demo/$id.result.json" || status=1
    python3 - "$ROOT/target/demo/$id.json" "$ROOT/target/demo/$id.result.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2])).get("result")
head = f'{e["id"]}  {e["task_name"]:<9} {e["status"]:<9} attempts={e["attempts"]}'
if e["status"] != "succeeded":
    print(f'{head}  error={json.dumps(e.get("error"))}')
elif e["task_name"] == "fetch" and isinstance(r, dict) and "errors" in r:
    print(f'{head}  {r.get("ok")} ok; refused by the host: {json.dumps(r.get("errors"))}; per URL: {r.get("results")}')
elif e["task_name"] == "fetch" and isinstance(r, dict):
    j = r.get("json") or {}
    tasks = ", ".join(f'{t.get("task")}:{"alive" if (t.get("source") or {}).get("alive") else "down"}' for t in j.get("tasks", []))
    print(f'{head}  HTTP {r.get("status")}, {r.get("bytes")} bytes: worker health {j.get("status")!r}, tasks {tasks}')
elif e["task_name"] == "summarize" and isinstance(r, dict):
    terms = ", ".join(f'{t["term"]}:{t["count"]}' if isinstance(t, dict) else str(t) for t in (r.get("top_terms") or [])[:5])
    print(f'{head}  {r.get("path", "")}: lines={r.get("lines")} words={r.get("words")} bytes={r.get("bytes")} sha256={str(r.get("sha256", ""))[:16]}…  top: {terms}')
else:
    print(f'{head}  result={json.dumps(r)}')
PY
done

log "why the flaky execution needed three attempts (onestep attempts: each attempt's message and build)"
FLAKY_ID="${IDS[7]}"
"$BIN" attempts "$FLAKY_ID" --config "$CONFIG" | grep -E '^attempt|message|component_digest' || status=1
"$BIN" logs "$FLAKY_ID" --config "$CONFIG" --attempt 1 || status=1

log "worker metrics ($METRICS/metrics), health ($METRICS/healthz) and readiness ($METRICS/readyz)"
curl -sS "$METRICS/metrics" | grep -E '^onestep_(tasks_processed_total|tasks_retried_total|deliveries_fetched_total|inflight_tasks)\{' || status=1
curl -sS "$METRICS/healthz"; echo
curl -sS "$METRICS/readyz"; echo

log "a tenant deploys a handler through the API (no YAML edit, no file copy, no restart)"
# config/deployments.yaml: `onestep serve` takes deploys from team-a's deploy token and checks
# them against the operator's ceiling; `onestep run` follows team-a's deployments (same store).
DEPLOY_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export ONESTEP_DEMO_DEPLOY_PORT="$DEPLOY_PORT"
DEPLOY_API="http://127.0.0.1:$DEPLOY_PORT"
DEPLOY_TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
SUBMIT_TOKEN="$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export ONESTEP_API_TOKENS="$DEPLOY_TOKEN=team-a:deploy,$SUBMIT_TOKEN=team-a:submit"
DEPLOYMENTS="$ROOT/config/deployments.yaml"
"$BIN" serve "$DEPLOYMENTS" --log-level WARNING >"$ROOT/target/demo/deploy-api.log" 2>&1 &
DEPLOY_API_PID=$!
"$BIN" run "$DEPLOYMENTS" --log-level INFO >"$ROOT/target/demo/deploy-worker.log" 2>&1 &
DEPLOY_WORKER_PID=$!
stop_deploy() {
    kill -TERM "$DEPLOY_API_PID" "$DEPLOY_WORKER_PID" 2>/dev/null || true
    wait "$DEPLOY_API_PID" "$DEPLOY_WORKER_PID" 2>/dev/null || true
}
trap 'stop_deploy; stop_worker' EXIT
for _ in $(seq 1 100); do curl -fsS "$DEPLOY_API/healthz" >/dev/null 2>&1 && break; sleep 0.2; done
echo "config/deployments.yaml lists no task: its worker serves what team-a deploys" >&2
"$BIN" deploy guest-examples/deploy/greet.yaml --api "$DEPLOY_API" --token "$DEPLOY_TOKEN" --note "first version" || status=1
GREET_ID="$(curl -fsS -X POST "$DEPLOY_API/v1/executions" -H "Authorization: Bearer $SUBMIT_TOKEN" \
    -H "Idempotency-Key: demo-$RUN-greet" -H 'Content-Type: application/json' \
    -d '{"task_name": "greet", "payload": {"hello": "team-a"}}' \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "submitted greet (team-a) -> $GREET_ID; the worker picks the deployment up within seconds" >&2
"$BIN" wait "$GREET_ID" --api "$DEPLOY_API" --token "$SUBMIT_TOKEN" --timeout 60 | grep -E '^(task_name|status|attempts):' || status=1
echo "result: $(curl -fsS "$DEPLOY_API/v1/executions/$GREET_ID/result" -H "Authorization: Bearer $SUBMIT_TOKEN")"
"$BIN" attempts "$GREET_ID" --config "$DEPLOYMENTS" --namespace team-a | grep -E 'component_digest' || status=1
echo "a deploy over team-a's ceiling is refused, naming each limit (nothing is written):" >&2
sed 's/^concurrency: 2/concurrency: 16/' guest-examples/deploy/greet.yaml >"$ROOT/target/demo/greedy.yaml"
if "$BIN" deploy "$ROOT/target/demo/greedy.yaml" --component guest-examples/out/echo.wasm \
    --api "$DEPLOY_API" --token "$DEPLOY_TOKEN"; then
    echo "the greedy deploy was accepted" >&2; status=1
fi
"$BIN" deployments list --api "$DEPLOY_API" --token "$SUBMIT_TOKEN" || status=1
stop_deploy
trap stop_worker EXIT

log "your own handler: scaffold an LLM agent, run it under onestep dev (API + dashboard + worker, embedded database), submit over HTTP"
# Outside the repository (a scaffold is its own Cargo project); one shared cargo target dir.
AGENT_WORK="$(mktemp -d "${TMPDIR:-/tmp}/onestep-demo-agent.XXXXXX")"
AGENT_DIR="$AGENT_WORK/my-agent"
"$BIN" new handler my-agent --lang rust --template agent --dir "$AGENT_DIR" >&2
t0=$(date +%s)
(cd "$AGENT_DIR" && env -u CARGO_TARGET_DIR cargo build --quiet --release --target-dir "$ROOT/target/scaffold")
mkdir -p "$AGENT_DIR/target/wasm32-wasip2/release"
cp "$ROOT/target/scaffold/wasm32-wasip2/release/my_agent.wasm" "$AGENT_DIR/target/wasm32-wasip2/release/"
echo "scaffold built in $(( $(date +%s) - t0 )) s: $AGENT_DIR" >&2
# A loopback stand-in for an OpenAI-compatible endpoint: it answers only requests that carry the
# key, which the host injects (sandbox.network.headers); the handler never sees it.
export OPENAI_API_KEY="sk-demo-$RANDOM$RANDOM"
python3 -u scripts/lib/fake-openai.py --key "$OPENAI_API_KEY" >"$AGENT_WORK/llm.out" 2>"$AGENT_WORK/llm.err" &
LLM_PID=$!
LLM_PORT=""
for _ in $(seq 1 100); do
    LLM_PORT="$(sed -n 's/^port \([0-9]*\).*/\1/p' "$AGENT_WORK/llm.out" | head -n 1)"
    [ -n "$LLM_PORT" ] && break
    sleep 0.1
done
export LLM_ORIGIN="http://127.0.0.1:$LLM_PORT"
DEV_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
(cd "$AGENT_DIR" && exec env -u ONESTEP_DSN -u ONESTEP_DB_TYPE "$BIN" dev handler.yaml --listen "127.0.0.1:$DEV_PORT" --log-level warn) \
    >"$AGENT_WORK/dev.out" 2>"$AGENT_WORK/dev.err" &
DEV_PID=$!
stop_all() {
    stop_worker
    kill -TERM "$DEV_PID" "$LLM_PID" 2>/dev/null || true
    rm -rf "$AGENT_WORK"
}
trap stop_all EXIT
TOKEN=""
for _ in $(seq 1 300); do
    TOKEN="$(sed -n 's/^onestep dev: dashboard .* token \([0-9a-f]*\) .*/\1/p' "$AGENT_WORK/dev.out" | head -n 1)"
    [ -n "$TOKEN" ] && break
    kill -0 "$DEV_PID" 2>/dev/null || { cat "$AGENT_WORK/dev.err" >&2; echo "onestep dev exited" >&2; exit 1; }
    sleep 0.1
done
[ -n "$TOKEN" ] || { cat "$AGENT_WORK/dev.err" >&2; echo "onestep dev printed no start line" >&2; exit 1; }
sed -n '1p' "$AGENT_WORK/dev.out" | sed "s/$TOKEN/<token>/" >&2
API="http://127.0.0.1:$DEV_PORT"
AGENT_ID="$(curl -fsS -X POST "$API/v1/executions" -H "Authorization: Bearer $TOKEN" \
    -H "Idempotency-Key: demo-$RUN-agent" -H 'Content-Type: application/json' \
    -d '{"task_name": "my-agent", "payload": {"prompt": "Name three prime numbers."}}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "submitted my-agent over HTTP -> $AGENT_ID" >&2
# One request that answers as soon as the execution is terminal (?wait=S, at most 60 s), no polling.
AGENT_STATUS=""
for _ in 1 2; do
    AGENT_STATUS="$(curl -fsS "$API/v1/executions/$AGENT_ID?wait=60" -H "Authorization: Bearer $TOKEN" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')"
    case "$AGENT_STATUS" in succeeded|failed|cancelled|expired) break ;; esac
done
echo "$AGENT_ID  my-agent  $AGENT_STATUS  result=$(curl -fsS "$API/v1/executions/$AGENT_ID/result" -H "Authorization: Bearer $TOKEN")"
[ "$AGENT_STATUS" = succeeded ] || status=1
kill -TERM "$DEV_PID"
set +e
wait "$DEV_PID"
dev_exit=$?
set -e
echo "onestep dev exited with code $dev_exit (SIGTERM: API stopped, worker drained)" >&2
[ "$dev_exit" -eq 0 ] || status=1

log "stopping the worker (SIGTERM, graceful drain)"
kill -TERM "$WORKER_PID"
set +e
wait "$WORKER_PID"
worker_exit=$?
set -e
echo "worker exited with code $worker_exit" >&2
tail -n 3 "$WORKER_LOG" >&2
[ "$worker_exit" -eq 0 ] || status=1
exit "$status"
