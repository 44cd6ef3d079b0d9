#!/usr/bin/env bash
# The main job on the embedded local default: `sluice demo` writes a small
# pipeline (generate → sh/awk command → compute_metrics → filter) into
# ./sluice-demo, runs it with local worker processes into ./sluice-demo/lake,
# prints the summary and the commands to try next; then a rerun shows that
# everything is cached, and a few queries show what the lake holds.
set -euo pipefail
SLUICE="${SLUICE:-${CARGO_TARGET_DIR:-/var/tmp/sluice-target}/debug/sluice}"
DIR="${1:-./sluice-demo}"
"$SLUICE" demo "$DIR"
echo
echo "== rerun: nothing is dispatched"
"$SLUICE" --lake "$DIR/lake" run "$DIR/pipeline.toml"
echo
"$SLUICE" --lake "$DIR/lake" runs
"$SLUICE" --lake "$DIR/lake" sql "SELECT operation_name, count(*) AS executions, sum(CAST(success AS INT)) AS ok FROM executions GROUP BY 1 ORDER BY 1"
"$SLUICE" --lake "$DIR/lake" doctor
