#!/usr/bin/env bash
# Run a long command on the device machine across several calls (each call is capped at 10 minutes).
#
#   bash tools/device/background.sh start NAME COMMAND...   # copy this checkout to /tmp/work/NAME, run there detached
#   bash tools/device/background.sh wait NAME SECONDS        # block until it ends or SECONDS pass; print its log tail
#   bash tools/device/background.sh collect NAME DEST        # tar its results/ and logs into DEST (e.g. $OUT)
#   bash tools/device/background.sh seed NAME TARBALL        # before start: put a collected tar back (resume)
#
# Why a copy: the device tool re-syncs the repository before every call; a run that reads its config and
# writes results/ must not see its working tree change under it. The machine stays warm only ~30 s after a
# call, so follow `start` with back-to-back `wait` calls; a released machine kills the run. Collect after
# every wait: on a fresh machine, `seed` the last collected tar (carried in an ignored folder) into NAME and
# `start` the same command again; Snakemake skips the cells whose records came back (--rerun-incomplete).
set -euo pipefail
cmd="${1:?start|wait|collect}"; name="${2:?NAME}"; shift 2
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
root="${BACKGROUND_ROOT:-/tmp/work}"  # outside the repository copy the device tool re-syncs
work="$root/$name"
state="$root/$name.state"
case "$cmd" in
  start)
    [ $# -gt 0 ] || { echo "background: start needs a command" >&2; exit 2; }
    if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
      echo "background: $name already running (pid $(cat "$state/pid"))" >&2; exit 2
    fi
    mkdir -p "$work" "$state"
    # tracked + untracked files of this checkout; results/ of an earlier start of NAME are kept (resume)
    (cd "$repo" && tar --exclude=./results --exclude=./.snakemake --exclude=./.git --exclude=./.bundle --exclude=./.venv -cf - .) | (cd "$work" && tar -xf -)
    rm -f "$state/rc"
    printf '%s\n' "$*" >"$state/command"
    date -u +%s >"$state/started"
    # exec: the pid recorded is the new session's leader (kill -- -PID ends the whole job), and no process
    # keeps this call's stdout open while the job runs
    (cd "$work" && exec setsid bash -c "$*; echo \$? > '$state/rc'" >"$state/log" 2>&1 < /dev/null) &
    echo $! >"$state/pid"
    echo "background: $name started (pid $(cat "$state/pid")) in $work"
    ;;
  wait)
    limit="${1:?SECONDS}"; t0=$(date +%s)
    # No job of that name here means a fresh machine (the last one was released): say so at once rather than
    # wait out the limit on held device time (2026-12-03: 400 s lost that way).
    [ -f "$state/started" ] || { echo "background: no job $name on this machine (a fresh one?): nothing to wait for" >&2; exit 4; }
    # Looked for every second: a job that ends returns the call (and the held device time) within a second.
    while [ ! -f "$state/rc" ] && [ $(( $(date +%s) - t0 )) -lt "$limit" ]; do sleep 1; done
    tail -n 40 "$state/log" || true
    if [ -f "$state/rc" ]; then echo "background: $name finished rc=$(cat "$state/rc") after $(( $(date +%s) - $(cat "$state/started") )) s"
    else echo "background: $name still running after $(( $(date +%s) - $(cat "$state/started") )) s"; fi
    ;;
  collect)
    dest="${1:?DEST}"; mkdir -p "$dest"
    cp "$state/log" "$dest/$name.log" 2>/dev/null || true
    have="$(cd "$work" && ls -d results .snakemake/log 2>/dev/null || true)"
    [ -n "$have" ] || { echo "background: $name has no results yet"; exit 0; }
    # The compile cache (ADR 0189) is the engine's, not evidence: hundreds of MB that would not come back.
    (cd "$work" && tar --exclude=results/.specjoule/engine-cache -czf "$dest/$name-results.tar.gz" $have)
    echo "background: collected $(du -h "$dest/$name-results.tar.gz" | cut -f1) into $dest"
    ;;
  seed)
    tarball="${1:?TARBALL}"
    [ -f "$tarball" ] || { echo "background: no tarball $tarball" >&2; exit 2; }
    if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
      echo "background: $name is running; seed before start" >&2; exit 2
    fi
    mkdir -p "$work"
    tar -xzf "$tarball" -C "$work"
    echo "background: seeded $work with $(tar -tzf "$tarball" | grep -c '\.parquet$') parquet file(s) from $tarball"
    ;;
  *) echo "background: unknown command $cmd" >&2; exit 2 ;;
esac
