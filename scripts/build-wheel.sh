#!/usr/bin/env bash
# Build the sluice wheel (python/) in the workspace's one dev profile and
# target dir: the `_native` extension and, as the wheel's script, the
# `sluice` binary. Prints the wheel's path.
#   scripts/build-wheel.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: build-wheel.sh OUT_DIR}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
VENV="${SLUICE_VENV:-/var/tmp/sluice-venv}"
cargo build -p sluice-cli --quiet
DATA=python/build/wheel-data/scripts
rm -rf python/build/wheel-data
mkdir -p "$DATA"
cp "$CARGO_TARGET_DIR/debug/sluice" "$DATA/sluice"
rm -rf "$OUT"
mkdir -p "$OUT"
"$VENV/bin/maturin" build --quiet --manifest-path python/Cargo.toml \
  --interpreter "$VENV/bin/python" --out "$OUT" >&2
ls "$OUT"/sluice-*.whl
