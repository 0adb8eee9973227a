#!/usr/bin/env bash
# Builds every example onestep handler into guest-examples/out/<name>.wasm.
#
#   scripts/build-guests.sh            # Rust guests + the Python and JavaScript guests
#   SKIP_PYTHON=1 scripts/build-guests.sh   # without the Python guests
#   SKIP_JS=1 scripts/build-guests.sh       # without the JavaScript guests
#
# Idempotent: cargo only rebuilds what changed, outputs are only replaced when
# their bytes change, and the Python and JavaScript guests are rebuilt only when
# their sources or the WIT are newer than their output. Installs what it needs on
# a fresh machine: the wasm32-wasip2 rust target (rustup), componentize-py (pip,
# into guest-examples/.venv) and componentize-js (npm, the version pinned in
# guest-examples/package.json, into guest-examples/node_modules; nothing global).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GUESTS="$ROOT/guest-examples"
OUT="$GUESTS/out"
# The components of the Rust workspace. Its library crate `durable` (onestep-durable, the step
# helper the 0.3.0 guests share) is built with them but has no .wasm of its own: not listed.
RUST_GUESTS=(echo summarize countdown flaky misbehave not-a-handler bad-import fetch agent inspect future-world steps steps-http)
COMPONENTIZE_PY_VERSION="0.25.1"
# Python guests: <dir>:<world of wit/v0.2>, built from <dir>/app.py to out/<dir>.wasm. World
# `compute` for a handler without network (componentize-py imports every interface of its
# world, and a wasi:http import needs sandbox.network.allow); `handler` imports wasi:http.
PY_GUESTS=(python-echo:compute python-agent:handler)
# JavaScript guests: <dir>:<source file> under guest-examples/, built to out/<dir>.wasm.
JS_GUESTS=(js-echo:echo.js js-countdown:countdown.js)

mkdir -p "$OUT"
# Serialise concurrent runs (e.g. several test processes building at once).
exec 9>"$OUT/.build.lock"
flock 9

# The caller's cargo settings belong to the host build, not to this workspace.
unset CARGO_TARGET_DIR CARGO_BUILD_TARGET RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS
TARGET_DIR="${GUEST_TARGET_DIR:-$GUESTS/target}"

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    echo "build-guests: adding rust target wasm32-wasip2" >&2
    rustup target add wasm32-wasip2
fi

echo "build-guests: cargo build --release --target wasm32-wasip2 (workspace $GUESTS)" >&2
(cd "$GUESTS" && cargo build --release --target wasm32-wasip2 --target-dir "$TARGET_DIR")

install_if_changed() { # src dst
    if ! cmp -s "$1" "$2"; then
        cp "$1" "$2.tmp" && mv "$2.tmp" "$2"
        echo "build-guests: updated $2" >&2
    fi
}

for name in "${RUST_GUESTS[@]}"; do
    # A library crate's artifact has `_` for `-` (bad-import -> bad_import.wasm); a binary's keeps it.
    built="$TARGET_DIR/wasm32-wasip2/release/$name.wasm"
    [[ -f "$built" ]] || built="$TARGET_DIR/wasm32-wasip2/release/${name//-/_}.wasm"
    install_if_changed "$built" "$OUT/$name.wasm"
done

# Whether $1 is missing or older than any file under the other arguments.
stale() {
    local out="$1"
    shift
    [[ ! -f "$out" ]] && return 0
    [[ -n "$(find "$@" -newer "$out" -type f -not -path '*/__pycache__/*' -print -quit)" ]]
}

if [[ "${SKIP_PYTHON:-0}" != "1" ]]; then
    for entry in "${PY_GUESTS[@]}"; do
        dir="${entry%%:*}"
        world="${entry#*:}"
        py_out="$OUT/$dir.wasm"
        stale "$py_out" "$GUESTS/$dir" "$ROOT/wit" || continue
        VENV="$GUESTS/.venv"
        if [[ ! -x "$VENV/bin/componentize-py" ]]; then
            echo "build-guests: installing componentize-py $COMPONENTIZE_PY_VERSION into $VENV" >&2
            python3 -m venv "$VENV"
            "$VENV/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY_VERSION"
        fi
        echo "build-guests: componentize-py (world $world) -> $py_out" >&2
        (cd "$GUESTS/$dir" && "$VENV/bin/componentize-py" -d "$ROOT/wit/v0.2" -w "$world" \
            componentize app -o "$py_out.tmp")
        mv "$py_out.tmp" "$py_out"
    done
fi

if [[ "${SKIP_JS:-0}" != "1" ]]; then
    CJS="$GUESTS/node_modules/.bin/componentize-js"
    for entry in "${JS_GUESTS[@]}"; do
        dir="${entry%%:*}"
        src="${entry#*:}"
        js_out="$OUT/$dir.wasm"
        stale "$js_out" "$GUESTS/$dir" "$ROOT/wit" "$GUESTS/package.json" || continue
        if [[ ! -x "$CJS" ]]; then
            echo "build-guests: npm install (componentize-js as pinned in guest-examples/package.json)" >&2
            (cd "$GUESTS" && npm install --no-audit --no-fund --loglevel=error)
        fi
        echo "build-guests: componentize-js -> $js_out" >&2
        # World `compute` of 0.2.0 (no wasi:http); `-d http -d fetch-event` keeps the
        # JavaScript runtime's own HTTP support out of the component.
        (cd "$GUESTS/$dir" && "$CJS" "$src" -w "$ROOT/wit/v0.2" -n compute \
            -d http -d fetch-event -o "$js_out.tmp")
        mv "$js_out.tmp" "$js_out"
    done
fi

echo "build-guests: built:" >&2
for f in "$OUT"/*.wasm; do
    printf '  %s (%s bytes)\n' "$f" "$(stat -c %s "$f")"
done
