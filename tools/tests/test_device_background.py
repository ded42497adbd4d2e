"""tools/device/background.sh, run for real on this machine: a long device job must survive a lost
machine by collect → (fresh machine) seed → start again, with what was collected still in place."""

from __future__ import annotations

import subprocess
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "background.sh"


def bg(root: Path, *args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "BACKGROUND_ROOT": str(root)},
    )


def small_checkout(where: Path) -> Path:
    """A checkout of a few files around a byte-for-byte copy of the script (which copies the checkout it lies in):
    the repository's own is ~50 MB a start, 147 MB and 11,000 files of test-fast's temporary folder for two tests.
    It holds one of each thing a start must leave behind (the caller's results/, .git, .snakemake, .bundle, .venv)."""
    for name, text in {
        "Snakefile": "rule all:\n",
        "config/c.yaml": "name: c\n",
        "notes.txt": "untracked\n",
        "results/cells/old/r.parquet": "caller's\n",
        ".git/HEAD": "ref\n",
        ".snakemake/log/x": "\n",
        ".bundle/parts/00": "\n",
        ".venv/bin/python": "\n",
    }.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_text(text)
    script = where / "tools" / "device" / "background.sh"
    script.parent.mkdir(parents=True)
    script.write_bytes(SCRIPT.read_bytes())
    return script


def test_collect_seed_and_resume_on_a_fresh_machine(tmp_path):
    first, fresh, out = tmp_path / "machine1", tmp_path / "machine2", tmp_path / "out"
    script = small_checkout(tmp_path / "checkout")
    cache = "results/.specjoule/engine-cache/vllm/torch_compile_cache/5cab4eadf4"
    r = bg(
        first,
        "start",
        "job",
        f"mkdir -p results/cells/c {cache} && echo rec > results/cells/c/a.parquet && "
        f"echo graph > {cache}/model && sleep 1",
        script=script,
    )
    assert r.returncode == 0, r.stderr
    t0 = time.monotonic()
    r = bg(first, "wait", "job", "60", script=script)
    assert "finished rc=0" in r.stdout, r.stdout + r.stderr
    # the job's end returns the wait within its 1 s look-up, not a 5 s poll's (held device time)
    assert time.monotonic() - t0 < 5
    assert bg(first, "collect", "job", str(out), script=script).returncode == 0
    tarball = out / "job-results.tar.gz"
    with tarfile.open(tarball) as tar:
        assert "results/cells/c/a.parquet" in tar.getnames()
        # the compile cache (ADR 0189) is the engine's, not evidence, and too large to come back
        assert not any("engine-cache" in n for n in tar.getnames())
    # the checkout was copied, tracked and untracked files alike, not the caller's results/ nor .git, .snakemake,
    # .bundle or .venv (the copy is what the job sees)
    job = first / "job"
    assert all(
        (job / name).is_file() for name in ("Snakefile", "config/c.yaml", "notes.txt", "tools/device/background.sh")
    )
    assert not (job / "results" / "cells" / "old").exists()
    assert not any((job / name).exists() for name in (".git", ".snakemake", ".bundle", ".venv"))

    # a fresh machine: nothing of machine1 is there; seed the collected tar, start the same job again
    r = bg(fresh, "seed", "job", str(tarball), script=script)
    assert r.returncode == 0 and "1 parquet file(s)" in r.stdout, r.stdout + r.stderr
    r = bg(fresh, "start", "job", "test -f results/cells/c/a.parquet && echo resumed-with-record", script=script)
    assert r.returncode == 0, r.stderr
    r = bg(fresh, "wait", "job", "60", script=script)
    assert "resumed-with-record" in r.stdout and "finished rc=0" in r.stdout, r.stdout


def test_seed_refuses_a_running_job_and_a_missing_tarball(tmp_path):
    script = small_checkout(tmp_path / "checkout")
    assert bg(tmp_path, "seed", "job", str(tmp_path / "nope.tar.gz"), script=script).returncode == 2
    t0 = time.monotonic()
    assert bg(tmp_path, "start", "job", "sleep 20", script=script).returncode == 0
    # start returns while the job runs: nothing of the job holds the caller's stdout (a device call
    # capturing it would otherwise block for the whole run)
    assert time.monotonic() - t0 < 10
    try:
        assert _live_in_session((tmp_path / "job.state" / "pid").read_text().strip())
        (tmp_path / "t.tar.gz").write_bytes(b"")
        r = bg(tmp_path, "seed", "job", str(tmp_path / "t.tar.gz"), script=script)
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
