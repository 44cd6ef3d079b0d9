#!/usr/bin/env bash
# Say, before the tests run, which tests this machine will skip and why.
# Under CI (`CI` set) nothing may be skipped: the same tests fail instead.
set -u
skips=0
if ! sinfo -h -o '%t' >/dev/null 2>&1 || [ -z "$(sinfo -h -o '%t' 2>/dev/null)" ]; then
  echo "make test: SLURM is not running: the 4 SLURM tests (crates/sluice-cli/tests/cli/slurm.rs) will be skipped."
  echo "           Start a single-node SLURM with \`bash scripts/slurm.sh up\` (as root), as .ci/run does."
  skips=1
fi
if ! bash "$(dirname "$0")/azurite.sh" check; then
  echo "make test: Azurite is not running: the 2 Azure queue tests (crates/sluice/tests/it/azure.rs) and the 2 Azure table tests (object_stores.rs) will be skipped."
  echo "           Start it with \`bash scripts/azurite.sh up\`, as .ci/run does."
  skips=1
fi
if ! bash "$(dirname "$0")/moto.sh" check; then
  echo "make test: the moto S3 server is not running: the 2 S3 tests (crates/sluice/tests/it/object_stores.rs) will be skipped."
  echo "           Start it with \`bash scripts/moto.sh up\`, as .ci/run does."
  skips=1
fi
if [ ! -x "${SLUICE_PYTHON:-}" ]; then
  echo "make test: no Python readers (SLUICE_PYTHON): the interop check will be skipped (make python)."
  skips=1
fi
probe=""
for base in /sys/fs/cgroup/memory /sys/fs/cgroup; do
  own=$(awk -F: '($2 ~ /(^|,)memory(,|$)/) || ($1 == "0" && $2 == "") {print $3; exit}' /proc/self/cgroup)
  if [ -n "$own" ] && mkdir "$base$own/sluice-preflight-$$" 2>/dev/null; then
    probe=ok; rmdir "$base$own/sluice-preflight-$$"; break
  fi
done
if [ -z "$probe" ]; then
  echo "make test: no writable memory cgroup: the two commit-under-a-memory-limit tests (crates/sluice-cli/tests/cli/protocol.rs) will be skipped."
  echo "           It needs root with cgroup v1's memory controller or v2's memory.max, as .ci/run has."
  skips=1
fi
if [ "${SLUICE_TEST_DEPTH:-}" != full ]; then
  echo "make test: kill and race loops run at a representative depth; SLUICE_TEST_DEPTH=full runs them at full depth, as CI does."
fi
if [ "$skips" = 1 ] && [ -n "${CI:-}" ]; then
  echo "make test: CI is set, so those tests will fail instead of skipping."
fi
exit 0
