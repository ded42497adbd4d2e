"""Issue 21 item 4: a SLURM job preempted and requeued resumes its campaign without measuring its finished cells
again (ADR 0134), on the real single-node SLURM of tests/slurm_cluster.py and the real pipeline (vLLM on CPU).

One campaign (opening baseline → ngram), one group job submitted with ``--slurm-requeue``. While its second cell
starts its engine, ``scontrol requeue`` does what a preempting partition with ``PreemptMode=REQUEUE`` does: SIGTERM
to the job, then the same job id back in the queue. The requeued job must keep the baseline's record as measured
(same window, same engine launch), measure the interrupted cell once more and say so in its record (``retried``,
``slurm_restart_count``), leave no process behind, and Snakemake must finish without submitting another job.
About 4-6 min on 2 idle cores (three vLLM engine starts, one of them cut short).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

pytest.register_assert_rewrite("slurm_cluster")
from slurm_cluster import REPO, run_snakemake  # noqa: E402

pytest_plugins = ["slurm_cluster"]


def rows(work: Path, cells) -> dict[str, dict]:
    from specjoule import records

    return {c.name: records.read_records([work / c.record_path]).to_pylist()[0] for c in cells
            if (work / c.record_path).exists()}


@pytest.mark.slurm
@pytest.mark.engine
@pytest.mark.timeout(900)
def test_requeued_campaign_keeps_finished_cells_and_marks_the_retried_one(slurm_cluster, tmp_path):
    from specjoule import cells, config

    raw = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    raw["schemes"] = {n: s for n, s in raw["schemes"].items() if s["method"] in ("baseline", "ngram")}
    raw["protocol"]["closing_baseline"] = False
    raw["workloads"]["closed"].update(min_window_s=3, output_len=16)
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    table = list(cells.build(config.validate(raw)))
    first, second = table  # opening baseline, then ngram: one campaign, one chain
    seen: dict = {}

    def requeue_while_the_second_cell_starts(proc) -> None:
        deadline = time.monotonic() + 420
        second_log = tmp_path / second.log_path
        while "engine: start" not in (second_log.read_text(errors="replace") if second_log.exists() else ""):
            assert proc.poll() is None, "Snakemake ended before the second cell started"
            assert time.monotonic() < deadline, "the second cell did not start within 420 s"
            time.sleep(0.5)
        seen["before"] = rows(tmp_path, [first])[first.name]
        running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert len(running) == 1, running
        seen["job"] = running[0]
        subprocess.run(["scontrol", "requeue", seen["job"]], check=True, timeout=30)
        seen["requeued_at"] = time.monotonic()
        # A requeued job waits for its begin time; release it now, as a freed partition would.
        for _ in range(60):
            state = slurm_cluster.job_info(seen["job"]).get("JobState")
            if state == "PENDING":
                subprocess.run(["scontrol", "update", f"JobId={seen['job']}", "StartTime=now"], check=False,
                               timeout=30)
                subprocess.run(["scontrol", "release", seen["job"]], check=False, timeout=30)
                break
            time.sleep(1)

    targets = [first.record_path, second.record_path]
    run = run_snakemake(["-s", str(REPO / "Snakefile"), "--configfile", "grid.yaml", "--slurm-requeue",
                         "--retries", "0", *targets], tmp_path, cpu=True, timeout_s=840,
                        on_start=requeue_while_the_second_cell_starts)
    print(f"\n[slurm-requeue] {run.wall_s:.0f} s, rc={run.returncode}, job {seen.get('job')}")
    assert not run.timed_out, run.output[-5000:]
    assert seen.get("job"), "the job was never requeued"
    assert run.returncode == 0, run.output[-5000:]
    # One job, requeued, not resubmitted.
    assert re.findall(r"submitted with SLURM jobid (\d+)", run.output) == [seen["job"]]
    assert slurm_cluster.job_info(seen["job"]).get("Restarts") == "1"

    after = rows(tmp_path, [first, second])
    kept, redone = after[first.name], after[second.name]
    # The finished cell was not measured again: the very window and engine launch of the first run.
    for col in ("window_start", "window_start_monotonic", "engine_instance", "committed_tokens"):
        assert kept[col] == seen["before"][col], col
    assert kept["slurm_restart_count"] == 0 and kept["retried"] is False
    # The interrupted cell ran again, in the requeued job, and says so.
    assert redone["slurm_job_id"] == seen["job"] and redone["slurm_restart_count"] == 1
    assert redone["retried"] is True and redone["committed_tokens"] > 0
    first_log = (tmp_path / first.log_path).read_text(errors="replace")
    assert "record kept, not measured again" in first_log, first_log[-2000:]
    second_log = (tmp_path / second.log_path).read_text(errors="replace")
    assert "an earlier attempt started and wrote no record" in second_log, second_log[-2000:]
    left = slurm_cluster.wait_no_job_processes()
    assert not left, f"processes of the job still running: {left}"
