"""The real pipeline under `snakemake --profile profiles/slurm` on a real single-node SLURM.

Two runs of the CPU demo's tiny pair (real vLLM on CPU, one engine start ≈ 40-60 s each), both
through sbatch/srun with the shipped profile plus the CI overlay (tests/data/slurm_ci.yaml: no GPU
request, partition `debug`):

1. baseline + ngram, no closing baseline: every cell runs as a SLURM job (its record carries the
   job id), the campaign is one job, and records, checks, curves and the report are produced. The job
   is submitted with ``--slurm-requeue`` and preempted (issue 21 item 4, ADR 0134): while its second
   cell starts its engine, ``scontrol requeue`` does what a partition with ``PreemptMode=REQUEUE`` does
   (SIGTERM to the job, the same job id back in the queue). The requeued job keeps the baseline's record
   as measured (same window, same engine launch), measures the interrupted cell once more and says so
   (``retried``, ``slurm_restart_count``), leaves no process behind, and Snakemake finishes without
   submitting another job. (This was its own test of the same two cells; one run now serves both: two
   engine starts fewer.)
2. the same grid plus a long-window workload (one new campaign). Its first cell is cancelled with
   scancel while its engine is measuring: the cell stops its engine, writes nothing and exits at
   once (well inside KillWait); Snakemake reports the failure; the cells of run 1 are not re-run.

About 7 minutes on 2 idle cores (each engine start ≈ 50 s, plus SLURM status polling).
"""

from __future__ import annotations

import copy
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pytest.register_assert_rewrite("slurm_cluster")
from conftest import engine_yield  # noqa: E402
from slurm_cluster import KILL_WAIT_S, REPO, run_snakemake  # noqa: E402

pytest_plugins = ["slurm_cluster"]

OUTPUTS = ("results/records.parquet", "results/checks.parquet", "results/checks.md", "results/curves.parquet",
           "results/report.html")


def demo_grid() -> dict:
    """The CPU demo reduced to one campaign of two cells: baseline, then ngram (no draft model)."""
    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    raw["schemes"] = {name: s for name, s in raw["schemes"].items() if s["method"] in ("baseline", "ngram")}
    raw["protocol"]["closing_baseline"] = False
    return raw


def cell_records(work: Path) -> dict[str, dict]:
    from specjoule import records

    paths = sorted((work / "results/cells").rglob("*.parquet"))
    rows = records.read_records(paths).to_pylist() if paths else []
    return {f"{r['campaign_id']}/{r['cell_name']}": r for r in rows}


def processes_in_group(pgid: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(") ", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                pids.append(int(d.name))
    return pids


def requeue_when_logged(slurm_cluster, cell_log: Path, seen: dict,
                        before: Callable[[], dict]) -> Callable[[subprocess.Popen], None]:
    """An ``on_start`` that requeues the one running job as soon as ``cell_log`` says its engine starts,
    and releases it at once (a requeued job waits for its begin time; a freed partition would start it)."""

    def requeue(proc) -> None:
        deadline = time.monotonic() + 420
        while "engine: start" not in (cell_log.read_text(errors="replace") if cell_log.exists() else ""):
            assert proc.poll() is None, "Snakemake ended before the cell to preempt started"
            assert time.monotonic() < deadline, "the cell to preempt did not start within 420 s"
            time.sleep(0.5)
        seen["before"] = before()
        running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert len(running) == 1, running
        seen["requeued_job"] = running[0]
        subprocess.run(["scontrol", "requeue", running[0]], check=True, timeout=30)
        for _ in range(60):
            if slurm_cluster.job_info(running[0]).get("JobState") == "PENDING":
                subprocess.run(["scontrol", "update", f"JobId={running[0]}", "StartTime=now"], check=False,
                               timeout=30)
                subprocess.run(["scontrol", "release", running[0]], check=False, timeout=30)
                break
            time.sleep(1)

    return requeue


def pid_running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slurm
@pytest.mark.engine
@pytest.mark.timeout(1080)
def test_demo_grid_under_slurm(slurm_cluster, tmp_path):
    from specjoule import cells, config

    t_start = time.monotonic()
    grid = demo_grid()
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid, sort_keys=False))
    table = cells.build(config.validate(grid))
    snakefile = ["-s", str(REPO / "Snakefile"), "--configfile", "grid.yaml"]

    # ---------------------------------------------------------------- run 1: the grid, its job preempted once
    # Timeouts guard against hangs (status polling, a stuck engine); nominal total ≈ 7 min.
    first, second = table  # opening baseline, then ngram: one campaign, one chain
    requeue: dict = {}
    on_start = requeue_when_logged(slurm_cluster, tmp_path / second.log_path, requeue,
                                   before=lambda: cell_records(tmp_path)[f"{first.campaign_id}/{first.name}"])
    run1 = run_snakemake([*snakefile, "--slurm-requeue"], tmp_path, cpu=True, timeout_s=600, on_start=on_start)
    print(f"\n[slurm-e2e] run 1 (2 cells, one requeue, + analysis + report): {run1.wall_s:.1f} s, "
          f"rc={run1.returncode}, job {requeue.get('requeued_job')}")
    assert not run1.timed_out, f"run 1 did not finish in 600 s:\n{run1.output[-5000:]}"
    assert requeue.get("requeued_job"), "the job was never requeued"
    assert run1.returncode == 0, run1.output[-5000:]
    for out in OUTPUTS:
        assert (tmp_path / out).is_file() and (tmp_path / out).stat().st_size > 0, out
    assert (tmp_path / "results/figures").is_dir()

    recs = cell_records(tmp_path)
    assert set(recs) == {f"{c.campaign_id}/{c.name}" for c in table}
    job_ids = {r["slurm_job_id"] for r in recs.values()}
    assert all(job_ids), f"a cell ran outside SLURM: {recs}"
    assert len(job_ids) == 1, f"one campaign, one group job; got jobs {job_ids}"
    (job_id,) = job_ids
    submitted = re.findall(r"submitted with SLURM jobid (\d+)", run1.output)
    assert submitted == [job_id]
    info = slurm_cluster.job_info(job_id)
    assert info["JobState"] == "COMPLETED" and info["Partition"] == "debug"
    assert "gpu" not in info.get("TresPerJob", ""), "the CI overlay asks for no GPU"
    # The preempted job: requeued under its own id (submitted once, above), not resubmitted.
    assert requeue["requeued_job"] == job_id and info.get("Restarts") == "1"
    kept, redone = recs[f"{first.campaign_id}/{first.name}"], recs[f"{second.campaign_id}/{second.name}"]
    # The finished cell was not measured again: the very window and engine launch of the first attempt.
    for col in ("window_start", "window_start_monotonic", "engine_instance", "committed_tokens"):
        assert kept[col] == requeue["before"][col], col
    assert kept["slurm_restart_count"] == 0 and kept["retried"] is False
    # The interrupted cell ran again, in the requeued job, and says so.
    assert redone["slurm_job_id"] == job_id and redone["slurm_restart_count"] == 1
    assert redone["retried"] is True and redone["committed_tokens"] > 0
    first_log = (tmp_path / first.log_path).read_text(errors="replace")
    assert "record kept, not measured again" in first_log, first_log[-2000:]
    second_log = (tmp_path / second.log_path).read_text(errors="replace")
    assert "an earlier attempt started and wrote no record" in second_log, second_log[-2000:]
    left = slurm_cluster.wait_no_job_processes()
    assert not left, f"processes of the job still running: {left}"

    import pyarrow.parquet as pq

    aggregated = pq.read_table(tmp_path / "results/records.parquet").to_pylist()
    assert {r["slurm_job_id"] for r in aggregated} == {job_id}
    run1_mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "results/cells").rglob("*.parquet")}

    # ---------------------------------------------------------------- run 2: scancel a measuring cell
    engine_yield()  # a timed block another process waits for runs between the two runs (ADR 0220)
    grown = copy.deepcopy(grid)
    grown["workloads"]["long"] = {**grown["workloads"]["closed"], "min_window_s": 600, "max_repeats": 100000}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grown, sort_keys=False))
    new_cells = [c for c in cells.build(config.validate(grown)) if f"{c.campaign_id}/{c.name}" not in recs]
    assert {c.campaign_id for c in new_cells} and len({c.campaign_id for c in new_cells}) == 1
    target = new_cells[0]  # the opening baseline of the new campaign
    cell_log = tmp_path / target.log_path
    seen: dict = {}

    def cancel_in_window(proc):
        deadline = time.monotonic() + 240
        while "engine: ready" not in (cell_log.read_text(errors="replace") if cell_log.exists() else ""):
            assert proc.poll() is None, "Snakemake ended before the cell's engine was ready"
            assert time.monotonic() < deadline, "the cell's engine was not ready within 240 s"
            time.sleep(0.5)
        time.sleep(3)  # inside the measurement window (600 s long)
        text = cell_log.read_text(errors="replace")
        seen["engine_pgid"] = int(re.findall(r"pid (\d+) \(own process group\)", text)[-1])
        running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert len(running) == 1, f"expected only the new campaign's job running: {running}"
        seen["job"] = running[0]
        runner = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(
            p, "specjoule.runner", target.record_path)]
        seen["runner_pids"] = runner
        t0 = time.monotonic()
        subprocess.run(["scancel", seen["job"]], check=True, timeout=30)
        while time.monotonic() - t0 < KILL_WAIT_S + 15:
            if not any(pid_running(p) for p in runner) and not processes_in_group(seen["engine_pgid"]):
                break
            time.sleep(0.1)
        seen["gone_after_s"] = time.monotonic() - t0
        seen["engine_left"] = processes_in_group(seen["engine_pgid"])

    # --retries 0: the profile's retry after a cancel is tested in test_slurm_profile.py.
    # The limit covers the executor's poll schedule, not the cell: polls come 2, 12, 22, … s apart (+10 s per
    # poll that sees no job end, ADR 0050), at 2, 14, 36, 68, 110, 162, 224, 296 s; a cancel at 243 s (the 240 s
    # engine deadline above) is seen at 296 s and Snakemake's exit can lag one more interval: 378 s. A slow start
    # on 2026-12-01 put the cancel late, and a 300 s limit killed the run before Snakemake saw it (the engine
    # was gone 2.7 s after scancel).
    run2 = run_snakemake([*snakefile, "--retries", "0"], tmp_path, cpu=True, timeout_s=420,
                         on_start=cancel_in_window)
    print(f"[slurm-e2e] run 2 (scancel of a measuring cell): {run2.wall_s:.1f} s, rc={run2.returncode}; "
          f"runner and engine gone {seen.get('gone_after_s', float('nan')):.1f} s after scancel")
    assert not run2.timed_out, run2.output[-5000:]
    assert seen.get("runner_pids"), "did not find the runner process of the cancelled cell"
    # The cell stopped its engine and exited by itself, not by SIGKILL at the end of KillWait.
    assert not seen["engine_left"], f"engine processes left after scancel: {seen['engine_left']}"
    assert seen["gone_after_s"] < KILL_WAIT_S - 5, f"cell took {seen['gone_after_s']:.1f} s to stop"
    log_text = cell_log.read_text(errors="replace")
    assert "signal SIGTERM: cancelling the cell" in log_text, log_text[-3000:]
    # ... and got to the end of its own teardown (not SIGKILLed half-way by SLURM).
    assert "no record written" in log_text, log_text[-3000:]
    assert slurm_cluster.job_info(seen["job"])["JobState"] == "CANCELLED"
    # Snakemake reports it failed; the cancelled campaign left no record, no timeline.
    assert run2.returncode != 0
    assert "Error in group campaign" in run2.output
    for c in new_cells:
        assert not (tmp_path / c.record_path).exists(), c.record_path
        assert not (tmp_path / c.timeline_path).exists(), c.timeline_path
    # Nothing of the cancelled job outlives it (SLURM kills its steps' process groups after KillWait).
    left = slurm_cluster.wait_no_job_processes()
    assert not left, f"processes of the cancelled job still running: {left}"
    # Only the missing campaign was submitted; run 1's records were not touched.
    assert re.findall(r"submitted with SLURM jobid (\d+)", run2.output) == [seen["job"]]
    assert {p: p.stat().st_mtime_ns for p in run1_mtimes} == run1_mtimes
    print(f"[slurm-e2e] total {time.monotonic() - t_start:.1f} s")


def _cmdline_has(proc_dir: Path, *needles: str) -> bool:
    try:
        cmd = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return all(n in cmd for n in needles)
