#!/usr/bin/env bash
# Checks every `onestep new handler` scaffold: the nine combinations of --lang rust|python|js and
# --template compute|http|agent are written into a temporary directory outside the repository,
# built with nothing but their own files and the language's pinned tool, and each runs its
# payloads with `onestep task run` (no database):
#   compute -> its sample payload, the greeting, made in the step `greeting` (missed, saved);
#              again with `--steps` holding that step: the recorded message, loaded, none saved;
#              a name over the 1 MiB step cap: a fatal error naming the key and the cap;
#   http    -> a file served by a loopback `python3 -m http.server` (FETCH_ORIGIN), the step
#              `fetch`; again for another URL with `--steps` holding the first result: that result;
#   agent   -> its sample payload against scripts/lib/fake-openai.py on loopback (LLM_ORIGIN),
#              which answers only with the key the host injects (OPENAI_API_KEY) and a request
#              body with Content-Length, the model call the step `model-0`; again with `--steps`
#              holding that step: the same answer, and the fake counts no new request; then a 429
#              from it, which must be a retryable error.
# The results are asserted; one line per combination with its build and run times.
#
#   scripts/check-scaffolds.sh                 # all nine (after scripts/build-guests.sh)
#   ONESTEP_BIN=target/release/onestep scripts/check-scaffolds.sh
#   SCAFFOLD_LANGS="rust js" SCAFFOLD_TEMPLATES=agent scripts/check-scaffolds.sh
#
# Tools, shared so that it stays fast: one cargo target directory for the Rust scaffolds
# (SCAFFOLD_TARGET_DIR, default target/scaffold, as tests/tests/e2e/scaffold.rs), the
# componentize-py venv and the componentize-js node_modules that scripts/build-guests.sh installs
# under guest-examples/ (the same pinned versions the scaffolds name; a unit test of
# host/cli/src/commands/new checks they match).
#
# The first `task run` of a Python or JavaScript component compiles it (CPython or SpiderMonkey,
# 13-18 MB): seconds in a release binary, up to ten minutes each in a debug one on a busy
# machine (later runs take it from the compile cache). So the Python and JavaScript task runs use
# ONESTEP_GUEST_BIN, default target/release/onestep when it exists (else ONESTEP_BIN); scaffolding
# and the Rust runs always use ONESTEP_BIN.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ONESTEP_BIN:-$ROOT/target/debug/onestep}"
case "$BIN" in /*) ;; *) BIN="$ROOT/$BIN" ;; esac
LANGS=(${SCAFFOLD_LANGS:-rust python js})
TEMPLATES=(${SCAFFOLD_TEMPLATES:-compute http agent})
TARGET_DIR="${SCAFFOLD_TARGET_DIR:-$ROOT/target/scaffold}"
VENV="$ROOT/guest-examples/.venv"
NODE_MODULES="$ROOT/guest-examples/node_modules"

die() { echo "check-scaffolds: $*" >&2; exit 1; }
[[ -x "$BIN" ]] || die "no onestep binary at $BIN (cargo build -p onestep-cli, or set ONESTEP_BIN)"
GUEST_BIN="${ONESTEP_GUEST_BIN:-}"
if [[ -z "$GUEST_BIN" ]]; then
    GUEST_BIN="$BIN"
    [[ -x "$ROOT/target/release/onestep" ]] && GUEST_BIN="$ROOT/target/release/onestep"
fi
case "$GUEST_BIN" in /*) ;; *) GUEST_BIN="$ROOT/$GUEST_BIN" ;; esac
[[ -x "$GUEST_BIN" ]] || die "no onestep binary at $GUEST_BIN (ONESTEP_GUEST_BIN)"
for lang in "${LANGS[@]}"; do
    case "$lang" in
    python) [[ -x "$VENV/bin/componentize-py" ]] || die "no $VENV/bin/componentize-py: run scripts/build-guests.sh" ;;
    js) [[ -x "$NODE_MODULES/.bin/componentize-js" ]] || die "no $NODE_MODULES/.bin/componentize-js: run scripts/build-guests.sh" ;;
    rust) ;;
    *) die "unknown language $lang" ;;
    esac
done

# The caller's cargo settings belong to the host build, not to the scaffolds.
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS

WORK="$(mktemp -d "${TMPDIR:-/tmp}/onestep-scaffolds.XXXXXX")"
case "$WORK/" in "$ROOT"/*) die "the temporary directory $WORK is inside the repository" ;; esac
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

# Starts `$@` in the background (stdout to $1's file) and prints the port of its first
# stdout line ("port N", or http.server's "Serving HTTP on 127.0.0.1 port N ...").
start_server() { # out-file command...
    local out="$1"
    shift
    "$@" >"$out" 2>"$out.err" &
    PIDS+=("$!")
    local port=""
    for _ in $(seq 1 100); do
        port="$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$out" | head -n 1)"
        [[ -n "$port" ]] && break
        kill -0 "${PIDS[-1]}" 2>/dev/null || die "$* exited: $(cat "$out.err")"
        sleep 0.1
    done
    [[ -n "$port" ]] || die "$* printed no port"
    echo "$port"
}

mkdir -p "$WORK/www"
echo "hello from check-scaffolds" >"$WORK/www/hello.txt"
WWW_PORT="$(start_server "$WORK/www.out" python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$WORK/www")"
KEY="sk-check-$RANDOM$RANDOM"
LLM_PORT="$(start_server "$WORK/llm.out" python3 -u "$ROOT/scripts/lib/fake-openai.py" --key "$KEY")"
# The chat-completions requests the fake has received so far.
model_requests() {
    python3 -c 'import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))["chat_completions"])' \
        "http://127.0.0.1:$LLM_PORT/requests"
}
# A compute payload whose greeting is over the 1 MiB a step may hold.
BIG_PAYLOAD="$WORK/big-payload.json"
python3 -c 'import json, sys; json.dump({"name": "x" * 1100000}, open(sys.argv[1], "w"))' "$BIG_PAYLOAD"

# Asserts on a `task run --json` report: python3 -c CODE with `r` the report and `code` the exit.
expect() { # what report-file exit-code python-condition
    if ! python3 - "$2" "$3" "$4" <<'PY'
import json, sys
report, code, cond = sys.argv[1:]
r = json.load(open(report))
sys.exit(0 if eval(cond, {"r": r, "code": int(code)}) else 1)
PY
    then
        die "$1: expected $4, got exit $3: $(cat "$2")"
    fi
}

build() { # lang template name dir
    local lang="$1" template="$2" name="$3" dir="$4" world=compute
    [[ "$template" == compute ]] || world=handler
    case "$lang" in
    rust)
        (cd "$dir" && cargo build --quiet --release --target-dir "$TARGET_DIR")
        mkdir -p "$dir/target/wasm32-wasip2/release"
        cp "$TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm" "$dir/target/wasm32-wasip2/release/"
        ;;
    python)
        (cd "$dir" && "$VENV/bin/componentize-py" -d wit -w "$world" componentize app -o "$name.wasm" >/dev/null)
        ;;
    js)
        # package.json's own build command, with the pinned tool already installed.
        ln -s "$NODE_MODULES" "$dir/node_modules"
        (cd "$dir" && npm run --silent build >/dev/null)
        ;;
    esac
}

run() { # lang name dir env... -- task-run-args...   (YAML: the app file, default handler.yaml)
    local bin="$GUEST_BIN" name="$2" dir="$3"
    [[ "$1" == rust ]] && bin="$BIN"
    shift 3
    local envs=()
    while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done
    shift
    set +e
    (cd "$dir" && env "${envs[@]}" "$bin" task run "${YAML:-handler.yaml}" "$name" --json --log-level warn "$@" \
        >"$WORK/report.json" 2>"$WORK/report.err")
    local code=$?
    # wasmtime seals the memory image it builds for a component (F_ADD_SEALS); the kernel has
    # been seen to answer EBUSY once for the large JavaScript component, a host transient: one
    # more run, said on stderr, and any other failure stands.
    if [[ $code -ne 0 ]] && grep -qs "cannot add seals to the memfd" "$WORK/report.json" "$WORK/report.err"; then
        echo "check-scaffolds: $name: the kernel refused to seal wasmtime's memory image (transient EBUSY); running it once more" >&2
        (cd "$dir" && env "${envs[@]}" "$bin" task run "${YAML:-handler.yaml}" "$name" --json --log-level warn "$@" \
            >"$WORK/report.json" 2>"$WORK/report.err")
        code=$?
    fi
    set -e
    echo "$code"
}

started=$SECONDS
for lang in "${LANGS[@]}"; do
    for template in "${TEMPLATES[@]}"; do
        name="$lang-$template"
        dir="$WORK/$name"
        t0=$SECONDS
        "$BIN" new handler "$name" --lang "$lang" --template "$template" --dir "$dir" >/dev/null
        grep -q '^api:' "$dir/handler.yaml" || die "$name: handler.yaml has no api: section"
        build "$lang" "$template" "$name" "$dir"
        t1=$SECONDS
        report="$WORK/report.json"
        case "$template" in
        compute)
            code="$(run "$lang" "$name" "$dir" -- --payload @payload.json)"
            expect "$name" "$report" "$code" \
                'code == 0 and r["result"] == {"message": "Hello, world!", "attempt": 1} and r["steps"] == {"preloaded": 0, "loaded": 0, "missed": 1, "saved": 1}'
            # A resumed attempt: the step recorded, its work not done again.
            echo '{"greeting": "Recorded, world!"}' >"$WORK/steps.json"
            code="$(run "$lang" "$name" "$dir" -- --payload @payload.json --steps "$WORK/steps.json")"
            expect "$name (--steps)" "$report" "$code" \
                'code == 0 and r["result"] == {"message": "Recorded, world!", "attempt": 1} and r["steps"] == {"preloaded": 1, "loaded": 1, "missed": 0, "saved": 0}'
            # A value over the step cap (1 MiB): fatal, with the key and the cap. With more memory
            # than the template's 64 MiB: JavaScript's JSON.stringify of a 1 MB string peaks at
            # ~80 MB (at 64 MiB it fails first, "out of memory").
            sed 's/memory_limit_bytes: 67108864/memory_limit_bytes: 268435456/' "$dir/handler.yaml" >"$dir/handler-big.yaml"
            grep -q 'memory_limit_bytes: 268435456' "$dir/handler-big.yaml" || die "$name: handler.yaml has no memory_limit_bytes: 67108864 to raise"
            code="$(YAML=handler-big.yaml run "$lang" "$name" "$dir" -- --payload "@$BIG_PAYLOAD")"
            expect "$name (step cap)" "$report" "$code" \
                'code == 3 and r["error"]["retryable"] is False and r["error"]["message"].startswith("step '"'"'greeting'"'"' not saved: ") and "1 MiB" in r["error"]["message"] and r["steps"]["saved"] == 0'
            ;;
        http)
            origin="http://127.0.0.1:$WWW_PORT"
            code="$(run "$lang" "$name" "$dir" "FETCH_ORIGIN=$origin" -- --payload "{\"url\": \"$origin/hello.txt\"}")"
            expect "$name" "$report" "$code" \
                "code == 0 and r['result']['status'] == 200 and r['result']['text'] == 'hello from check-scaffolds\n' and r['result']['url'] == '$origin/hello.txt' and r['steps']['saved'] == 1"
            # Resumed with the step `fetch` recorded: its value, not a fetch of the new URL.
            python3 -c 'import json, sys; json.dump({"fetch": json.load(open(sys.argv[1]))["result"]}, open(sys.argv[2], "w"))' \
                "$report" "$WORK/steps.json"
            code="$(run "$lang" "$name" "$dir" "FETCH_ORIGIN=$origin" -- --payload "{\"url\": \"$origin/missing.txt\"}" --steps "$WORK/steps.json")"
            expect "$name (--steps)" "$report" "$code" \
                "code == 0 and r['result']['url'] == '$origin/hello.txt' and r['result']['status'] == 200 and r['steps'] == {'preloaded': 1, 'loaded': 1, 'missed': 0, 'saved': 0}"
            ;;
        agent)
            envs=("LLM_ORIGIN=http://127.0.0.1:$LLM_PORT" "OPENAI_API_KEY=$KEY")
            asked="$(model_requests)"
            code="$(run "$lang" "$name" "$dir" "${envs[@]}" -- --payload @payload.json)"
            expect "$name" "$report" "$code" \
                'code == 0 and r["result"] == {"answer": "echo: Name three prime numbers.", "model": "gpt-4o-mini", "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}} and r["steps"] == {"preloaded": 0, "loaded": 0, "missed": 1, "saved": 1}'
            [[ "$(model_requests)" == "$((asked + 1))" ]] || die "$name: expected one model request, the fake counted $(( $(model_requests) - asked ))"
            # A resumed attempt with the model call `model-0` recorded: the same answer, and no
            # request to the model.
            python3 -c 'import json, sys; json.dump({"model-0": json.load(open(sys.argv[1]))["result"]}, open(sys.argv[2], "w"))' \
                "$report" "$WORK/steps.json"
            asked="$(model_requests)"
            code="$(run "$lang" "$name" "$dir" "${envs[@]}" -- --payload @payload.json --steps "$WORK/steps.json")"
            expect "$name (--steps)" "$report" "$code" \
                'code == 0 and r["result"] == {"answer": "echo: Name three prime numbers.", "model": "gpt-4o-mini", "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}} and r["steps"] == {"preloaded": 1, "loaded": 1, "missed": 0, "saved": 0}'
            [[ "$(model_requests)" == "$asked" ]] || die "$name: the resumed attempt asked the model again ($(( $(model_requests) - asked )) requests)"
            code="$(run "$lang" "$name" "$dir" "${envs[@]}" -- --payload '{"prompt": "status:429"}')"
            expect "$name (429)" "$report" "$code" \
                'code == 3 and r["error"]["retryable"] is True and r["error"]["retry_after_ms"] == 7000 and "429" in r["error"]["message"]'
            ;;
        esac
        printf 'check-scaffolds: %-15s ok (build %3ss, task run %3ss)\n' "$name" "$((t1 - t0))" "$((SECONDS - t1))" >&2
    done
done
printf 'check-scaffolds: %d scaffolds built and ran in %ss (%s)\n' \
    "$((${#LANGS[@]} * ${#TEMPLATES[@]}))" "$((SECONDS - started))" "$BIN; python/js task runs: $GUEST_BIN" >&2
