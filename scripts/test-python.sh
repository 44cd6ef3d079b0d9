#!/usr/bin/env bash
# The Python package's tests (python/tests) against the package as a user
# installs it: the wheel is built (scripts/build-wheel.sh, the workspace's
# dev profile and target dir), installed with its dependencies into a new
# venv, and pytest imports it from there, never from the source folder; the
# `sluice` it finds on PATH is the one the wheel installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
WHEEL="$(bash scripts/build-wheel.sh "$CARGO_TARGET_DIR/wheels")"
# Beside the build it tests, so that two target dirs never share one.
TEST_VENV="${SLUICE_WHEEL_VENV:-$CARGO_TARGET_DIR/wheel-venv}"
rm -rf "$TEST_VENV"
python3 -m venv "$TEST_VENV"
# The readers' versions the interop check uses (scripts/setup-python.sh).
"$TEST_VENV/bin/pip" install --quiet --disable-pip-version-check "$WHEEL[test]" \
  "deltalake==1.6.6" "polars==2.1.0" "pyarrow==26.0.1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
PATH="$TEST_VENV/bin:$PATH" "$TEST_VENV/bin/python" -m pytest -q -p no:cacheprovider \
  --basetemp "$WORK/tmp" "$ROOT/python/tests"
