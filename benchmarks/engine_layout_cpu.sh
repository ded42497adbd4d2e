#!/bin/bash
# ADR 0259: the CPU cost of vLLM's engine-core layout in the tests. Four engine starts (tests/test_engine_groups.py,
# tests/test_profiling.py, tests/test_shell_and_sockets.py: three offline, one `vllm serve`) in one pytest process,
# with VLLM_ENABLE_V1_MULTIPROCESSING at 0 (the tests' default) and at 1 (vLLM's), PAIRS interleaved pairs, each run in
# a cpuacct cgroup of its own (needs root, cgroup v1 at /sys/fs/cgroup/cpuacct), so processes vLLM orphans count too.
# Usage: benchmarks/engine_layout_cpu.sh [PAIRS]   (one line a run: wall, core-s, load, pytest's summary)
set -u
pairs=${1:-2}; py=${VENV:-.venv}/bin/python
for i in $(seq 1 "$pairs"); do for mode in 0 1; do
  cg=/sys/fs/cgroup/cpuacct/specjoule-engine-layout-$mode-$i-$$; mkdir -p "$cg"; log=$(mktemp)
  t0=$(date +%s.%N)
  ( echo $BASHPID > "$cg/cgroup.procs"; VLLM_ENABLE_V1_MULTIPROCESSING=$mode exec "$py" -m pytest -q -p no:cacheprovider \
      -n 0 -m engine tests/test_engine_groups.py tests/test_profiling.py tests/test_shell_and_sockets.py ) > "$log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "pair $i VLLM_ENABLE_V1_MULTIPROCESSING=$mode rc $rc wall $(python3 -c "print(round($t1 - $t0, 1))") s" \
    "$(awk '{printf "%.1f", $1/1e9}' "$cg/cpuacct.usage") core-s load $(cut -d' ' -f1 /proc/loadavg): $(tail -1 "$log")"
  rm -f "$log"; rmdir "$cg" 2>/dev/null
done; done
