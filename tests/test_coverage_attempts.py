"""How the coverage matrix reads attempts that wrote no record (ADR 0197, 0222): latest first, each with how it ended
as far as the committed files say (the marker's error, else its log's, else "no error recorded").

Markers are written by the runner's own functions; logs in the runner's line format (``runner.LOG_DATEFMT``). The
expected order and counts on the committed evidence come from the marker files and logs, read here directly.
"""

from __future__ import annotations

import json
import re
import time
import types
from pathlib import Path

import polars as pl
import pytest

from specjoule import cells, config, logtext, runner
from specjoule.analysis import coverage
from specjoule.engines import EngineError

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "validation" / "h200-2026-12"
GDN_CAMPAIGN = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"


@pytest.fixture(scope="module")
def gdn_cells() -> dict:
    return {c.name: c for c in cells.build(config.load(ROOT / "config" / "h200-schemes-gdn.yaml")).cells}


def log_line(t: float, message: str) -> str:
    """A line as runner.LOG_FORMAT writes it on a machine whose local time is UTC (the H200 machines)."""
    return f"{time.strftime(runner.LOG_DATEFMT, time.gmtime(t))}.{int(t % 1 * 1000):03d} INFO {message}\n"


def started(cell) -> float:
    return json.loads(runner.attempt_marker(cell).read_text())["started"]


def write_log(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines))


def test_an_attempt_cut_in_its_window_reads_as_no_error_recorded(tmp_path, monkeypatch, gdn_cells):
    """2026-12-02f: MTP's engine started and its first window ran when the budget ended; nothing noted a failure."""
    cell = gdn_cells["mtp--mv1"]
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    t = started(cell)
    write_log(
        tmp_path / "results" / "logs" / "engines" / "g02-point.log",
        [
            log_line(t - 213, f"specjoule.runner: cells {GDN_CAMPAIGN}/mtp--mv1, {GDN_CAMPAIGN}/mtp--mv4: start"),
            log_line(t, "specjoule.runner: engine: ready after 212.7 s"),
            log_line(t + 24, "specjoule.workload: window: 4 generation(s), 16.3 s"),
        ],
    )
    (attempt,) = coverage.failed_attempts([tmp_path]).iter_rows(named=True)
    assert attempt["cause"] == coverage.NO_CAUSE and not attempt["errored"] and attempt["log_error"] is None
    assert attempt["log"] == "results/logs/engines/g02-point.log" and attempt["where"] == "results"
    assert coverage.attempt_outcome(attempt) == "no error recorded (nor in its log, which stops 24 s after this start)"


def test_a_marker_without_a_cause_takes_the_error_its_log_names(tmp_path, monkeypatch, gdn_cells):
    """2026-12-02c's markers predate ADR 0197; the runner had logged each cell's failure in the log beside them."""
    cell = gdn_cells["baseline--open"]
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    t = started(cell)
    committed = EVIDENCE / "session-2026-12-02c" / "failed-starts" / "vllm-qwen36_35b_a3b-g00-opening.log"
    # the committed log of that start, moved to this marker's time (its lines keep their order and spacing)
    lines = logtext.read_log(committed).splitlines(keepends=True)
    first = coverage._log_time(lines[0])
    assert first is not None
    moved = [log_line(t + (lt - first), line[24:]) if (lt := coverage._log_time(line)) else line for line in lines]
    write_log(tmp_path / "failed-starts.log", moved)
    (attempt,) = coverage.failed_attempts([tmp_path]).iter_rows(named=True)
    assert attempt["cause"] == coverage.NO_CAUSE and not attempt["errored"]
    assert attempt["log_error"] == "ModuleNotFoundError: No module named 'compressed_tensors'"
    assert coverage.attempt_outcome(attempt) == (
        "ModuleNotFoundError: No module named 'compressed_tensors' (in its log; the marker notes no error)"
    )


def test_a_log_of_the_same_cell_at_another_time_is_not_the_attempts_log(tmp_path, monkeypatch, gdn_cells):
    cell = gdn_cells["mtp--mv1"]
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    t = started(cell) - 86_400  # the same cell's log from the day before (another run), with a failure in it
    write_log(
        tmp_path / "old" / "g02-point.log",
        [
            log_line(t, f"specjoule.runner: cell {GDN_CAMPAIGN}/mtp--mv1: start"),
            log_line(t + 9, "specjoule.runner: cell: failed, no record written for the cell in progress: "),
            "OSError: disk full\n",
        ],
    )
    (attempt,) = coverage.failed_attempts([tmp_path]).iter_rows(named=True)
    assert attempt["log"] is None and coverage.attempt_outcome(attempt) == coverage.NO_CAUSE


def test_attempts_read_latest_first_with_how_each_ended(tmp_path, monkeypatch, gdn_cells):
    """An older start that failed and a newer one that was cut: the newer leads, and the note counts both kinds."""
    older, newer = gdn_cells["baseline--open"], gdn_cells["mtp--mv1"]
    # the older attempt: its own run folder, the runner's failure note, then dated an hour back
    (tmp_path / "a-first").mkdir()
    (tmp_path / "z-second").mkdir()
    monkeypatch.chdir(tmp_path / "z-second")  # folders named against the order of time: order is by start
    runner.mark_attempt(older)
    runner.note_failed_attempt(
        [types.SimpleNamespace(cell=older)], EngineError("vLLM engine failed to start: OSError: no processor"), None
    )
    marker = runner.attempt_marker(older)
    noted = json.loads(marker.read_text())
    marker.write_text(json.dumps({**noted, "started": noted["started"] - 3600}))
    monkeypatch.chdir(tmp_path / "a-first")
    runner.mark_attempt(newer)
    table = coverage.failed_attempts([tmp_path])
    assert table["errored"].to_list().count(True) == 1
    text = coverage.attempts_text(table)
    assert text.startswith(
        "2 attempts, latest first; 1 ended with an error, 1 with no error recorded: mtp--mv1: no error recorded ["
    )
    later, earlier = text.split(" | ")
    assert "a-first/results]" in later and "z-second/results]" in earlier
    assert earlier.startswith("baseline--open: EngineError: vLLM engine failed to start: OSError: no processor [")
    # one attempt alone reads as before: the cell and how it ended
    assert coverage.attempts_text(table.filter(table["errored"])) == (
        "baseline--open: EngineError: vLLM engine failed to start: OSError: no processor"
    )


def _committed_markers() -> list[dict]:
    """The committed markers of the Qwen3.6 vLLM campaign, read directly: start, folder, and whether the runner
    noted an error in the marker or logged the cell's failure in a log beside it."""
    out = []
    for marker in sorted(EVIDENCE.glob(f"**/.specjoule/attempts/{GDN_CAMPAIGN}/*")):
        noted = json.loads(marker.read_text())
        holder = marker.parents[2].parent
        texts = [logtext.read_log(log) for log in holder.glob("*.log*")]  # 2026-12-02c: the log beside it
        logged_failure = any(f"{GDN_CAMPAIGN}/{marker.name.split('.')[0]}" in t and "cell: failed" in t for t in texts)
        out.append(
            {
                "cell": marker.name.split(".")[0],
                "started": noted["started"],
                "where": str(holder.relative_to(EVIDENCE)),
                "error": "failed_at" in noted or logged_failure,
            }
        )
    return sorted(out, key=lambda m: -m["started"])


def test_qwen36_mtp_on_vllm_names_its_latest_attempt_first_cut_by_the_budget(h200_evidence_records):
    """2026-12-02f's MTP start was cut by the session's device budget (its README); the image-processor failure
    of 2026-12-02d was fixed by ADR 0210 and is an old attempt, not the row's current state."""
    # the row's own attempts: its arm's and the campaign's baselines' (a DFlash start is DFlash's row, ADR 0222)
    markers = [m for m in _committed_markers() if m["cell"].startswith(("mtp--", "baseline--"))]
    assert len(markers) < len(_committed_markers())  # 2026-12-02f machine 1's DFlash attempt is left out
    assert markers[0]["where"] == "session-2026-12-02f/gdn/cut-by-budget" and not markers[0]["error"]
    records = h200_evidence_records  # coverage.load_evidence([EVIDENCE]), read once per worker (conftest)
    plan = coverage.planned_cells(["config/h200-schemes-gdn.yaml"])
    attempts = coverage.failed_attempts([EVIDENCE])

    def mtp_row(evidence: pl.DataFrame) -> dict:
        (row,) = (
            coverage.matrix(evidence, plan, attempts)
            .filter(
                (pl.col("target_model") == "config/models/qwen3.6-35b-a3b")
                & (pl.col("method") == "mtp")
                & (pl.col("engine") == "vllm")
            )
            .iter_rows(named=True)
        )
        return row

    # 2026-12-03c measured the arm (the pinned config): from then on the row is measured, its attempts still counted
    assert mtp_row(records)["status"] == coverage.MEASURED
    got = mtp_row(records.filter(~pl.col("run").str.contains("session-2026-12-03c")))  # the tree before it
    assert got["status"] == coverage.ATTEMPT_FAILED
    errors = sum(m["error"] for m in markers)
    assert got["reason"].startswith(
        f"{len(markers)} attempts, latest first; {errors} ended with an error, {len(markers) - errors} with no "
        "error recorded: mtp--mv1: no error recorded (nor in its log, which stops "
    )
    entries = got["reason"].split(" | ")
    assert [e.rsplit(", ", 1)[1].rstrip("]") for e in entries] == [m["where"] for m in markers]
    assert "written before ADR 0197" not in got["reason"]  # what the row claimed of 2026-12-02f's markers
    assert entries[-1].startswith("baseline--open: ModuleNotFoundError: No module named 'compressed_tensors' (in its")


def test_a_log_that_stops_inside_a_vllm_start_ends_at_vllm_s_last_line(tmp_path, monkeypatch, gdn_cells):
    """2026-12-04c: the EAGLE3 engine was still starting when machine 1 went away; after the runner's 'engine: start'
    only vLLM's own lines (month-day, no year) were written. The log ends at the last of them, not the runner's."""
    cell = gdn_cells["mtp--mv1"]
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    t = started(cell)
    vllm_line = time.strftime("(EngineCore pid=1891) INFO %m-%d %H:%M:%S [monitor.py:81] warm-up took 91.04 s\n",
                              time.gmtime(t + 197))
    write_log(
        tmp_path / "results" / "logs" / "engines" / "g01-point.log",
        [
            log_line(t, f"specjoule.runner: cells {GDN_CAMPAIGN}/mtp--mv1, {GDN_CAMPAIGN}/mtp--mv4: start"),
            log_line(t + 3, "specjoule.runner: engine: start (vllm, offline)"),
            vllm_line,
            "Capturing CUDA graphs (decode, FULL):  50%|█████     | 2/4\n",  # no time: ignored
        ],
    )
    (attempt,) = coverage.failed_attempts([tmp_path]).iter_rows(named=True)
    assert attempt["log_end"] - attempt["started"] == pytest.approx(197, abs=1)
    # the vLLM line has whole seconds: 196 or 197 s after a start with a fraction; the runner's last line was 3 s
    assert re.search(r"which stops 19[67] s after this start", coverage.attempts_text(coverage.failed_attempts([tmp_path])))


def test_an_arm_of_a_config_outside_the_plan_is_not_a_baseline_of_the_shared_campaign(h200_evidence_records):
    """config/h200-schemes-gdn-eagle3.yaml's campaign is h200-schemes-gdn.yaml's (one shape): its EAGLE3 attempt of
    2026-12-04c is EAGLE3's row with every shipped config planned, and no row's baseline with only the MTP config."""
    records = h200_evidence_records  # coverage.load_evidence([EVIDENCE]), read once per worker (conftest)
    attempts = coverage.failed_attempts([EVIDENCE])
    (lost,) = attempts.filter(pl.col("where").str.contains("session-2026-12-04c")).iter_rows(named=True)
    assert (lost["campaign_id"], lost["cell_name"], lost["errored"]) == (GDN_CAMPAIGN, "eagle3--mv4", False)

    def qwen36_vllm(records: pl.DataFrame, plan: pl.DataFrame, method: str) -> dict:
        (row,) = (
            coverage.matrix(records, plan, attempts)
            .filter(
                (pl.col("target_model") == "config/models/qwen3.6-35b-a3b")
                & (pl.col("method") == method)
                & (pl.col("engine") == "vllm")
            )
            .iter_rows(named=True)
        )
        return row

    shipped = coverage.planned_cells(coverage.shipped_configs())
    assert qwen36_vllm(records, shipped, "eagle3")["status"] == coverage.MEASURED  # 2026-12-04d measured it whole
    before = records.filter(~pl.col("run").str.contains("session-2026-12-04d"))  # the tree before it
    eagle3 = qwen36_vllm(before, shipped, "eagle3")
    assert eagle3["status"] == coverage.ATTEMPT_FAILED
    assert eagle3["reason"].split(" | ")[0].startswith("4 attempts, latest first; 3 ended with an error, 1 with no error")
    assert "eagle3--mv4: no error recorded (nor in its log, which stops 198 s after this start)" in eagle3["reason"]
    only_mtp = coverage.planned_cells(["config/h200-schemes-gdn.yaml"])
    assert "eagle3--" not in (qwen36_vllm(before, only_mtp, "dflash")["reason"] or "")
    assert all("eagle3" not in m for m in coverage.planned_cells(["config/h200-schemes-gdn.yaml"])["method"])
