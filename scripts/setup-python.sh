#!/usr/bin/env bash
# Create (once) the Python venv whose readers the interop tests use:
# deltalake, polars and pyarrow read every table a sluice lake holds; and
# maturin, which builds the sluice wheel (scripts/build-wheel.sh).
set -euo pipefail
VENV="${SLUICE_VENV:-/var/tmp/sluice-venv}"
STAMP="$VENV/.sluice-packages-v2"
if [[ -f "$STAMP" ]]; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check \
  "deltalake==1.6.6" "polars==2.1.0" "pyarrow==26.0.1" "maturin==1.16.0"
touch "$STAMP"
echo "python readers installed in $VENV"
