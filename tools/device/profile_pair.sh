#!/usr/bin/env bash
# A round-profile pair (ADR 0095, 0096 addendum 4): one cell profiled with synchronous scheduling, then with
# `async_scheduling=true` (folder tag `async`), on one board, behind a start gate as gated_families.sh applies one
# (or, with SINGLE=1, one profile behind the same gate).
#   bash tools/device/profile_pair.sh DEADLINE_EPOCH_S GATE_S CONFIG CELL OUT_DIR
# The pair starts only if now + GATE_S <= DEADLINE; each run is capped at RUN_CAP_S (default 240) and at the time
# left before DEADLINE, so a hung engine start cannot eat the session. The second run analyses both folders
# (profile_rounds.py writes OUT_DIR/rounds.parquet). Exit status: the worse of the runs, 0 when skipped.
# env: PROFILE_ROUNDS (default: python3 profile_rounds.py beside this script; the tests point it at a stand-in);
# SINGLE=1: one profile with the engine's own settings, analysed (label `single`), for an engine without vLLM's
# async_scheduling switch (SGLang's overlap scheduler is on by default, ADR 0096).
set -uo pipefail
deadline="${1:?DEADLINE_EPOCH_S}"; gate="${2:?GATE_S}"; config="${3:?CONFIG}"; cell="${4:?CELL}"; out="${5:?OUT_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
profile="${PROFILE_ROUNDS:-python3 $here/profile_rounds.py}"
cap="${RUN_CAP_S:-240}"
for value in "$deadline" "$gate" "$cap"; do
  [[ "$value" =~ ^[0-9]+$ ]] || { echo "profile_pair: DEADLINE_EPOCH_S, GATE_S and RUN_CAP_S must be whole seconds, got '$value'" >&2; exit 2; }
done
[ -f "$config" ] || { echo "profile_pair: no config file $config" >&2; exit 2; }
now=$(date +%s)
if [ $((now + gate)) -gt "$deadline" ]; then
  echo "profile_pair: $(date -u +%FT%TZ) skip $cell: gate ${gate} s, $((deadline - now)) s left before the deadline"
  exit 0
fi
echo "profile_pair: $(date -u +%FT%TZ) start $cell: gate ${gate} s, $((deadline - now)) s left before the deadline"
rc=0
run() {  # run LABEL ARGS...: one profile, capped; records its status in rc
  local label="$1"; shift
  local left=$((deadline - $(date +%s))) limit="$cap"
  [ "$left" -lt "$limit" ] && limit="$left"
  if [ "$limit" -le 0 ]; then echo "profile_pair: $label not started: the deadline has passed"; rc=1; return; fi
  local t0; t0=$(date +%s)
  # shellcheck disable=SC2086  # PROFILE_ROUNDS is a command line
  timeout "$limit" $profile "$config" "$cell" --out "$out" "$@"
  local status=$?
  echo "profile_pair: $(date -u +%FT%TZ) $label rc=$status after $(($(date +%s) - t0)) s (cap ${limit} s)"
  [ "$status" = 0 ] || rc=$status
}
if [ "${SINGLE:-0}" = 1 ]; then
  run single
else
  run sync --no-analyze
  run async --set async_scheduling=true --tag async
fi
exit $rc
