#!/usr/bin/env bash
# schemathesis-venv.sh: create (idempotently) a Python venv holding schemathesis, the
# property-based HTTP API tester that tests/tests/e2e/schemathesis.rs runs against
# `onestep serve`'s /openapi.json (docs/security.md#api-fuzzing).
#
# Usage: scripts/schemathesis-venv.sh      # venv at $ONESTEP_SCHEMATHESIS_VENV, default target/schemathesis-venv
# Prints the path of the `schemathesis` command on stdout. Exit != 0 (pip's output on stderr)
# when it cannot be installed (e.g. no network): the e2e test then FAILS, it never skips.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ONESTEP_SCHEMATHESIS_VENV:-$ROOT/target/schemathesis-venv}
VERSION=4.32.5
PY=${PYTHON:-python3}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
have() { [[ -x $VENV/bin/schemathesis ]] && [[ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null)" == "$VERSION" ]]; }
if ! have; then
  echo "[schemathesis-venv] creating $VENV (schemathesis==$VERSION)" >&2
  "$PY" -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$VERSION" >&2 \
    || { echo "[schemathesis-venv] ERROR: pip could not install schemathesis (network?)" >&2; exit 1; }
  have || { echo "[schemathesis-venv] ERROR: installed schemathesis does not match $VERSION" >&2; exit 1; }
fi
echo "$VENV/bin/schemathesis"
