#!/usr/bin/env bash
# ref-venv.sh: create (idempotently) a Python venv holding the reference implementation used by
# host/mysql/tests/interop.rs and host/postgres/tests: onestep==1.15.0 and
# onestep-sql[mysql,postgres]==0.7.1.
#
# Usage: scripts/ref-venv.sh            # venv at $ONESTEP_REF_VENV, default target/ref-venv
# Prints the venv's python path on stdout. Exit != 0 (with the pip output on stderr) when the
# packages cannot be installed (e.g. no network): the interop test then FAILS, it never skips.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ONESTEP_REF_VENV:-$ROOT/target/ref-venv}
PY=${PYTHON:-python3}
# Serialise concurrent callers (the interop tests run in parallel): one creates, the others wait.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
want_ok() {
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, sys
ok = m.version("onestep") == "1.15.0" and m.version("onestep-sql") == "0.7.1"
import asyncmy  # the mysql extra
import psycopg  # the postgres extra
sys.exit(0 if ok else 1)
PY
}
if [[ -x $VENV/bin/python ]] && want_ok; then
  echo "$VENV/bin/python"; exit 0
fi
echo "[ref-venv] creating $VENV" >&2
"$PY" -m venv "$VENV" >&2
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  "onestep==1.15.0" "onestep-sql[mysql,postgres]==0.7.1" >&2 \
  || { echo "[ref-venv] ERROR: pip could not install the reference packages (network?)" >&2; exit 1; }
want_ok || { echo "[ref-venv] ERROR: installed packages do not match the pinned versions" >&2; exit 1; }
echo "$VENV/bin/python"
