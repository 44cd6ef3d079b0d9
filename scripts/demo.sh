#!/usr/bin/env bash
# Create a lake in ./lake, add a few artifacts and query them.
set -euo pipefail
SLUICE="${SLUICE:-${CARGO_TARGET_DIR:-/var/tmp/sluice-target}/debug/sluice}"
export SLUICE_LAKE="${SLUICE_LAKE:-./lake}"
"$SLUICE" init
"$SLUICE" put --type metric --step 1 '{"loss": 0.31, "accuracy": 0.88}' '{"loss": 0.27, "accuracy": 0.91}'
"$SLUICE" put --type config --step 0 '{"model": "tiny", "lr": 0.01}'
printf 'x,y\n1,2\n3,4\n' > "$SLUICE_LAKE/example.csv"
"$SLUICE" put --type data --step 1 "$SLUICE_LAKE/example.csv"
"$SLUICE" sql "SELECT artifact_type, origin_step_number, count(*) AS n FROM \"index\" GROUP BY 1, 2 ORDER BY 1, 2"
"$SLUICE" tables
