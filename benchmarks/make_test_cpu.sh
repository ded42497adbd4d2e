#!/bin/bash
# `make test`'s recipe (phase 1 with lint and the SLURM process beside it, then phase 2; no install), run in the
# current checkout with the venv named by VENV (default .venv), measuring where the CPU goes (ADR 0223): per test
# through benchmarks/cpu_per_test.py, each pytest process and lint in a cpuacct cgroup of its own, /proc/stat
# around each phase. Needs root (cgroup v1 cpuacct at /sys/fs/cgroup/cpuacct). Usage:
#   benchmarks/make_test_cpu.sh OUT_DIR        # then: OUT_DIR/{p1,p2,slurm}.jsonl, OUT_DIR/summary
# TEST_CPU_ARGS (optional) is appended to each pytest command line, e.g. test files for a short run.
# Keep the pytest and lint command lines in step with the Makefile's `test` recipe and LINT_STEPS.
set -u
out=$(realpath -m "$1"); mkdir -p "$out"
venv=${VENV:-.venv}; py=$venv/bin/python
cg=/sys/fs/cgroup/cpuacct/specjoule-test-cpu-$$; mkdir -p "$cg/slurm" "$cg/lint"
export PYTHONPATH=$PWD:$PWD/benchmarks PYTEST_PLUGINS=cpu_per_test TEST_CPU_CGROUP=$cg
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
groups() { for d in "$cg"/*/; do echo "$(basename "$d") $(awk '{printf "%.1f", $1/1e9}' "$d/cpuacct.usage")"; done; }
echo "start $(date -u +%T) $(uptime)" > "$out/summary"
b0=$(busy); t0=$(date +%s.%N); slot=$(mktemp -u /tmp/specjoule-engine-slot.XXXXXX)
( echo $BASHPID > "$cg/slurm/cgroup.procs"
  TEST_CPU_PHASE=slurm TEST_CPU_OUT=$out/slurm.jsonl SPECJOULE_ENGINE_SLOT=$slot \
    exec "$py" -m pytest -q -rs -m slurm --durations=5 ${TEST_CPU_ARGS:-} ) > "$out/slurm.log" 2>&1 & slurm_pid=$!
( echo $BASHPID > "$cg/lint/cgroup.procs"; lint_dir=$(mktemp -d -u)
  "$venv/bin/ruff" check specjoule scripts tools benchmarks tests && "$venv/bin/ruff" format --check specjoule scripts \
    tools benchmarks && "$venv/bin/mypy" && "$venv/bin/snakefmt" --check Snakefile rules \
    && "$venv/bin/snakemake" --lint -d "$lint_dir" --configfile config/config.yaml \
    && "$venv/bin/snakemake" --lint -d "$lint_dir" --configfile config/h200-validation-a.yaml; rc=$?
  rm -rf "$lint_dir"; exit $rc ) > "$out/lint.log" 2>&1 & lint_pid=$!
TEST_CPU_PHASE=p1 TEST_CPU_OUT=$out/p1.jsonl "$py" -m pytest -q -rs -n 2 --dist loadfile \
  -m "not engine and not slurm" --durations=10 ${TEST_CPU_ARGS:-} > "$out/p1.log" 2>&1; echo "phase 1 exit $?" >> "$out/summary"
wait $lint_pid; echo "lint exit $?" >> "$out/summary"
b1=$(busy); t1=$(date +%s.%N)
TEST_CPU_PHASE=p2 TEST_CPU_OUT=$out/p2.jsonl SPECJOULE_ENGINE_SLOT=$slot "$py" -m pytest -q -rs -n "${ENGINE_WORKERS:-3}" \
  --dist loadfile -m "engine and not slurm" --durations=15 ${TEST_CPU_ARGS:-} > "$out/p2.log" 2>&1; echo "phase 2 exit $?" >> "$out/summary"
b2=$(busy); t2=$(date +%s.%N)
wait $slurm_pid; echo "SLURM process exit $?" >> "$out/summary"
b3=$(busy); t3=$(date +%s.%N); rm -f "$slot.gate" "$slot.lock"
python3 - "$t0" "$t1" "$t2" "$t3" "$b0" "$b1" "$b2" "$b3" >> "$out/summary" <<'PY'
import sys
t, b = [float(x) for x in sys.argv[1:5]], [float(x) / 100 for x in sys.argv[5:9]]
for name, i in (("phase 1 (+ lint, SLURM beside)", 0), ("phase 2", 1), ("SLURM tail", 2)):
    print(f"{name}: wall {t[i + 1] - t[i]:.1f} s, machine busy {b[i + 1] - b[i]:.1f} core-s")
print(f"all: wall {t[3] - t[0]:.1f} s, machine busy {b[3] - b[0]:.1f} core-s")
PY
echo "cpuacct groups (core-s):" >> "$out/summary"; groups >> "$out/summary"
echo "end $(date -u +%T) $(uptime)" >> "$out/summary"
for d in "$cg"/*/; do rmdir "$d"; done; rmdir "$cg"
