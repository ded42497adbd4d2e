#!/usr/bin/env bash
# Run campaign families behind a pre-registered start gate, in the order given, until the device budget ends.
#   bash tools/device/gated_families.sh DEADLINE_EPOCH_S "CONFIG FAMILY GATE_S" ["CONFIG FAMILY GATE_S" ...]
# A family starts only if now + GATE_S <= DEADLINE (a session's PLAN.md fixes the gates and the deadline rule
# before the first device call); one that does not pass is skipped and the next is tried. A family named twice
# runs at most once: a later entry with a smaller gate is the plan's "knowingly cut" fallback, tried only if the
# family has not started yet. Each family runs through campaign.sh (one Snakemake invocation, --keep-going); its
# failure does not stop the next. A gate is an operational limit (whether a family starts), not a threshold.
# env: CAMPAIGN (default: campaign.sh beside this script; the tests point it at a stand-in).
set -uo pipefail
deadline="${1:?DEADLINE_EPOCH_S}"; shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
campaign="${CAMPAIGN:-$here/campaign.sh}"
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "gated: DEADLINE_EPOCH_S must be whole epoch seconds, got '$deadline'" >&2; exit 2; }
[ $# -gt 0 ] || { echo "gated: no \"CONFIG FAMILY GATE_S\" entry" >&2; exit 2; }
for entry in "$@"; do
  read -r config family gate extra <<<"$entry"
  if [ -z "${gate:-}" ] || [ -n "${extra:-}" ] || ! [[ "$gate" =~ ^[0-9]+$ ]]; then
    echo "gated: entry '$entry' is not \"CONFIG FAMILY GATE_S\" (GATE_S whole seconds)" >&2; exit 2
  fi
  [ -f "$config" ] || { echo "gated: entry '$entry': no config file $config" >&2; exit 2; }
done
started=" "
rc=0
for entry in "$@"; do
  read -r config family gate <<<"$entry"
  now=$(date +%s)
  if [[ "$started" == *" $config:$family "* ]]; then
    echo "gated: $(date -u +%FT%TZ) $family ($config): already started, entry with gate ${gate} s not needed"
    continue
  fi
  if [ $((now + gate)) -gt "$deadline" ]; then
    echo "gated: $(date -u +%FT%TZ) skip $family ($config): gate ${gate} s, $((deadline - now)) s left before the deadline"
    continue
  fi
  echo "gated: $(date -u +%FT%TZ) start $family ($config): gate ${gate} s, $((deadline - now)) s left before the deadline"
  started="$started$config:$family "
  family_rc=0
  bash "$campaign" "$config" "$family" || family_rc=$?
  [ "$family_rc" = 0 ] || rc=$family_rc
  echo "gated: $(date -u +%FT%TZ) end $family rc=$family_rc after $(($(date +%s) - now)) s"
done
exit $rc
