#!/usr/bin/env bash
# webhooks-venv.sh: create (idempotently) a Python venv holding `standardwebhooks`, the
# reference implementation of the Standard Webhooks signature, which tests/tests/e2e/webhooks.rs
# uses as an independent verifier of the completion webhooks' signatures
# (docs/http-api.md#verifying-a-delivery).
#
# Usage: scripts/webhooks-venv.sh      # venv at $ONESTEP_WEBHOOKS_VENV, default target/webhooks-venv
# Prints the path of the venv's `python` on stdout. Exit != 0 (pip's output on stderr) when it
# cannot be installed (e.g. no network): the e2e test then FAILS; it skips only without python3.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ONESTEP_WEBHOOKS_VENV:-$ROOT/target/webhooks-venv}
VERSION=1.1.0
PY=${PYTHON:-python3}
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
have() { [[ -x $VENV/bin/python ]] && [[ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("standardwebhooks"))' 2>/dev/null)" == "$VERSION" ]]; }
if ! have; then
  echo "[webhooks-venv] creating $VENV (standardwebhooks==$VERSION)" >&2
  "$PY" -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "standardwebhooks==$VERSION" >&2 \
    || { echo "[webhooks-venv] ERROR: pip could not install standardwebhooks (network?)" >&2; exit 1; }
  have || { echo "[webhooks-venv] ERROR: installed standardwebhooks does not match $VERSION" >&2; exit 1; }
fi
echo "$VENV/bin/python"
