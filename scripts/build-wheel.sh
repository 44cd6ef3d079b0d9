#!/usr/bin/env bash
# Build the sluice wheel (python/) in the workspace's one dev profile and
# target dir: the `_native` extension, which carries the library and the
# whole command line (the wheel's `sluice` console script runs it in
# process). Prints the wheel's path.
#   scripts/build-wheel.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:?usage: build-wheel.sh OUT_DIR}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
VENV="${SLUICE_VENV:-/var/tmp/sluice-venv}"
rm -rf "$OUT"
mkdir -p "$OUT"
"$VENV/bin/maturin" build --quiet --manifest-path python/Cargo.toml \
  --interpreter "$VENV/bin/python" --out "$OUT" >&2
ls "$OUT"/sluice-*.whl
