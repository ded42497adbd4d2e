"""The device session's start gates (tools/device/gated_families.sh, profile_pair.sh), run for real with bash;
the campaign and the profiler are stand-ins (FAKE_* scripts that log their arguments), since what is tested is which
of them start, in which order, with which arguments and caps — not an engine."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GATED = REPO / "tools" / "device" / "gated_families.sh"
PAIR = REPO / "tools" / "device" / "profile_pair.sh"


def _fake(tmp_path: Path, name: str, body: str) -> tuple[Path, Path]:
    """A stand-in command that appends its arguments (one line per call) to a log, then runs ``body``."""
    log = tmp_path / f"{name}.calls"
    script = tmp_path / name
    script.write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n{body}\n')
    script.chmod(0o755)
    return script, log


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("name: x\n")
    return path


def test_gated_families_starts_what_fits_skips_the_rest_and_runs_a_family_once(tmp_path: Path, config: Path) -> None:
    fake, calls = _fake(tmp_path, "FAKE_campaign", "exit 0")
    deadline = int(time.time()) + 500
    entries = [f"{config} famA 100", f"{config} famB 900", f"{config} famA 50", f"{config} famC 400"]
    proc = _run(["bash", str(GATED), str(deadline), *entries], {"CAMPAIGN": str(fake)})
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().splitlines() == [f"{config} famA", f"{config} famC"]
    assert "skip famB" in proc.stdout and "gate 900 s" in proc.stdout
    assert "famA" in proc.stdout and "already started" in proc.stdout


def test_gated_families_reports_a_failed_family_and_still_runs_the_next(tmp_path: Path, config: Path) -> None:
    fake, calls = _fake(tmp_path, "FAKE_campaign", '[ "$2" = famA ] && exit 3; exit 0')
    deadline = int(time.time()) + 500
    proc = _run(["bash", str(GATED), str(deadline), f"{config} famA 10", f"{config} famB 10"], {"CAMPAIGN": str(fake)})
    assert proc.returncode == 3
    assert calls.read_text().splitlines() == [f"{config} famA", f"{config} famB"]
    assert "end famA rc=3" in proc.stdout


@pytest.mark.parametrize(
    "entry", ["{config} famA", "{config} famA 10s", "{config} famA 10 extra", "/no/such.yaml f 10"]
)
def test_gated_families_refuses_a_bad_entry_before_starting_anything(tmp_path: Path, config: Path, entry: str) -> None:
    fake, calls = _fake(tmp_path, "FAKE_campaign", "exit 0")
    bad = entry.format(config=config)
    proc = _run(["bash", str(GATED), str(int(time.time()) + 500), f"{config} ok 10", bad], {"CAMPAIGN": str(fake)})
    assert proc.returncode == 2
    assert bad in proc.stderr or "no config file" in proc.stderr
    assert not calls.exists()


def test_profile_pair_runs_sync_then_async_with_their_arguments(tmp_path: Path, config: Path) -> None:
    fake, calls = _fake(tmp_path, "FAKE_profile_rounds", "exit 0")
    deadline = int(time.time()) + 1000
    proc = _run(
        ["bash", str(PAIR), str(deadline), "330", str(config), "camp/cell", "results/rounds"],
        {"PROFILE_ROUNDS": str(fake)},
    )
    assert proc.returncode == 0, proc.stderr
    sync, async_ = calls.read_text().splitlines()
    assert sync == f"{config} camp/cell --out results/rounds --no-analyze"
    assert async_ == f"{config} camp/cell --out results/rounds --set async_scheduling=true --tag async"
    assert "sync rc=0" in proc.stdout and "async rc=0" in proc.stdout and "(cap 240 s)" in proc.stdout


def test_profile_pair_single_runs_one_analysed_profile_with_the_engines_own_settings(
    tmp_path: Path, config: Path
) -> None:
    # SINGLE=1 (an SGLang cell: no async_scheduling switch): one run, no --no-analyze, no --set, behind the same gate.
    fake, calls = _fake(tmp_path, "FAKE_profile_rounds", "exit 3")
    deadline = int(time.time()) + 1000
    proc = _run(
        ["bash", str(PAIR), str(deadline), "180", str(config), "camp/cell", "results/rounds-sglang"],
        {"PROFILE_ROUNDS": str(fake), "SINGLE": "1"},
    )
    assert calls.read_text().splitlines() == [f"{config} camp/cell --out results/rounds-sglang"]
    assert proc.returncode == 3  # the run's own failure is the script's status
    assert "single rc=3" in proc.stdout and "async" not in proc.stdout


def test_profile_pair_skips_when_its_gate_does_not_fit(tmp_path: Path, config: Path) -> None:
    fake, calls = _fake(tmp_path, "FAKE_profile_rounds", "exit 0")
    proc = _run(
        ["bash", str(PAIR), str(int(time.time()) + 300), "330", str(config), "c/x", "o"], {"PROFILE_ROUNDS": str(fake)}
    )
    assert proc.returncode == 0
    assert "skip c/x: gate 330 s" in proc.stdout
    assert not calls.exists()


def test_profile_pair_caps_each_run_at_the_time_left_and_reports_a_timeout(tmp_path: Path, config: Path) -> None:
    # The first run sleeps past the 2-3 s left before the deadline: timeout ends it (124); the second gets no time.
    fake, calls = _fake(tmp_path, "FAKE_profile_rounds", "sleep 30")
    deadline = int(time.time()) + 3
    t0 = time.monotonic()
    proc = _run(["bash", str(PAIR), str(deadline), "0", str(config), "c/x", "o"], {"PROFILE_ROUNDS": str(fake)})
    assert time.monotonic() - t0 < 20  # capped, not the stand-in's 30 s
    assert proc.returncode != 0
    assert "sync rc=124" in proc.stdout
    assert "async not started: the deadline has passed" in proc.stdout
    assert len(calls.read_text().splitlines()) == 1


def test_profile_pair_refuses_non_numeric_times(tmp_path: Path, config: Path) -> None:
    proc = _run(["bash", str(PAIR), "soon", "330", str(config), "c/x", "o"], {"PROFILE_ROUNDS": "true"})
    assert proc.returncode == 2 and "got 'soon'" in proc.stderr
