#!/usr/bin/env bash
# The end-to-end benchmarks of issue 11's and 45's goals and issue 9's lineage and
# maintenance costs, each in a fresh folder,
# each appending its figures to a results file (JSON lines).
#
#   bash scripts/bench-suite.sh SLUICE_BINARY RESULTS_FILE [quick]
#
# `quick` runs every workload at a tenth of its size (a smoke run).
set -euo pipefail
SLUICE=${1:?the sluice binary}
RESULTS=${2:?the results file}
SCALE=${3:-full}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export SLUICE_BENCH_RESULTS="$RESULTS"
mkdir -p "$(dirname "$RESULTS")"

n() { if [ "$SCALE" = quick ]; then echo $(( $1 / 10 )); else echo "$1"; fi; }

run() {
  local name=$1; shift
  echo "== $name: sluice $*"
  "$SLUICE" --lake "$WORK/$name" "$@"
  rm -rf "${WORK:?}/$name"
}

run commit    bench commit --executions "$(n 10000)" --artifacts-per-execution 3 --workers 2 --batch 100
run commit1   bench commit --executions "$(n 10000)" --artifacts-per-execution 3 --workers 2
run pipeline  bench pipeline --executions "$(n 2000)" --workers 2
# Issue 45 goal 1: the seed's bench pipeline as a `sluice run` process.
run seed      bench seed --tables "$(n 1000)" --workers 2 --rounds 3
# Issue 41: Python steps against a built-in step, and the seed's shape with
# its metrics in Python (the venv's interpreter has polars).
run python    bench python --units "$(n 2000)" --tables "$(n 1000)" --workers 2 --python "${SLUICE_VENV:-/var/tmp/sluice-venv}/bin/python"
# Issue 45 goal 4: a 10,000-unit step on SLURM against the local backend
# (says it skipped where SLURM is not running).
run slurm     bench slurm --units "$(n 10000)" --workers 2
run lookup    bench lookup --artifacts "$(n 1000000)" --samples 50
run put       bench put --count "$(n 1000)"
run stepcommit bench step-commit --count "$(n 1000)"
run cache     bench cache --executions "$(n 1000000)" --specs "$(n 100000)"
run ingest    bench ingest --files "$(n 50)" --rows-per-file 100000 --flushes "$(n 1000)" --dir "$WORK/ingest-files"
run lineage   bench lineage --edges "$(n 1000000)" --samples 5
run lineage10m bench lineage --edges "$(n 10000000)" --samples 5
run maintenance bench maintenance --existing "$(n 1000000)" --executions "$(n 1000)"
# Goals 4, 7, 8: a lake grown to 1M and 10M artifacts (in commits of 1M,
# then in commits of 5000 and compacted before measuring).
run scale     bench scale --artifacts "$(n 10000000)" --samples 50
run scalesmall bench scale --artifacts "$(n 10000000)" --commit-size 5000 --compact --samples 50
# The same with the present metrics from the newest 100k (a re-run).
run scalerecent bench scale --artifacts "$(n 10000000)" --samples 50 --recent "$(n 100000)"
echo "figures appended to $RESULTS"
