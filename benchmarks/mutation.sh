#!/usr/bin/env bash
# Mutation testing of the measurement core (issue 22, item 8) with mutmut 3 (pyproject's `test` extra).
#
#   bash benchmarks/mutation.sh                 # every module below, one after the other
#   bash benchmarks/mutation.sh records nvml    # only these
#   MUTATION_WORK=/tmp/mut MUTATION_JOBS=1 bash benchmarks/mutation.sh acceptance
#   MUTATION_RETEST=1 bash benchmarks/mutation.sh nvml   # after adding tests: only the mutants not killed before
#
# Each module is mutated in a scratch copy of this working tree ($MUTATION_WORK/<module>), with only
# the fast tests that exercise it (no engine, SLURM or browser test: those take minutes each and
# import the library in a subprocess, where a mutant never reaches). mutmut runs, for each mutant,
# only the selected tests that call the mutated function. Results: $MUTATION_WORK/<module>.txt
# (counts and every mutant that was not killed) and one summary line per module on stdout; read a
# survivor with `cd $MUTATION_WORK/<module> && mutmut show <name>`. The classes of the survivors and
# what was done about them: benchmarks/mutation.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
MUTMUT="$(dirname "$PY")/mutmut"
WORK="${MUTATION_WORK:-${TMPDIR:-/tmp}/specjoule-mutation}"
JOBS="${MUTATION_JOBS:-2}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Per module: the source file, the fast tests that exercise it, and (FUNCS) a subset of its functions
# where the whole file is too slow to mutate here (mutant-name globs; unset = every function).
declare -A SOURCE=(
  [records]=specjoule/records.py
  [cells]=specjoule/cells.py
  [acceptance]=specjoule/acceptance.py
  [nvml]=specjoule/meter/nvml.py
  [checks]=specjoule/analysis/checks.py
  [aggregate]=specjoule/analysis/aggregate.py
  [derive]=specjoule/analysis/derive.py
  [packed]=specjoule/analysis/packed.py
)
declare -A TESTS=(
  [records]="tests/test_records.py tests/test_meter_replay.py tests/test_unsupported.py"
  [cells]="tests/test_golden_cells.py tests/test_replicates.py tests/test_cells_plan.py tests/test_unsupported.py
           tests/test_pair_drafters.py"
  [acceptance]="tests/test_acceptance.py"
  [nvml]="tests/test_meter.py tests/test_meter_counters.py tests/test_meter_replay.py tests/test_tensor_parallel.py"
  [checks]="tests/test_check_thresholds.py tests/test_analysis_checks.py tests/test_loop_checks.py"
  [aggregate]="tests/test_aggregate_pairing.py tests/test_check_thresholds.py"
  [derive]="tests/test_analysis_derive.py"
  [packed]="tests/test_packed.py"
)
# Too slow to mutate whole here: the functions that decide a cell's identity and order (cells), the pairing
# (aggregate), the curve rows (derive) and the verdicts of the checks with a numeric threshold (checks).
declare -A FUNCS=(
  [cells]="specjoule.cells.x_expand__* specjoule.cells.x_identify__* specjoule.cells.x_campaign_arms__*
           specjoule.cells.x_order_campaign__* specjoule.cells.xǁFamilyOrderǁ* specjoule.cells.x_build__*
           specjoule.cells.x_replicate_suffix__* specjoule.cells.x__blob__* specjoule.cells.x__sha__*
           specjoule.cells.x__scheme_variants__* specjoule.cells.xǁCellǁidentity__* specjoule.cells.x__with_order__*
           specjoule.cells.x_pending_records__* specjoule.cells.x__done__*"
  [aggregate]="specjoule.analysis.aggregate.x_pair__* specjoule.analysis.aggregate.x__validate__*
               specjoule.analysis.aggregate.x__side_mean__* specjoule.analysis.aggregate.x__side_device__*
               specjoule.analysis.aggregate.x_device_key__* specjoule.analysis.aggregate.x_window_index_expr__*
               specjoule.analysis.aggregate.x__null_untrusted_latency__* specjoule.analysis.aggregate.x_aggregate_frame__*"
  [derive]="specjoule.analysis.derive.x_derive__* specjoule.analysis.derive.x__concerning__*
            specjoule.analysis.derive.x__refusal_message__*"
  [checks]="specjoule.analysis.checks.x_baseline_drift__* specjoule.analysis.checks.x_committed_spread__*
            specjoule.analysis.checks.x_batch_shape__* specjoule.analysis.checks.x_acceptance_length__*
            specjoule.analysis.checks.x_accepted_count_variance__* specjoule.analysis.checks.x_acceptance_draws__*
            specjoule.analysis.checks.x_spec_counters__* specjoule.analysis.checks.x_window_length__*
            specjoule.analysis.checks.x_energy_counter_advance__* specjoule.analysis.checks.x_gpu_energy_balance__*
            specjoule.analysis.checks.x_power_range__*
            specjoule.analysis.checks.x_power_regime__* specjoule.analysis.checks.x_temperature__*
            specjoule.analysis.checks.x_throttle_reasons__* specjoule.analysis.checks.x_other_gpu_processes__*
            specjoule.analysis.checks.x_failed_requests__* specjoule.analysis.checks.x_model_residual__*
            specjoule.analysis.checks.x__telemetry__* specjoule.analysis.checks.x__reduce_cells__*"
)
# Seconds each module may take (about 65 minutes in all); mutants not reached are reported as "not reached". On the
# shared 2-core machine the first pass leaves part of nvml, aggregate, derive, checks and cells unreached:
# MUTATION_RETEST=1 finishes them (benchmarks/mutation.md). MUTATION_LIMIT_S overrides every module's.
declare -A LIMIT=([acceptance]=240 [records]=420 [nvml]=780 [aggregate]=480 [derive]=540 [checks]=840 [cells]=660
                  [packed]=600)
ORDER=(acceptance records nvml aggregate derive checks cells packed)

toml_list() { local out="" x; for x in "$@"; do out+="\"$x\", "; done; echo "[${out%, }]"; }

run_module() {
  local mod="$1" dir="$WORK/$1" src="${SOURCE[$1]}"
  local tests=() t
  for t in ${TESTS[$mod]}; do [ -f "$REPO/$t" ] && tests+=("$t"); done
  local retest=""
  if [ -n "${MUTATION_RETEST:-}" ] && [ -f "$dir/mutants/$src.meta" ]; then
    retest=1  # keep the last run's verdicts; the working tree's files (new tests) are copied over it below
  else
    rm -rf "$dir" && mkdir -p "$dir"
  fi
  # The working tree as git sees it (tracked and untracked, not ignored), without its results or caches.
  (cd "$REPO" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$dir"
  # mutmut leaves decorated functions alone: in the copy, the check registry's @check(...) becomes a call
  # after the module's functions, so the checks themselves are mutated (same registry, same order).
  "$PY" "$HERE/mutation_unwrap_checks.py" "$dir/specjoule/analysis/checks.py"
  # (a re-copied pyproject.toml gets the same block again: mutmut sees the same configuration)
  cat >> "$dir/pyproject.toml" <<EOF

[tool.mutmut]
source_paths = ["specjoule"]
only_mutate = ["$src"]
pytest_add_cli_args_test_selection = $(toml_list "${tests[@]}")
pytest_add_cli_args = ["-p", "no:cacheprovider", "-m", "not engine and not slurm and not browser", "-W", "ignore"]
also_copy = $(toml_list $(cd "$dir" && ls -d */ | sed 's#/$##' | grep -v -x -e specjoule -e tests) $(cd "$dir" && ls -p | grep -v /))
# polars keeps a thread pool: fork children from a server that ran no query, not from the stats run
process_isolation = "forkserver"
timeout_multiplier = 10.0
timeout_constant = 5.0
# log text is not behaviour
do_not_mutate_patterns = ["\\\\blog\\\\.(debug|info|warning)\\\\("]
EOF
  local t0=$SECONDS rc=0 pid watchdog names="${FUNCS[$mod]:-}"
  if [ -n "$retest" ]; then
    names="$("$PY" "$HERE/mutation_retest.py" "$dir/mutants/$src.meta" "${FUNCS[$mod]:-every function}")"
    [ -n "$names" ] || { echo "$mod: every mutant of the subset was killed already"; return; }
  fi
  # FUNCS holds globs for mutmut, not for the shell (set -f); its own session, so the watchdog stops all of it
  (cd "$dir" && set -f && POLARS_MAX_THREADS=1 exec setsid -w "$MUTMUT" run --max-children "$JOBS" $names \
     > "$WORK/$mod.log" 2>&1) &
  pid=$!
  (sleep "${MUTATION_LIMIT_S:-${LIMIT[$mod]}}" && kill -TERM -- "-$pid" 2>/dev/null && echo "$mod: time limit" >&2) &
  watchdog=$!
  wait "$pid" || rc=$?
  kill "$watchdog" 2>/dev/null || true
  "$PY" "$HERE/mutation_summary.py" "$dir/mutants/$src.meta" "$mod" "$src" "$((SECONDS - t0))" "$rc" \
      "${tests[*]}" "${FUNCS[$mod]:-every function}" "${retest:+re-test of the mutants not killed before}" \
      > "$WORK/$mod.txt"
  head -1 "$WORK/$mod.txt"
}

mkdir -p "$WORK"
mods=("$@")
[ ${#mods[@]} -gt 0 ] || mods=("${ORDER[@]}")
for m in "${mods[@]}"; do
  [ -n "${SOURCE[$m]:-}" ] || { echo "unknown module $m; known: ${ORDER[*]}" >&2; exit 2; }
  run_module "$m"
done
