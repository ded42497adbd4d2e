"""tools/device/background.sh, run for real on this machine: a long device job must survive a lost
machine by collect → (fresh machine) seed → start again, with what was collected still in place."""

from __future__ import annotations

import subprocess
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "background.sh"


def bg(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "BACKGROUND_ROOT": str(root)},
    )


def test_collect_seed_and_resume_on_a_fresh_machine(tmp_path):
    first, fresh, out = tmp_path / "machine1", tmp_path / "machine2", tmp_path / "out"
    cache = "results/.specjoule/engine-cache/vllm/torch_compile_cache/5cab4eadf4"
    r = bg(
        first,
        "start",
        "job",
        f"mkdir -p results/cells/c {cache} && echo rec > results/cells/c/a.parquet && "
        f"echo graph > {cache}/model && sleep 1",
    )
    assert r.returncode == 0, r.stderr
    r = bg(first, "wait", "job", "60")
    assert "finished rc=0" in r.stdout, r.stdout + r.stderr
    assert bg(first, "collect", "job", str(out)).returncode == 0
    tarball = out / "job-results.tar.gz"
    with tarfile.open(tarball) as tar:
        assert "results/cells/c/a.parquet" in tar.getnames()
        # the compile cache (ADR 0189) is the engine's, not evidence, and too large to come back
        assert not any("engine-cache" in n for n in tar.getnames())
    # the checkout was copied, not the caller's results/ (the copy is what the job sees)
    assert (first / "job" / "Snakefile").is_file() and not (first / "job" / ".git").exists()

    # a fresh machine: nothing of machine1 is there; seed the collected tar, start the same job again
    r = bg(fresh, "seed", "job", str(tarball))
    assert r.returncode == 0 and "1 parquet file(s)" in r.stdout, r.stdout + r.stderr
    r = bg(fresh, "start", "job", "test -f results/cells/c/a.parquet && echo resumed-with-record")
    assert r.returncode == 0, r.stderr
    r = bg(fresh, "wait", "job", "60")
    assert "resumed-with-record" in r.stdout and "finished rc=0" in r.stdout, r.stdout


def test_seed_refuses_a_running_job_and_a_missing_tarball(tmp_path):
    assert bg(tmp_path, "seed", "job", str(tmp_path / "nope.tar.gz")).returncode == 2
    t0 = time.monotonic()
    assert bg(tmp_path, "start", "job", "sleep 20").returncode == 0
    # start returns while the job runs: nothing of the job holds the caller's stdout (a device call
    # capturing it would otherwise block for the whole run)
    assert time.monotonic() - t0 < 10
    try:
        assert _live_in_session((tmp_path / "job.state" / "pid").read_text().strip())
        (tmp_path / "t.tar.gz").write_bytes(b"")
        r = bg(tmp_path, "seed", "job", str(tmp_path / "t.tar.gz"))
        assert r.returncode == 2 and "running" in r.stderr
    finally:
        pid = (tmp_path / "job.state" / "pid").read_text().strip()
        subprocess.run(["kill", "--", f"-{pid}"], check=False)
    # the recorded pid leads the job's own session: killing it leaves nothing of the job running
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _live_in_session(pid):
        time.sleep(0.2)
    assert not _live_in_session(pid)


def _live_in_session(sid: str) -> list[str]:
    out = subprocess.run(["ps", "-o", "stat=", "-s", sid], capture_output=True, text=True).stdout.split()
    return [s for s in out if not s.startswith("Z")]


def test_wait_on_a_fresh_machine_returns_at_once_and_says_why(tmp_path):
    """2026-12-03: a poll sent after the machine was lost reached a fresh one and waited its whole limit (400 s
    of held device time) on a job that did not exist there."""
    t0 = time.monotonic()
    r = bg(tmp_path / "fresh", "wait", "eng", "30")
    assert time.monotonic() - t0 < 10
    assert r.returncode == 4
    assert "no job eng on this machine" in r.stderr
