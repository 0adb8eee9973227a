#!/usr/bin/env bash
# Reruns the side-by-side backlog drain of onestep against PostgreSQL job queues
# (docs/benchmarks.md#beside-the-peers-postgresql) with this repository's release onestep:
# copies the peers harness (PEERS_DIR, default ../shared/bench/peers relative to the
# repository) to a temporary directory, builds the release binary and the echo guest, and runs
# the harness's run_peers.sh there with any arguments given, e.g.
#   scripts/bench-peers.sh -n 20000 --rounds 1 --systems onestep,onestep-echo,graphile-batched,apalis
# Needs PostgreSQL 15 on 127.0.0.1:5432 (user postgres, trust auth), psql, Node 20,
# Python 3.11 and cargo (the harness installs its peers from npm, PyPI and crates.io, and
# creates and drops only databases named peer_*). Results are copied to $OUT (default
# target/bench-peers/<UTC time>) before the temporary directory is removed. PEERS_WORK names
# a directory to copy the harness to and keep instead (its installed peers are reused by the
# next run with the same PEERS_WORK: the apalis build takes minutes).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PEERS_DIR="${PEERS_DIR:-$ROOT/../shared/bench/peers}"
if [ ! -x "$PEERS_DIR/run_peers.sh" ]; then
    echo "bench-peers: no run_peers.sh in PEERS_DIR=$PEERS_DIR (set PEERS_DIR to the peers harness)" >&2
    exit 2
fi
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}/release"
OUT="${OUT:-$ROOT/target/bench-peers/$(date -u +%Y%m%dT%H%M%SZ)}"

echo "== release build" >&2
cargo build --release -p onestep-cli
if [ ! -f guest-examples/out/echo.wasm ]; then
    SKIP_PYTHON=1 scripts/build-guests.sh >&2
fi

if [ -n "${PEERS_WORK:-}" ]; then
    WORK="$PEERS_WORK"
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d -t onestep-peers.XXXXXX)"
    trap 'rm -rf "$WORK"' EXIT
fi
cp -r "$PEERS_DIR/." "$WORK/"
chmod -R u+w "$WORK"
echo "== peers harness in $WORK, onestep $TARGET/onestep" >&2
status=0
ONESTEP_BIN="$TARGET/onestep" ECHO_WASM="$ROOT/guest-examples/out/echo.wasm" \
    "$WORK/run_peers.sh" "$@" || status=$?
mkdir -p "$OUT"
for d in out out-smoke; do
    if [ -d "$WORK/$d" ]; then cp -r "$WORK/$d" "$OUT/"; fi
done
echo "results: $OUT" >&2
exit "$status"
