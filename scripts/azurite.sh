#!/usr/bin/env bash
# Azurite, the Azure Storage emulator, for the Azure queue and blob tests of
# ingestion. Version 3.35.0 is the last that supports this machine's Node 20
# (later releases declare Node >= 21).
#
#   bash scripts/azurite.sh up     install if needed, start blob + queue, wait until they answer
#   bash scripts/azurite.sh down   stop the Azurite this script started (by pid)
#   bash scripts/azurite.sh check  exit 0 if the blob and queue ports answer
#
# Endpoints: blob http://127.0.0.1:10000, queue http://127.0.0.1:10001, the
# well-known development account `devstoreaccount1`.
set -euo pipefail

STATE=${SLUICE_AZURITE_STATE:-/var/tmp/sluice-azurite}
VERSION=3.35.0
BIN="$STATE/node_modules/.bin/azurite"

answers() {
  # Any HTTP answer (even 400) means the service listens.
  curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$1/"
}

check() { answers 10000 && answers 10001; }

install() {
  [ -x "$BIN" ] && return
  mkdir -p "$STATE"
  (cd "$STATE" && npm install --silent --no-audit --no-fund "azurite@$VERSION" >/dev/null)
}

up() {
  if check; then
    echo "azurite: already answering on 10000/10001"
    return
  fi
  install
  # A data folder of earlier versions of this script: persisted data made
  # each run slower than the last.
  rm -rf "$STATE/data"
  # --skipApiVersionCheck: newer SDKs send API versions 3.35 does not know;
  # --disableTelemetry: otherwise it tries to reach a telemetry endpoint;
  # --inMemoryPersistence: nothing written to disk. Persisted, Azurite
  # rewrites its whole metadata database (tens of MB after a test run) every
  # few seconds, and a request that arrives meanwhile can stall for seconds:
  # CI saw a put-if-absent PUT fail after 12.5 s that way.
  nohup "$BIN" --silent --disableTelemetry --skipApiVersionCheck --loose --inMemoryPersistence \
    --blobHost 127.0.0.1 --queueHost 127.0.0.1 --tableHost 127.0.0.1 \
    >"$STATE/azurite.log" 2>&1 &
  echo $! >"$STATE/azurite.pid"
  for _ in $(seq 1 60); do
    if check; then
      echo "azurite $VERSION: blob on 10000, queue on 10001"
      return
    fi
    sleep 0.5
  done
  echo "azurite did not start; its log:" >&2
  cat "$STATE/azurite.log" >&2
  exit 1
}

down() {
  if [ -s "$STATE/azurite.pid" ]; then
    kill "$(cat "$STATE/azurite.pid")" 2>/dev/null || true
    rm -f "$STATE/azurite.pid"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check ;;
  *) echo "usage: $0 up|down|check" >&2; exit 2 ;;
esac
