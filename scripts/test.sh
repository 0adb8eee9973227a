#!/usr/bin/env bash
# Runs every onestep test on a fresh machine of this kind (README command 2):
#   1. brings up the test databases (a private MariaDB on 3308, a real Oracle MySQL on 3307, PostgreSQL
#      on 5432),
#   2. installs Debian's chromium + chromium-driver for the dashboard's browser tests (apt, once),
#   3. builds the example guest components (wasm32-wasip2; the Python one with componentize-py),
#   4. prepares the reference Python implementation's venv for the interop test, and a venv with
#      schemathesis for the API fuzzing test, and one with standardwebhooks (the webhook
#      signature verifier),
#   5. runs every test with cargo-nextest (`cargo nextest run --workspace`: each test in its own
#      process, the test binaries side by side; settings in .config/nextest.toml), then the doc
#      tests with `cargo test --doc` (one shared target directory; the binary is built once).
#      Without cargo-nextest on the machine it falls back to `cargo test --workspace`.
# Extra arguments go to the test runner (e.g. `scripts/test.sh -p onestep-mysql`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "== test databases" >&2
set -a
eval "$(scripts/test-db.sh up)"
set +a
echo "MariaDB: $ONESTEP_TEST_MARIADB_URL" >&2
echo "MySQL:   $ONESTEP_TEST_MYSQL_URL" >&2
echo "Postgres: $ONESTEP_TEST_POSTGRES_URL" >&2

echo "== headless Chromium + chromedriver (dashboard browser tests)" >&2
set -a
eval "$(scripts/test-browser.sh)"
set +a

echo "== guest components" >&2
scripts/build-guests.sh >&2

if [ -x scripts/ref-venv.sh ]; then
    echo "== reference implementation venv (interop tests)" >&2
    ONESTEP_REF_VENV="${ONESTEP_REF_VENV:-$ROOT/target/ref-venv}"
    export ONESTEP_REF_VENV
    scripts/ref-venv.sh >&2
fi

echo "== schemathesis venv (API fuzzing test)" >&2
ONESTEP_SCHEMATHESIS="$(scripts/schemathesis-venv.sh)"
export ONESTEP_SCHEMATHESIS

echo "== standardwebhooks venv (webhook signature verifier)" >&2
ONESTEP_WEBHOOKS_PYTHON="$(scripts/webhooks-venv.sh)"
export ONESTEP_WEBHOOKS_PYTHON

echo "== build: the onestep binary (shared by the end-to-end tests) and every test target" >&2
# One build with the same feature set `cargo test --workspace` uses (dev-dependencies enable e.g.
# tokio's test-util), so the test run below reuses every artifact instead of compiling twice.
cargo build --workspace --all-targets
ONESTEP_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/onestep"
export ONESTEP_BIN
scripts/check-scaffolds.sh >&2   # the nine `onestep new handler` scaffolds build and run one payload

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
if command -v cargo-nextest >/dev/null 2>&1; then
    echo "== cargo nextest run (every test), then the doc tests" >&2
    cargo nextest run --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    cargo test --workspace --doc "$@" 2>&1 | tee -a "$log"
    doc_status=${PIPESTATUS[0]}
    [ "$status" -eq 0 ] && status=$doc_status
else
    echo "== cargo test (cargo-nextest not found: one test binary after another)" >&2
    cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
fi
set -e
# One closing line over every test (nextest's summary, the doc tests' "test result:" lines):
# "tests: N passed, M failed".
echo "servers: MariaDB $ONESTEP_TEST_MARIADB_URL, MySQL $ONESTEP_TEST_MYSQL_URL, PostgreSQL $ONESTEP_TEST_POSTGRES_URL" >&2
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^ *Summary \[/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
