#!/usr/bin/env bash
# The main job on the embedded local default: a lake in ./lake, a few
# artifacts put directly, 200 executions staged by 2 worker processes and
# committed through the staging-commit path, then queries over it all.
set -euo pipefail
SLUICE="${SLUICE:-${CARGO_TARGET_DIR:-/var/tmp/sluice-target}/debug/sluice}"
export SLUICE_LAKE="${SLUICE_LAKE:-./lake}"
"$SLUICE" init
"$SLUICE" put --type metric --step 1 '{"loss": 0.31, "accuracy": 0.88}' '{"loss": 0.27, "accuracy": 0.91}'
"$SLUICE" put --type config --step 0 '{"model": "tiny", "lr": 0.01}'
printf 'x,y\n1,2\n3,4\n' > "$SLUICE_LAKE/example.csv"
"$SLUICE" put --type data --step 1 "$SLUICE_LAKE/example.csv"
"$SLUICE" bench stage --executions 200 --workers 2 --duplicate-fraction 0.2 --fail-fraction 0.05
"$SLUICE" commit
"$SLUICE" sql "SELECT artifact_type, origin_step_number, count(*) AS n FROM \"index\" GROUP BY 1, 2 ORDER BY 1, 2"
"$SLUICE" sql "SELECT success, count(*) AS executions FROM executions GROUP BY 1"
"$SLUICE" tables
"$SLUICE" doctor
