#!/usr/bin/env bash
# The moto server, an S3 emulator, for the tests of sluice on S3. moto 5.2.5
# is the first release that answers a racing conditional PUT
# (`If-None-Match: *`) with 412 as S3 does (5.2.0 answered 500).
#
#   bash scripts/moto.sh up     install if needed (into $SLUICE_VENV), start, wait until it answers
#   bash scripts/moto.sh down   stop the moto this script started (by pid)
#   bash scripts/moto.sh check  exit 0 if it answers
#
# Endpoint: http://127.0.0.1:5555 ($SLUICE_MOTO_PORT); any access key works.
set -euo pipefail

STATE=${SLUICE_MOTO_STATE:-/var/tmp/sluice-moto}
VENV=${SLUICE_VENV:-/var/tmp/sluice-venv}
PORT=${SLUICE_MOTO_PORT:-5555}
SPEC='moto[server]>=5.2.5'

check() { curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/"; }

install() {
  [ -x "$VENV/bin/moto_server" ] && return
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$SPEC"
}

up() {
  if check; then
    echo "moto: already answering on $PORT"
    return
  fi
  install
  mkdir -p "$STATE"
  nohup "$VENV/bin/moto_server" -H 127.0.0.1 -p "$PORT" >"$STATE/moto.log" 2>&1 &
  echo $! >"$STATE/moto.pid"
  for _ in $(seq 1 60); do
    if check; then
      echo "moto $("$VENV/bin/python" -c 'import moto; print(moto.__version__)'): S3 on $PORT"
      return
    fi
    sleep 0.5
  done
  echo "moto did not start; its log:" >&2
  cat "$STATE/moto.log" >&2
  exit 1
}

down() {
  if [ -s "$STATE/moto.pid" ]; then
    kill "$(cat "$STATE/moto.pid")" 2>/dev/null || true
    rm -f "$STATE/moto.pid"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  check) check ;;
  *) echo "usage: $0 up|down|check" >&2; exit 2 ;;
esac
