#!/usr/bin/env bash
# The Python package's tests (python/tests) against the package as a user
# installs it: `pip install ./python` from this checkout into a new venv
# (maturin builds it through pip, in the workspace's dev profile and target
# dir: MATURIN_PEP517_ARGS; a user's pip install builds the release
# profile), and pytest imports it from there, never from the source folder;
# the `sluice` it finds on PATH is the console script pip installed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/sluice-target}"
# Beside the build it tests, so that two target dirs never share one.
TEST_VENV="${SLUICE_WHEEL_VENV:-$CARGO_TARGET_DIR/wheel-venv}"
rm -rf "$TEST_VENV"
python3 -m venv "$TEST_VENV"
# The readers' versions the interop check uses (scripts/setup-python.sh).
MATURIN_PEP517_ARGS="--profile dev" "$TEST_VENV/bin/pip" install --quiet \
  --disable-pip-version-check "$ROOT/python[test]" \
  "deltalake==1.6.6" "polars==2.1.0" "pyarrow==26.0.1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
PATH="$TEST_VENV/bin:$PATH" "$TEST_VENV/bin/python" -m pytest -q -p no:cacheprovider \
  --basetemp "$WORK/tmp" "$ROOT/python/tests"
