"""tools/device/gated_families.sh, run for real with a stand-in for campaign.sh (named so: the real one needs a
GPU): the start gate skips a family that would not end before the deadline, a knowingly-cut fallback entry runs
only for a family not yet started, a failing family does not stop the next, and bad entries fail before any run."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "device" / "gated_families.sh"


def gated(
    tmp_path: Path, deadline_in_s: int, *entries: str, fail: str = ""
) -> tuple[subprocess.CompletedProcess, list[str]]:
    ran = tmp_path / "ran.txt"
    stand_in = tmp_path / "fake_campaign.sh"
    stand_in.write_text(f'echo "$1 $2" >> {ran}\n[ "$2" != "{fail}" ]\n')
    r = subprocess.run(
        ["bash", str(SCRIPT), str(int(time.time()) + deadline_in_s), *entries],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "CAMPAIGN": str(stand_in)},
        cwd=ROOT,
    )
    return r, ran.read_text().splitlines() if ran.exists() else []


CFG = "config/h200-schemes-sglang-families.yaml"


def test_gate_skips_what_does_not_fit_and_the_cut_fallback_runs_once(tmp_path):
    r, ran = gated(
        tmp_path,
        1000,
        f"{CFG} fam_a 600",
        f"{CFG} fam_b 5000",  # does not fit: skipped
        f"{CFG} fam_c 900",
        f"{CFG} fam_b 300",  # the cut fallback for fam_b: it has not started, so it runs
        f"{CFG} fam_a 100",  # fam_a already ran: not again
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran == [f"{CFG} fam_a", f"{CFG} fam_c", f"{CFG} fam_b"]
    assert "skip fam_b" in r.stdout and "fam_a (" + CFG + "): already started" in r.stdout


def test_a_failed_family_does_not_stop_the_next_and_sets_the_exit_status(tmp_path):
    r, ran = gated(tmp_path, 1000, f"{CFG} fam_a 10", f"{CFG} fam_b 10", fail="fam_a")
    assert ran == [f"{CFG} fam_a", f"{CFG} fam_b"]
    assert r.returncode != 0 and "end fam_a rc=1" in r.stdout


def test_bad_entries_fail_before_any_family_runs(tmp_path):
    for entries in (
        [f"{CFG} fam_a 10", f"{CFG} fam_b ten"],
        [f"{CFG} fam_a 10", "config/no-such.yaml fam_b 10"],
        [f"{CFG} fam_a"],
    ):
        r, ran = gated(tmp_path, 1000, *entries)
        assert r.returncode == 2 and ran == [], (entries, r.stderr)
        assert "gated: entry" in r.stderr
    r, ran = gated(tmp_path, 0, f"{CFG} fam_a 10")
    assert ran == [] and "skip fam_a" in r.stdout
