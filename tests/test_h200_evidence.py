"""The committed GPU evidence (validation/h200-2026-12/, and validation/h100-2026-12/ since ADR 0241): real SGLang
(session-2026-11-30c), vLLM (session-2026-12-01) and both engines on one GPU (session-2026-12-01b) records, and
every session's since.

Re-deriving the checks from the committed records must give the committed verdicts (a check that fired
stays fired), and the records' known latency error must not reach the analysis as a number.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import yaml

from specjoule import cells, logtext
from specjoule import config as sj_config
from specjoule import records as sj_records
from specjoule.analysis import (
    aggregate,
    compare_evidence,
    derive,
    evidence,
    packed,
    roofline,
    variance,
    window_activity,
)
from specjoule.analysis import rounds as rounds_analysis
from specjoule.analysis.checks import Thresholds, run_checks
from specjoule.report import render
from tools import slim_evidence

ROOT = Path(__file__).resolve().parent.parent
# Configs of runs on the H200 live next to their evidence (ADR 0141).
RUN_CONFIGS = ROOT / "validation" / "h200-2026-12" / "config"
SESSION = ROOT / "validation" / "h200-2026-12" / "session-2026-11-30c"
RECORDS = packed.tree_files(SESSION / "results" / "cells", "*/*.parquet")
SESSION_1201 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01"
CLOSED = SESSION_1201 / "closed"
OPEN_LOOP = SESSION_1201 / "openloop"
ENGINES_1GPU = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01b"
OPEN_LOOP_SMOKE = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01c"


@functools.cache
def _aggregated_once(paths: tuple[Path, ...]) -> pl.DataFrame:
    return aggregate.aggregate(paths)


def _aggregated(paths: Sequence[Path]) -> pl.DataFrame:
    """``aggregate.aggregate`` of committed records, made once a run for each set of record files and shared by the
    tests that read it (polars frames are not changed in place here): about 40 % of this module's 89 aggregations
    were a set another test had aggregated already (issue 22)."""
    return _aggregated_once(tuple(paths))


@functools.cache
def _profile_once(folder: Path) -> tuple[dict, list[dict]]:
    return rounds_analysis.analyze_profile(folder)


def _analyzed_profile(folder: Path) -> tuple[dict, list[dict]]:
    """``rounds.analyze_profile`` of a committed profile folder, read once a run and handed out as a copy (a test may
    change the dicts it gets): 18 of the 40 reads in a run were of a folder that the test of every committed profile
    read before them (issue 22, about 1 s). The committed traces do not change while the tests run."""
    import copy

    return copy.deepcopy(_profile_once(Path(folder)))


def test_records_are_committed():
    assert len(RECORDS) == 10, [p.name for p in RECORDS]


def test_sglang_latency_from_decode_throughput_is_nulled_not_shown():
    raw = pl.concat([packed.read_frame(p) for p in RECORDS], how="diagonal_relaxed")
    mv6 = raw.filter(pl.col("cell_name") == "draft--mv6")
    # the trap, as recorded on the H200: TPOT ≈ 1e-8 s at L = 6 (ADR 0016)
    assert (mv6["tpot_mean_s"] < 1e-6).all() and (mv6["latency_source"] == "request_metrics").all()
    messages: list[str] = []
    df = aggregate.aggregate(RECORDS, log=messages.append)
    assert df.filter(pl.col("engine") == "sglang").height == 10
    for col in aggregate.LATENCY_COLUMNS:
        assert df[col].is_null().all(), col
    assert (df["latency_source"] == aggregate.UNTRUSTED_LATENCY_SOURCE).all()
    assert df["baseline_tpot_mean_s"].is_null().all()
    assert any("10 SGLang record(s)" in m for m in messages)
    # everything else is untouched: the energy figures are the records'
    assert df["mj_per_committed_token"].sort().to_list() == pytest.approx(
        raw["mj_per_committed_token"].sort().to_list()
    )


# Checks added after these sessions (issue 17): one window, one seed, no reference here, so not applicable.
LATER_CHECKS = {"interval_width", "reproduces_reference"}


def _assert_shipped_copy(folder: Path, name: str, shipped: Path = ROOT / "config") -> None:
    """A session folder's copy of the config it ran is byte for byte the pre-registered one that ships."""
    assert (folder / name).read_bytes() == (shipped / name).read_bytes(), name


def _verdict(
    folder: Path, config_name: str, replicated: bool = False, cells_also_in: tuple[Path, ...] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Checks re-derived from a session's committed records; every fail must be in its committed checks.md.
    ``replicated``: the session has replicate units, so the interval checks apply (kept, not asserted idle).
    ``cells_also_in``: other evidence folders whose records the committed analysis read beside these (a config
    whose families were measured in two sessions; each folder keeps the records it measured)."""
    records = sorted(p for f in (folder, *cells_also_in) for p in packed.tree_files(f / "results" / "cells", "*/*.parquet"))
    cfg = sj_config.load(folder / config_name)
    df = _aggregated(records)
    checks = run_checks(df, Thresholds.from_config(cfg["checks"], cfg["report"]), sj_config.config_hash(cfg))
    if not replicated:
        later = checks.filter(pl.col("check").is_in(list(LATER_CHECKS)))
        assert set(later["status"]) == {"not_applicable"}, later
        checks = checks.filter(~pl.col("check").is_in(list(LATER_CHECKS)))
    committed = (folder / "results" / "checks.md").read_text()
    for row in checks.filter(pl.col("status") == "fail").iter_rows(named=True):
        assert f"| fail | {row['check']} | {row['campaign_id']} |" in committed
    return df, checks


def test_checks_rederived_from_the_records_match_the_committed_verdicts():
    _, checks = _verdict(SESSION, "config-analysis.yaml")
    failed = set(checks.filter(pl.col("status") == "fail")["check"])
    # two H200 machines in one family, and the baseline moved with them (README of the session)
    assert failed == {"same_gpu", "baseline_drift", "engine_config_matched"}
    drift = checks.filter(pl.col("check") == "baseline_drift").sort("campaign_id")["value"].to_list()
    assert drift == pytest.approx([0.08455, 0.04827], rel=1e-3)  # b1, b32
    acc = checks.filter(pl.col("check") == "acceptance_length")
    assert (acc["status"] == "pass").all()


def test_analysis_config_differs_from_the_campaign_config_only_in_engines():
    measured = yaml.safe_load((RUN_CONFIGS / "h200-engines.yaml").read_text())
    analysed = yaml.safe_load((SESSION / "config-analysis.yaml").read_text())
    assert measured["engines"] == ["vllm", "sglang"] and analysed["engines"] == ["sglang"]
    measured.pop("engines"), analysed.pop("engines")
    assert measured == analysed


# --- session of 2026-12-01: the vLLM closed grid on 4 engine starts (swap, ADR 0039) and the open loop -------------


def test_1201_configs_are_the_preregistered_ones():
    for folder, name in ((CLOSED, "h200-validation-swap.yaml"), (OPEN_LOOP, "h200-openloop-short.yaml")):
        _assert_shipped_copy(folder, name, RUN_CONFIGS)


def test_1201_closed_grid_swap_took_and_only_the_ngram_l6_arm_fails():
    df, checks = _verdict(CLOSED, "h200-validation-swap.yaml")
    assert df.height == 24 and df["gpu_uuid"].n_unique() == 1
    # 4 engine starts for 24 cells: one per baseline and one per synthetic arm, shared across B and vectors
    assert df["engine_instance"].n_unique() == 4
    assert df.filter(pl.col("scheme") == "draft")["engine_instance"].n_unique() == 1
    failed = checks.filter(pl.col("status") == "fail")
    assert set(failed["check"]) == {"acceptance_length"} and failed["cell_names"].to_list() == [["ngram--mv6"]] * 2
    # every draft-model vector, swapped in place or set at start, realized its configured L
    draft = df.filter(pl.col("scheme") == "draft")
    assert ((draft["realized_L"] - draft["configured_L"]).abs() < 0.05).all()
    assert (
        draft.filter(pl.col("acceptance_kind") == "minvar")["realized_L"].to_list()
        == draft.filter(pl.col("acceptance_kind") == "minvar")["configured_L"].to_list()
    )
    # ngram at L = 6: every proposed token is accepted, but the proposer sometimes proposes fewer than k
    # (vLLM's n-gram match has fewer than k tokens after it): the sampler is not what falls short
    ng6 = df.filter(pl.col("cell_name") == "ngram--mv6")
    assert (ng6["accepted_tokens"] == ng6["draft_tokens"]).all()
    assert (ng6["draft_tokens"] < ng6["drafts"] * ng6["k"]).all()
    details = checks.filter(pl.col("check") == "acceptance_length")["detail"].to_list()
    assert (
        sum("vs configured 6.0; the proposer drafted 4.906 of k = 5 tokens per draft" in (d or "") for d in details)
        == 2
    ), details
    drift = checks.filter(pl.col("check") == "baseline_drift").sort("campaign_id")["value"].to_list()
    assert drift == pytest.approx([0.01126, 0.005414], rel=1e-3)  # b1, b32: both under 2 %


def test_1201_open_loop_failures_stay_failed():
    df, checks = _verdict(OPEN_LOOP, "h200-openloop-short.yaml")
    assert df.height == 4
    failed = set(checks.filter(pl.col("status") == "fail")["check"])
    assert failed == {"baseline_drift", "committed_spread", "batch_shape", "engine_config_matched", "window_length"}
    # the concurrency that the open loop records: L = 1 cannot keep up with 3 requests/s and queues
    running = dict(zip(df["cell_name"], df["mean_running_requests"]))
    assert running["draft--mv1"] > 5 * running["baseline--open"]


# --- session of 2026-12-01 (late): vLLM and SGLang on one GPU (validation/h200-2026-12/config/h200-engines-one-gpu.yaml, issue 9) -----------


@pytest.fixture(scope="module")
def engines_1gpu() -> tuple[pl.DataFrame, pl.DataFrame]:
    """The one-GPU engine comparison's records and re-derived checks, computed once for the tests below."""
    return _verdict(ENGINES_1GPU, "h200-engines-one-gpu.yaml")


def test_1201b_config_is_the_preregistered_one():
    name = "h200-engines-one-gpu.yaml"
    _assert_shipped_copy(ENGINES_1GPU, name, RUN_CONFIGS)


def test_1201b_both_engines_on_one_gpu_pass_every_check(engines_1gpu):
    df, checks = engines_1gpu
    assert df.height == 20 and df["gpu_uuid"].n_unique() == 1
    assert df["git_commit"].unique().to_list() == ["956a9b35cf6bdb4f1a303e4bc3aafc1d623ed20a"]
    # 3 vLLM starts (draft vectors swapped in place) and 5 SGLang starts (one per simulated length)
    starts = dict(df.group_by("engine").agg(pl.col("engine_instance").n_unique()).iter_rows())
    assert starts == {"vllm": 3, "sglang": 5}
    # the re-derived verdict is the committed one, row for row
    committed = pl.read_parquet(ENGINES_1GPU / "results" / "checks.parquet")
    key = ["check", "campaign_id"]
    # Checks registered after this run (model_residual, ADR 0102: not applicable without the roofline rule's
    # predictions) are not in the committed verdict; every check that was is re-derived the same.
    later = checks.filter(~pl.col("check").is_in(committed["check"].unique().implode()))
    assert set(later["status"]) <= {"not_applicable"}, later
    checks = checks.filter(pl.col("check").is_in(committed["check"].unique().implode()))
    assert checks.select(*key, "status").sort(key).equals(committed.select(*key, "status").sort(key))
    assert set(checks["status"]) == {"pass", "flag"}
    flagged = checks.filter(pl.col("status") == "flag")
    assert set(flagged["check"]) == {"engine_config_matched"} and flagged.height == 4
    draft = df.filter(pl.col("scheme") == "draft")
    assert draft["realized_L"].to_list() == draft["configured_L"].to_list()  # both mechanisms, to the last digit
    mechanisms = dict(draft.select("engine", "acceptance_mechanism").unique().iter_rows())
    assert mechanisms == {"vllm": "vllm_synthetic_rates", "sglang": "sglang_simulate_acc_len"}


def test_1201b_engine_table_in_the_readme_is_the_records(engines_1gpu):
    """The README's engine comparison is re-derived from the records; prose that drifts from data fails."""
    df, checks = engines_1gpu
    curves = derive.derive(df, checks)  # no failed check: derive must not refuse
    committed = pl.read_parquet(ENGINES_1GPU / "results" / "curves.parquet")
    key = ["engine", "batch_size", "acceptance_name"]
    assert curves.select(*key, "energy_ratio").sort(key)["energy_ratio"].to_list() == pytest.approx(
        committed.select(*key, "energy_ratio").sort(key)["energy_ratio"].to_list()
    )
    readme = (ENGINES_1GPU / "README.md").read_text()
    label = {"vllm": "vLLM", "sglang": "SGLang"}
    for (b, engine), rows in curves.group_by("batch_size", "engine"):
        ratio = dict(zip(rows["acceptance_name"], rows["energy_ratio"]))
        base = df.filter(pl.col("engine") == engine, pl.col("batch_size") == b, pl.col("scheme") == "baseline")
        mj = dict(zip(base["cell_name"], base["mj_per_committed_token"]))
        digits = 1 if b == 1 else 2
        line = (
            f"| {b} | {label[engine]} | {mj['baseline--open']:.{digits}f} / {mj['baseline--close']:.{digits}f} | "
            f"{ratio['mv1']:.3f}× | {ratio['mv3']:.3f}× | {ratio['mv6']:.3f}× |"
        )
        assert line in readme, line


def test_1201c_sglang_open_loop_cell_counts_what_it_served():
    """The one SGLang open-loop cell (launch_server, Poisson arrivals): a smoke, but its record must hold together."""
    folder = OPEN_LOOP_SMOKE
    records = sorted((folder / "results" / "smoke-openloop").glob("*/*.parquet"))
    records = [p for p in records if not p.name.endswith(".timeline.parquet")]
    assert len(records) == 1
    row = _aggregated(records).row(0, named=True)
    cfg = sj_config.load(folder / "smoke-openloop.yaml")
    workload = cfg["workloads"]["poisson3"]
    assert (row["engine"], row["workload_kind"], row["latency_source"]) == ("sglang", "open_loop", "client_stream")
    assert row["requests_failed"] == 0 and row["requests_completed"] > 0
    assert row["committed_tokens"] == row["requests_completed"] * workload["output_len"]
    assert row["realized_L"] == row["configured_L"] == 6.0
    assert row["window_s"] >= workload["window_s"] and row["meter"] == "nvml" and row["energy_j"] > 0
    assert 0 < row["mean_running_requests"] <= row["batch_size"]


# --- session-2026-12-01d: the paper's schemes on vLLM (issue 16, breadth) ---------------------------------------
SCHEMES_1201D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01d"


@pytest.mark.parametrize(
    "family,config_name", [("qwen3-8b", "h200-schemes-qwen3-8b.yaml"), ("mimo-mtp", "h200-schemes-mimo-mtp.yaml")]
)
def test_1201d_configs_are_the_preregistered_ones(family, config_name):
    _assert_shipped_copy(SCHEMES_1201D / family, config_name, RUN_CONFIGS)


@pytest.fixture(scope="module")
def schemes_1201d() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _verdict(SCHEMES_1201D / "qwen3-8b", "h200-schemes-qwen3-8b.yaml")


def test_1201d_eagle3_dflash_dspark_pass_every_check(schemes_1201d):
    df, checks = schemes_1201d
    assert df.height == 11 and set(df["method"]) == {"baseline", "eagle3", "dflash", "dspark"}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    points = df.filter(pl.col("role") == "point")
    # synthetic min-variance vectors at whole L are deterministic: realized equals configured exactly
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    # the measured verify width is the scheme's k + 1, and a block drafter drafts in one pass
    widths = dict(points.group_by("method").agg(pl.col("verify_width").unique()).iter_rows())
    assert {m: sorted(w) for m, w in widths.items()} == {"eagle3": [4.0], "dflash": [16.0], "dspark": [8.0]}
    passes = dict(points.group_by("method").agg(pl.col("draft_passes_per_round").unique()).iter_rows())
    assert {m: sorted(p) for m, p in passes.items()} == {"eagle3": [3.0], "dflash": [1.0], "dspark": [1.0]}
    assert (df["energy_j"] > 0).all() and (df["gpu_uuid"].n_unique() == 1)


def test_1201d_readme_ratio_table_is_the_records(schemes_1201d):
    """Every ratio the README quotes, recomputed from the records (mJ/token over the mean of the two baselines)."""
    df, _ = schemes_1201d
    base = df.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
    readme = (SCHEMES_1201D / "README.md").read_text()
    rows = {"eagle3": "| EAGLE3 head (3) |", "dflash": "| DFlash block 16 (15) |", "dspark": "| DSpark block 7 (7) |"}
    for method, prefix in rows.items():
        line = next(ln for ln in readme.splitlines() if ln.startswith(prefix))
        pts = df.filter(pl.col("method") == method).sort("configured_L")
        for ratio in (pts["mj_per_committed_token"] / base).to_list():
            assert f"{ratio:.3f}×" in line, (method, ratio, line)


@pytest.fixture(scope="module")
def mtp_1201d() -> tuple[pl.DataFrame, pl.DataFrame]:
    """The 12-01d MiMo MTP family's verdict: read here and, beside the 12-02b run of that family, below."""
    return _verdict(SCHEMES_1201D / "mimo-mtp", "h200-schemes-mimo-mtp.yaml")


def test_1201d_mtp_family_is_incomplete_and_says_so(mtp_1201d):
    df, checks = mtp_1201d
    assert sorted(df["cell_name"]) == ["baseline--open", "mtp--mv3", "mtp--mv4"]
    assert checks.filter(pl.col("status") == "fail").height == 0
    drift = checks.filter(pl.col("check") == "baseline_drift")
    assert drift["status"].to_list() == ["not_applicable"]
    assert "incomplete" in (SCHEMES_1201D / "README.md").read_text()
    mtp = df.filter(pl.col("method") == "mtp")
    assert (mtp["realized_L"] == mtp["configured_L"]).all() and (mtp["verify_width"] == 4.0).all()


# --- session-2026-12-02: EAGLE3 on a MoE target at B 1 and 32, and baseline sweeps (issues 16, 18) --------------
SESSION_1202 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02"


@pytest.mark.parametrize(
    "family,config_name", [("families", "h200-families-sweep.yaml"), ("sweep-qwen3-8b", "h200-sweep-qwen3-8b.yaml")]
)
def test_1202_configs_are_the_preregistered_ones(family, config_name):
    _assert_shipped_copy(SESSION_1202 / family, config_name, RUN_CONFIGS)


def test_1202_analysis_config_leaves_out_only_the_pair_that_did_not_start():
    run = yaml.safe_load((SESSION_1202 / "families" / "h200-families-sweep.yaml").read_text())
    analysis = yaml.safe_load((SESSION_1202 / "families" / "config-analysis.yaml").read_text())
    assert set(run["models"]) - set(analysis["models"]) == {"gemma4_26b_a4b"}
    del run["models"]["gemma4_26b_a4b"]
    assert run == analysis


@pytest.fixture(scope="module")
def families_1202() -> tuple[pl.DataFrame, pl.DataFrame]:
    return _verdict(SESSION_1202 / "families", "config-analysis.yaml")


def test_1202_eagle3_on_the_moe_target_and_its_sweep(families_1202):
    df, checks = families_1202
    assert checks.filter(pl.col("status") == "fail").height == 0
    # re-derived without the roofline's columns: the analysis config's edit and the graph sizes accepted in advance
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"preregistration", "engine_config_matched"}
    committed = (SESSION_1202 / "families" / "results" / "checks.md").read_text()
    assert "0 fail, 10 flag" in committed and "| flag | model_residual | vllm-qwen3_30b_a3b-closed-b1-" in committed
    opening = df.filter(pl.col("role") == "opening_baseline")
    assert sorted(opening["batch_size"]) == [1, 2, 4, 8, 16, 32, 64]
    assert sorted(df.filter(pl.col("role") == "closing_baseline")["batch_size"]) == [1, 32]
    points = df.filter(pl.col("role") == "point")
    assert sorted(points["batch_size"]) == [1, 1, 32, 32] and set(points["method"]) == {"eagle3"}
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert set(points["verify_width"]) == {4.0} and set(points["draft_passes_per_round"]) == {3.0}
    assert df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    assert set(df["counters_source"]) == {"gpm"}


def test_1202_readme_ratio_table_is_the_records(families_1202):
    df, _ = families_1202
    readme = (SESSION_1202 / "README.md").read_text()
    for b in (1, 32):
        at = df.filter(pl.col("batch_size") == b)
        base = at.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
        line = next(ln for ln in readme.splitlines() if ln.startswith(f"| {b} | ") and "×" in ln)
        for ratio in at.filter(pl.col("role") == "point").sort("configured_L")["mj_per_committed_token"] / base:
            assert f"{ratio:.3f}×" in line, (b, ratio, line)


def test_every_committed_round_profile_with_a_trace_reads_from_its_profile_json():
    """Each committed profile folder that holds a trace names it in profile.json's trace_files, so the CLI reads the
    folder as committed (2026-12-02's named the uncommitted whole trace until 2026-12-06b); the trimmed copies read
    their few rounds. Folders committed without a trace (2026-12-04d/e: tables only) are not asked to."""
    folders = [p.parent for p in ROOT.glob("validation/*/session-*/rounds*/*/*/profile.json")
               if any((p.parent / "trace").glob("*.json*"))]
    assert len(folders) >= 10
    for folder in folders:
        meta = json.loads((folder / "profile.json").read_text())
        assert all((folder / t).is_file() for t in meta["trace_files"]), folder
        row, _ = _analyzed_profile(folder)
        assert row["rounds_profiled"] >= 1, folder


def test_1202_sweep_table_in_the_readme_is_the_records(families_1202):
    moe, _ = families_1202
    dense, checks = _verdict(SESSION_1202 / "sweep-qwen3-8b", "h200-sweep-qwen3-8b.yaml")
    assert checks.filter(pl.col("status").is_in(["fail", "flag"])).height == 0
    drift = checks.filter(pl.col("check") == "baseline_drift")
    assert set(drift["status"]) == {"not_applicable"} and all("sweep point" in d for d in drift["detail"])
    readme = (SESSION_1202 / "README.md").read_text()
    for b in (1, 2, 4, 8, 16, 32, 64):
        m = moe.filter((pl.col("batch_size") == b) & (pl.col("role") == "opening_baseline")).row(0, named=True)
        d = dense.filter(pl.col("batch_size") == b).row(0, named=True)
        line = next(ln for ln in readme.splitlines() if ln.startswith(f"| {b} | ") and "×" not in ln)
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1:] == [
            f"{m['mj_per_committed_token']:.1f}",
            f"{m['tpot_mean_s'] * 1000:.2f}",
            f"{m['mean_power_w']:.0f}",
            f"{d['mj_per_committed_token']:.1f}",
            f"{d['tpot_mean_s'] * 1000:.2f}",
            f"{d['mean_power_w']:.0f}",
        ], (b, cells)


# --- session-2026-12-02b: three schemes on SGLang, MTP whole on vLLM, SGLang round profiles (issues 16, 17) -------
SESSION_1202B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02b"


@pytest.mark.parametrize(
    "family,config_name", [("sglang-schemes", "h200-schemes-sglang.yaml"), ("mimo-mtp", "h200-schemes-mimo-mtp.yaml")]
)
def test_1202b_configs_are_the_preregistered_ones(family, config_name):
    _assert_shipped_copy(SESSION_1202B / family, config_name, RUN_CONFIGS)


def _ratios(df: pl.DataFrame) -> dict[tuple[str, float], float]:
    """mJ per committed token of each point over the mean of its family's opening and closing baselines."""
    base = df.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
    pts = df.filter(pl.col("role") == "point")
    return {(m, L): e / base for m, L, e in pts.select("method", "configured_L", "mj_per_committed_token").iter_rows()}


def _readme_line(prefix: str) -> str:
    return next(ln for ln in (SESSION_1202B / "README.md").read_text().splitlines() if ln.startswith(prefix))


def test_1202b_three_schemes_on_sglang_pass_every_check_and_the_readme_table_is_the_records(schemes_1201d):
    df, checks = _verdict(SESSION_1202B / "sglang-schemes", "h200-schemes-sglang.yaml")
    assert df.height == 8 and set(df["engine"]) == {"sglang"}
    assert set(df["method"]) == {"baseline", "eagle3", "dflash", "dspark"}
    assert checks.filter(pl.col("status").is_in(["fail", "flag"])).height == 0
    assert "0 fail, 0 flag, 21 pass" in (SESSION_1202B / "sglang-schemes" / "results" / "checks.md").read_text()
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    widths = dict(points.group_by("method").agg(pl.col("verify_width").unique()).iter_rows())
    assert {m: sorted(w) for m, w in widths.items()} == {"eagle3": [4.0], "dflash": [16.0], "dspark": [8.0]}
    assert df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    # the same cells on vLLM (session 2026-12-01d): the README quotes both engines' ratios from their own records
    vllm, _ = schemes_1201d  # _verdict(SCHEMES_1201D / "qwen3-8b", "h200-schemes-qwen3-8b.yaml"), read once
    rows = {"eagle3": "| EAGLE3 head (3) |", "dflash": "| DFlash block 16 (15) |", "dspark": "| DSpark block 8 (7) |"}
    for engine, data in (("SGLang", df), ("vLLM (12-01d)", vllm)):
        ratios = _ratios(data)
        for method, prefix in rows.items():
            line = _readme_line(f"{prefix} {engine} |")
            ls = sorted(L for m, L in ratios if m == method)
            for L in (ls[0], ls[-1]):  # L = 1 and the scheme's maximum
                assert f"{ratios[(method, L)]:.3f}×" in line, (engine, method, L, line)


def test_1202b_mtp_family_is_whole_and_reproduces_its_12_01d_ratios_on_another_board(mtp_1201d):
    df, checks = _verdict(SESSION_1202B / "mimo-mtp", "h200-schemes-mimo-mtp.yaml")
    assert sorted(df["cell_name"]) == ["baseline--close", "baseline--open", "mtp--mv1", "mtp--mv3", "mtp--mv4"]
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass"]
    ratios = _ratios(df)
    line = _readme_line("| MiMo-7B (this session) |")
    assert all(f"{ratios[('mtp', L)]:.3f}×" in line for L in (1.0, 3.0, 4.0)), line
    # 12-01d had only its opening baseline: its ratios are over that one
    old, _ = mtp_1201d
    old_ratios = _ratios(old)
    assert old["gpu_uuid"][0] != df["gpu_uuid"][0]
    for L in (3.0, 4.0):
        shift = ratios[("mtp", L)] / old_ratios[("mtp", L)] - 1
        assert abs(shift) < 0.01, (L, shift)  # the README's −0.5 % / −0.9 %
        assert f"{100 * shift:+.1f} %".replace("-", "−") in (SESSION_1202B / "README.md").read_text()


def test_1202b_sglang_round_profiles_split_draft_and_verify():
    table = pl.read_parquet(SESSION_1202B / "rounds" / "rounds.parquet")
    rows = {r["scheme"]: r for r in table.iter_rows(named=True)}
    assert set(rows) == {"eagle3", "dflash"} and {r["engine"] for r in rows.values()} == {"sglang"}
    assert rows["eagle3"]["draft_phase_source"] == "label" and rows["dflash"]["draft_phase_source"] == "step_order"
    for r in rows.values():
        assert r["rounds_profiled"] >= r["rounds_counted"] >= 20  # the engine's own count backs the markers
        assert 0 < r["draft_ms_per_round"] < r["verify_ms_per_round"]
    # the committed trimmed traces still read (3 rounds each), by the same rules
    for folder in sorted((SESSION_1202B / "rounds").glob("*/*")):
        row, _ = _analyzed_profile(folder)
        assert row["rounds_profiled"] == 3 and row["draft_ms_per_round"] > 0


def test_1202b_sglang_reported_the_speculative_settings_the_adapter_asked_for():
    """The H200 records' engine_config is what SGLang 0.5.17 itself reported (/server_info) for each new scheme:
    it must be what specjoule's adapter builds, on this CPU, for the same cell (algorithm, steps, top-k, verify
    width, drafter, load format) and the simulated length the cell configures."""
    import json
    from pathlib import PurePath

    from specjoule import cells
    from specjoule.engines import sglang as sglang_adapter

    cfg = sj_config.load(SESSION_1202B / "sglang-schemes" / "h200-schemes-sglang.yaml")
    planned = {c.name: c for c in cells.build(cfg).cells}
    df = pl.read_parquet(SESSION_1202B / "sglang-schemes" / "results" / "records.parquet")
    checked = set()
    for row in df.filter(pl.col("role") == "point").iter_rows(named=True):
        cell = planned[row["cell_name"]]
        assert cell.cell_id == row["cell_id"]
        reported = json.loads(row["engine_config"])
        asked = sglang_adapter.speculative_kwargs(cell.setup)
        for key, value in asked.items():
            got = reported[key]
            if key == "speculative_draft_model_path":  # another checkout on the device: the same model folder
                got, value = PurePath(got).name, PurePath(value).name
            assert got == value, (row["cell_name"], key, got, value)
        assert float(reported["speculative_simulate_acc_len"]) == row["configured_L"]
        assert reported["speculative_num_draft_tokens"] == row["verify_width"]
        checked.add(asked["speculative_algorithm"])
    assert checked == {"EAGLE3", "DFLASH", "DSPARK"}


# --- session-2026-12-02c: the MLA family (GLM-4.7-Flash MTP), two failed starts, vLLM round profiles (16, 17) ------
SESSION_1202C = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02c"


def _readme_line_in(folder: Path, prefix: str) -> str:
    return next(ln for ln in (folder / "README.md").read_text().splitlines() if ln.startswith(prefix))


def _readme_text(folder: Path) -> str:
    """A session README with its line breaks and runs of spaces as single spaces: quoted phrases wrap anywhere."""
    return " ".join((folder / "README.md").read_text().split())


def _budgets_left(text: str) -> list[int]:
    """A session README's device budgets in the order its calls table gives them ("A → B left" or "N left")."""
    return [int(x.replace(",", "")) for m in re.findall(r"(?:([\d,]+) → )?([\d,]+) left", text) for x in m if x]


def test_1202c_config_is_the_preregistered_one():
    name = "h200-schemes-glm-mla.yaml"
    _assert_shipped_copy(SESSION_1202C / "glm-mla", name, RUN_CONFIGS)


def test_1202c_glm_mtp_family_is_whole_and_the_readme_table_is_the_records():
    df, checks = _verdict(SESSION_1202C / "glm-mla", "h200-schemes-glm-mla.yaml")
    assert sorted(df["cell_name"]) == [
        "baseline--close",
        "baseline--open",
        "eagle3--mv1",
        "eagle3--mv4",
        "mtp--mv1",
        "mtp--mv4",
    ]
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass"]
    # EAGLE3 on this target: planned unsupported, no GPU, the engine's reason in the record
    eagle3 = df.filter(pl.col("method") == "eagle3")
    assert set(eagle3["status"]) == {"unsupported"}
    assert all("SupportsEagle3" in r for r in eagle3["unsupported_reason"])
    measured = df.filter(pl.col("status") == "measured")
    assert measured["gpu_uuid"].n_unique() == 1 and (measured["energy_j"] > 0).all()
    assert set(measured["transformers_version"]) == {"5.14.1"}
    points = measured.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 0.05
    assert set(points["verify_width"]) == {4.0} and set(points["draft_passes_per_round"]) == {3.0}
    ratios = _ratios(measured)
    for L, prefix in ((1.0, "| MTP L = 1 |"), (4.0, "| MTP L = 4 |")):
        assert f"**{ratios[('mtp', L)]:.3f}**" in _readme_line_in(SESSION_1202C, prefix), L
    # the closing baseline started from the compile cache the opening one wrote (ADR 0189), and faster
    base = measured.filter(pl.col("role") != "point").sort("run_order_index")
    assert base["compile_cache_warm"].to_list() == [False, True]
    assert base["engine_start_s"][1] < base["engine_start_s"][0]


def test_1202c_round_profiles_show_glm_mtp_drafting_outside_cuda_graphs():
    table = pl.read_parquet(SESSION_1202C / "rounds" / "rounds.parquet")
    assert table.height == 4 and set(table["engine"]) == {"vllm"}
    rows = {(r["scheme"], r["round_ms_unprofiled"] > 20): r for r in table.iter_rows(named=True)}
    glm = rows[("mtp", True)]
    assert glm["draft_graph_launches_per_round"] == 0 and glm["draft_kernel_launches_per_round"] > 100
    assert glm["gpu_busy_fraction"] < 0.25  # host-bound: the GPU idles while kernels are launched one by one
    for key, r in rows.items():
        if key != ("mtp", True):
            assert r["draft_graph_launches_per_round"] >= 1 and r["gpu_busy_fraction"] > 0.5, key
            assert 0 < r["draft_ms_per_round"] < r["verify_ms_per_round"]
    line = _readme_line_in(SESSION_1202C, "| GLM-4.7-Flash MTP L = 4 |")
    assert (
        f"{glm['round_ms_unprofiled']:.2f} ms" in line and f"**{glm['draft_kernel_launches_per_round']:.0f}**" in line
    )
    # the committed trimmed traces still read by the same rules (one round each)
    folders = sorted((SESSION_1202C / "rounds").glob("*/*"))
    assert len(folders) == 4
    for folder in folders:
        row, _ = _analyzed_profile(folder)
        assert row["rounds_profiled"] == 1 and row["verify_ms_per_round"] > 0


@pytest.mark.parametrize(
    "log,module",
    [("vllm-gemma4_26b_a4b-g00-opening.log", "cutlass"), ("vllm-qwen36_35b_a3b-g00-opening.log", "compressed_tensors")],
)
def test_1202c_failed_starts_are_the_missing_modules_the_readme_names(log, module):
    text = logtext.read_log(SESSION_1202C / "failed-starts" / log)  # committed gzipped (ADR 0212)
    assert f"ModuleNotFoundError: No module named '{module}'" in text
    assert "no record written for the cell in progress" in text
    assert f"No module named '{module}'" in (SESSION_1202C / "README.md").read_text()
    assert not list((SESSION_1202C / "glm-mla" / "results" / "cells").glob(f"*{log.split('-')[1]}*"))


def test_glm_v2_runner_config_is_the_1202c_family_but_for_the_runner():
    """config/h200-glm-mtp-v2.yaml (pre-registered 2026-12-02c) re-runs the MLA family of 2026-12-02c with only
    vLLM's Model Runner V2 forced: every other measuring setting and every pre-registered threshold are the same."""
    from specjoule import cells
    from specjoule.engines import vllm as vllm_adapter

    v1 = yaml.safe_load((RUN_CONFIGS / "h200-schemes-glm-mla.yaml").read_text())
    v2 = yaml.safe_load((ROOT / "config" / "h200-glm-mtp-v2.yaml").read_text())
    assert v2["engine_options"]["vllm"].pop("env") == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    v1["engine_options"].pop("sglang")  # a vLLM-only config: the SGLang options never applied
    v1["models"]["glm47_flash"].pop("drafters")  # EAGLE3 there is unsupported on vLLM 0.26.0 (planned, no GPU)
    v1["schemes"].pop("eagle3")
    for cfg in (v1, v2):
        cfg.pop("name")
    assert v1 == v2
    table = cells.build(sj_config.load(ROOT / "config" / "h200-glm-mtp-v2.yaml"))
    assert len(table.cells) == 4 and not any(c.unsupported_reason for c in table.cells)
    assert {vllm_adapter.engine_env(c.setup)["VLLM_USE_V2_MODEL_RUNNER"] for c in table.cells} == {"1"}


# --- session-2026-12-02d: EAGLE3 on gemma-4 (sliding window, MoE), its baseline sweep, a round profile (16, 17) ---
SESSION_1202D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02d"


def test_1202d_config_is_the_preregistered_one_and_the_analysis_edit_is_one_pair():
    name = "h200-families-sweep.yaml"
    _assert_shipped_copy(SESSION_1202D / "gemma4", name, RUN_CONFIGS)
    run = yaml.safe_load((RUN_CONFIGS / name).read_text())
    analysis = yaml.safe_load((SESSION_1202D / "gemma4" / "config-analysis.yaml").read_text())
    run["models"].pop("qwen3_30b_a3b")
    assert analysis == run  # checks, protocol and every other key unchanged


def test_1202d_gemma4_eagle3_family_is_whole_and_the_readme_table_is_the_records():
    df, checks = _verdict(SESSION_1202D / "gemma4", "config-analysis.yaml")
    assert df.height == 13 and set(df["model_pair"]) == {"gemma4_26b_a4b"}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) <= {
        "preregistration",
        "engine_config_matched",
        "model_residual",
    }
    committed = (SESSION_1202D / "gemma4" / "results" / "checks.md").read_text()
    assert "0 fail, 14 flag, 113 pass" in committed
    assert committed.count("| flag | preregistration |") == 7 and committed.count("| flag | model_residual |") == 5
    assert df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    assert set(df["transformers_version"]) == {"5.14.1"}
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 0.05
    assert set(points["verify_width"]) == {4.0} and set(points["draft_passes_per_round"]) == {3.0}
    drift = checks.filter((pl.col("check") == "baseline_drift") & (pl.col("status") != "not_applicable"))
    drift = drift.sort("campaign_id")
    assert drift["status"].to_list() == ["pass", "pass"]
    assert drift["value"].to_list() == pytest.approx([0.000290, 0.0127], abs=1e-4)  # b1, b32: README's 0.03 %, 1.27 %
    for B in (1, 32):
        ratios = _ratios(df.filter(pl.col("batch_size") == B))
        line = _readme_line_in(SESSION_1202D, f"| gemma-4-26B-A4B | {B} |")
        assert f"**{ratios[('eagle3', 1.0)]:.3f}×**" in line and f"**{ratios[('eagle3', 4.0)]:.3f}×**" in line, B
    # the baseline sweep row of the README is the opening engine's records
    sweep = df.filter(pl.col("cell_name") == "baseline--open").sort("batch_size")
    assert sweep["batch_size"].to_list() == [1, 2, 4, 8, 16, 32, 64]
    row = _readme_line_in(SESSION_1202D, "| mJ per committed token |")
    assert row == "| mJ per committed token | " + " | ".join(f"{v:.1f}" for v in sweep["mj_per_committed_token"]) + " |"
    tpot = dict(zip(sweep["batch_size"], sweep["tpot_mean_s"]))
    assert tpot[4] > tpot[8]  # the irregularity the README names
    # cold starts (FlashAttention 4 compiles at the first forward) against the closing start's warm compile cache
    starts = df.sort("run_order_index").unique("engine_start_s", keep="first", maintain_order=True)
    assert starts["compile_cache_warm"].to_list() == [False, False, True]
    assert starts["engine_start_s"][2] < min(starts["engine_start_s"][:2])


def test_1202d_round_profile_drafts_in_cuda_graphs_on_model_runner_v1():
    table = pl.read_parquet(SESSION_1202D / "rounds" / "rounds.parquet")
    assert table.height == 1
    r = table.row(0, named=True)
    assert r["scheme"] == "eagle3" and r["rounds_profiled"] == 24
    assert r["draft_graph_launches_per_round"] >= 1 and 0 < r["draft_ms_per_round"] < r["verify_ms_per_round"]
    line = _readme_line_in(SESSION_1202D, "| gemma-4-26B-A4B EAGLE3 L = 4 |")
    assert f"{r['round_ms_unprofiled']:.2f} ms" in line and f"{r['verify_ms_per_round']:.2f} ms" in line
    profile = (SESSION_1202D / "rounds").glob("*/*/profile.json")
    assert '"model_runner": "v1"' in next(profile).read_text()
    folder = next((SESSION_1202D / "rounds").glob("*/*"))
    trimmed, _ = _analyzed_profile(folder)
    assert trimmed["rounds_profiled"] == 1 and trimmed["verify_ms_per_round"] > 0


def test_1202d_gated_deltanet_failed_start_is_the_image_processor_the_readme_names():
    text = logtext.read_log(SESSION_1202D / "failed-starts" / "vllm-qwen36_35b_a3b-g00-opening.log")
    assert "OSError: Can't load image processor for " in text and "Qwen3_5MoeForConditionalGeneration" in text
    assert "no record written for the cell in progress" in text
    assert "Can't load image processor" in (SESSION_1202D / "README.md").read_text()
    assert not list(packed.tree_files(SESSION_1202D / "gemma4" / "results" / "cells", "*qwen36*"))


# --- session-2026-12-02e: Gated-DeltaNet's third start (16), the spread campaign's vLLM replicate 0 (17) ---
SESSION_1202E = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02e"
SPREAD_1202E = SESSION_1202E / "spread"


def _run_and_analysis_configs(folder: Path, name: str) -> tuple[dict, dict]:
    """A session folder's copy of a pre-registered config (byte for byte the shipped one) and its analysis copy."""
    _assert_shipped_copy(folder, name)
    return yaml.safe_load((folder / name).read_text()), yaml.safe_load((folder / "config-analysis.yaml").read_text())


def test_1202e_analysis_config_plans_exactly_the_measured_cells_with_the_preregistered_ids():
    name = "h200-spread.yaml"
    run, analysis = _run_and_analysis_configs(SPREAD_1202E, name)
    assert (run["engines"], run["engine_replicates"], run["protocol"]["closing_baseline"]) == (
        ["vllm", "sglang"],
        2,
        True,
    )
    run.update(engines=["vllm"], engine_replicates=1)
    run["protocol"]["closing_baseline"] = False
    assert analysis == run  # checks, windows, seeds and every other key unchanged

    def planned(path: Path) -> dict[str, str]:
        _, table = sj_config.plan(yaml.safe_load(path.read_text()), path.name)
        return {c.record_path.removeprefix("results/"): c.cell_id for c in table}

    full, analysed = planned(SPREAD_1202E / name), planned(SPREAD_1202E / "config-analysis.yaml")
    assert all(full[p] == cid for p, cid in analysed.items())  # the analysis renames nothing
    committed = {str(p.relative_to(SPREAD_1202E / "results")) for p in packed.tree_files(SPREAD_1202E / "results" / "cells", "*/*")}
    closing_w0 = {p for p in committed if p.endswith("baseline--close.parquet")}
    assert committed == set(analysed) | closing_w0 and len(analysed) == 32 and len(closing_w0) == 4
    assert not any(p.endswith("baseline--close--w1.parquet") for p in committed)  # cut by the budget (README)


def test_1202e_spread_verdict_ratios_and_intervals_are_the_readme_s():
    df, checks = _verdict(SPREAD_1202E, "config-analysis.yaml", replicated=True)
    assert df.height == 36 and df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    assert checks.filter(pl.col("status") == "fail").height == 0
    committed = (SPREAD_1202E / "results" / "checks.md").read_text()
    assert "0 fail, 16 flag, 72 pass, 16 not_applicable" in committed
    for check in ("preregistration", "engine_config_matched", "reproduces_reference", "model_residual"):
        assert committed.count(f"| flag | {check} |") == 4, check
    # the closing baselines that were measured (window 0) against the opening window 0: the README's drift row
    drift = {}
    for (campaign,), g in df.filter(pl.col("role") != "point").group_by("campaign_id"):
        mj = dict(zip(g["cell_name"], g["mj_per_committed_token"]))
        drift[campaign] = mj["baseline--close"] / mj["baseline--open"] - 1
    order = ["b1-random-s0", "b1-random-s1", "b32-random-s0", "b32-random-s1"]
    values = [next(v for k, v in drift.items() if o in k) for o in order]
    row = _readme_line_in(SESSION_1202E, "| closing / opening − 1 |")
    assert (
        row
        == "| closing / opening − 1 | "
        + " | ".join(f"{v:+.2%}".replace("-", "−").replace("%", " %") for v in values)
        + " |"
    )
    assert max(abs(v) for v in values) < 0.02  # inside the pre-registered baseline_drift_max
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] == points["configured_L"]).all()
    # the host-bound round: the GPU idles most of a speculative window, not of a baseline one
    assert (
        points["gpu_busy_fraction"].max() < 0.4 < 0.9 < df.filter(pl.col("role") != "point")["gpu_busy_fraction"].min()
    )
    curves = pl.read_parquet(SPREAD_1202E / "results" / "curves.parquet").filter(pl.col("method") != "baseline")
    for (B, L), g in curves.group_by("batch_size", "configured_L"):
        r = g.row(0, named=True)
        assert (
            r["energy_ratio_n"] == 2 and r["energy_ratio_ci_low"] < r["energy_ratio_mean"] < r["energy_ratio_ci_high"]
        )
        # the window range the README gives is the records': each window over its seed's opening baseline windows
        ratios = []
        for (seed,), s in points.filter((pl.col("batch_size") == B) & (pl.col("configured_L") == L)).group_by("seed"):
            base = df.filter(
                (pl.col("batch_size") == B)
                & (pl.col("seed") == seed)
                & pl.col("cell_name").str.starts_with("baseline--open")
            )["mj_per_committed_token"]
            ratios += [e / base.mean() for e in s["mj_per_committed_token"]]
        line = _readme_line_in(SESSION_1202E, f"| {B} | {L:.0f} | ")
        assert line.startswith(
            f"| {B} | {L:.0f} | {r['energy_ratio_mean']:.3f}× [{r['energy_ratio_ci_low']:.3f}, "
            f"{r['energy_ratio_ci_high']:.3f}] | "
        ), line
        lo, hi = sorted(g["energy_ratio"])[0], sorted(g["energy_ratio"])[-1]
        assert f"| {lo:.3f}–{hi:.3f} |" in line
        assert min(ratios) == pytest.approx(lo, rel=0.02) and max(ratios) == pytest.approx(hi, rel=0.02)


def test_1202e_variance_budget_and_the_reference_shift_are_the_readme_s():
    table = pl.read_parquet(SPREAD_1202E / "results" / "variance.parquet")
    ratio = table.filter((pl.col("family") == "vllm-qwen3b-closed-cg1") & (pl.col("metric") == "energy_ratio"))
    share = {r["component"]: r for r in ratio.iter_rows(named=True)}
    readme = (SESSION_1202E / "README.md").read_text()
    for comp, label in (
        ("board", "| board (includes run and engine restart"),
        ("seed", "| seed |"),
        ("window", "| window |"),
        ("total", "| total |"),
    ):
        line = next(ln for ln in readme.splitlines() if ln.startswith(label))
        assert f"| {share[comp]['share']:.0%} | {share[comp]['cv_percent']:.1f} % |".replace("%", " %", 1) in line, comp
    assert share["window"]["share"] > share["seed"]["share"]  # "more windows buy more than more seeds"
    assert hasattr(compare_evidence, "main")
    curves = pl.read_parquet(SPREAD_1202E / "results" / "curves.parquet")
    b1l6 = curves.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 6)).row(0, named=True)
    low, high = b1l6["energy_ratio_ci_low"], b1l6["energy_ratio_ci_high"]
    assert low < 0.928 < high and 0.759 < low  # 2026-12-01 inside today's interval, 2026-12-01b below it
    assert "0.928×, inside today's interval" in readme and "0.759×, below it" in readme


def test_1202e_gated_deltanet_failed_start_passed_the_text_only_fix_and_died_on_flashinfer():
    text = logtext.read_log(SESSION_1202E / "failed-starts" / "vllm-qwen36_35b_a3b-g00-opening.log")
    # ADR 0210 on the GPU: the multimodal wrapper started text-only and loaded
    assert '"language_model_only": true' in text and "running in text-only mode" in text
    assert "Model loading took 64.69 GiB memory" in text
    # then vLLM's auto GDN prefill backend picked FlashInfer, which the bundle does not ship (ADR 0215)
    assert "Using FlashInfer GDN prefill kernel (requested=auto" in text
    assert "ModuleNotFoundError: No module named 'flashinfer'" in text
    assert "No module named 'flashinfer'" in (SESSION_1202E / "README.md").read_text()
    check = (SESSION_1202E / "device-logs" / "bundle-check.json").read_text()
    assert "flashinfer-python" in check


SESSION_1202F = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02f"
GDN_1202F = SESSION_1202F / "gdn"


def test_1202f_gdn_config_is_the_preregistered_one_and_the_analysis_edit_is_one_key():
    run, analysis = _run_and_analysis_configs(GDN_1202F, "h200-schemes-gdn.yaml")
    assert analysis["checks"].pop("allow_failed_checks") is True
    assert analysis == run


def test_1202f_gated_deltanet_measured_on_triton_prefill_and_failed_only_on_block_size():
    df, checks = _verdict(GDN_1202F, "h200-schemes-gdn.yaml")
    assert sorted(df["cell_name"]) == ["baseline--open", "dflash--mv1", "dflash--mv16"]
    assert df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    engine = [json.loads(e) for e in df["engine_config"]]  # ADR 0215 on the GPU: asked for and built
    assert {(e["gdn_prefill_backend"], e["gdn_prefill_kernel"]) for e in engine} == {("triton", "triton")}
    failed = checks.filter(pl.col("status") == "fail")
    assert failed["check"].to_list() == ["engine_config_matched"]
    assert "block_size: 1056 → 1168" in failed["detail"][0]  # ADR 0217
    committed = (GDN_1202F / "results" / "checks.md").read_text()
    assert "1 fail, 2 flag, 17 pass, 6 not_applicable" in committed
    assert "3 not measured: mtp--mv1, mtp--mv4, baseline--close" in committed
    base = df.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
    for r in df.filter(pl.col("role") == "point").iter_rows(named=True):
        ratio = r["mj_per_committed_token"] / base["mj_per_committed_token"]
        line = _readme_line_in(SESSION_1202F, f"| DFlash L = {r['configured_L']:.0f} |")
        assert line == (
            f"| DFlash L = {r['configured_L']:.0f} | {r['realized_L']:.1f} | {r['mj_per_committed_token']:.1f} "
            f"| {ratio:.3f} | {r['round_time_ms']:.2f} | {r['gpu_busy_fraction']:.2f} |"
        ), line
        assert r["verify_width"] == 16
    curves = pl.read_parquet(GDN_1202F / "results" / "curves.parquet")
    assert all(fc == ["engine_config_matched"] for fc in curves["failed_checks"].to_list())  # derived, marked


def _same_cell_on_two_boards(first: Path, second: Path, cell: str) -> tuple[dict, dict, float]:
    """One cell's record in two results trees: same id, other GPU; the second's shift from the first."""
    one = packed.read_frame(first / "results" / "cells" / cell).row(0, named=True)
    two = packed.read_frame(second / "results" / "cells" / cell).row(0, named=True)
    assert one["cell_id"] == two["cell_id"] and one["gpu_uuid"] != two["gpu_uuid"]
    return one, two, two["mj_per_committed_token"] / one["mj_per_committed_token"] - 1


def _baseline_shift_across_boards(session: Path, analysed: Path, cell: str) -> float:
    """One cell measured on a lost machine 1 and again on machine 2: same id, other GPU, the shift the README quotes."""
    one, two, shift = _same_cell_on_two_boards(session / "machine-1", analysed, cell)
    quoted = (
        f"{one['mj_per_committed_token']:.1f} mJ/token on machine 1, {two['mj_per_committed_token']:.1f} on machine 2"
    )
    assert f"{quoted} ({shift:+.1%})".replace("%", " %") in (session / "README.md").read_text()
    return shift


def test_1202f_baseline_agrees_across_the_two_boards_as_the_readme_says():
    cell = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1/baseline--open.parquet"
    assert abs(_baseline_shift_across_boards(SESSION_1202F, GDN_1202F, cell)) < 0.02


SESSION_1203 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03"
GDN_SGLANG_1203 = SESSION_1203 / "gdn-sglang"


def test_1203_families_config_is_the_preregistered_one():
    name = "h200-schemes-sglang-families.yaml"
    _assert_shipped_copy(GDN_SGLANG_1203, name)


def test_1203_gated_deltanet_on_sglang_verdict_and_readme_table():
    df, checks = _verdict(GDN_SGLANG_1203, "h200-schemes-sglang-families.yaml")
    measured = df.filter(pl.col("status") == "measured")
    assert sorted(measured["cell_name"]) == ["baseline--open", "dflash--mv16", "mtp--mv1"]
    assert measured["gpu_uuid"].n_unique() == 1 and (measured["energy_j"] > 0).all()
    assert set(measured["engine_version"]) == {"0.5.17"}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert checks.filter(pl.col("status") == "flag").height == 0  # model_residual needs the roofline: committed only
    committed = (GDN_SGLANG_1203 / "results" / "checks.md").read_text()
    assert "| flag | model_residual | sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1 | dflash--mv16 |" in committed
    assert "0 fail, 1 flag, 19 pass, 6 not_applicable" in committed
    assert "5 not measured: mtp--mv4, dflash--mv1, eagle3--mv4, eagle3--mv1, baseline--close" in committed
    unsupported = df.filter(pl.col("status") == "unsupported")
    assert unsupported.height == 8 and unsupported["campaign_id"].str.contains("gemma4").all()
    base = measured.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
    names = {"mtp": "MTP", "dflash": "DFlash"}
    for r in measured.filter(pl.col("role") == "point").iter_rows(named=True):
        label = f"| {names[r['method']]} L = {r['configured_L']:.0f} |"
        ratio = r["mj_per_committed_token"] / base["mj_per_committed_token"]
        line = _readme_line_in(SESSION_1203, label)
        assert line == (
            f"{label} {r['realized_L']:.1f} | {r['mj_per_committed_token']:.1f} | {ratio:.3f} "
            f"| {r['round_time_ms']:.2f} | {r['gpu_busy_fraction']:.2f} |"
        ), line
    assert _readme_line_in(SESSION_1203, "| baseline |") == (
        f"| baseline | 1.0 | {base['mj_per_committed_token']:.1f} | 1 | {base['round_time_ms']:.2f} "
        f"| {base['gpu_busy_fraction']:.2f} |"
    )


def test_1203_baseline_across_two_boards_and_the_glm_mtp_start_failure():
    cell = "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1/baseline--open.parquet"
    assert abs(_baseline_shift_across_boards(SESSION_1203, GDN_SGLANG_1203, cell)) < 0.05
    log = logtext.read_log(
        SESSION_1203
        / "machine-1"
        / "results"
        / "logs"
        / "engines"
        / "sglang-glm47_flash-closed-cg1"
        / "g01-point-c6bf180c818e.log"
    )
    assert "AttributeError: 'Glm4MoeLiteModelNextN' object has no attribute 'start_layer'" in log
    assert 'deepseek_weight_loader.py", line 494, in post_load_weights' in log


SESSION_1203B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03b"
FAMILIES_1203B = SESSION_1203B / "families-sglang"


@pytest.mark.parametrize(
    "folder,name",
    [
        (FAMILIES_1203B, "h200-schemes-sglang-families.yaml"),
        (SESSION_1203B / "gemma4-triton", "h200-schemes-sglang-gemma4.yaml"),
    ],
)
def test_1203b_configs_are_the_preregistered_ones(folder, name):
    _assert_shipped_copy(folder, name)


def _ratios_over_mean_baseline(records: pl.DataFrame) -> dict[tuple[int, str], tuple[float, dict]]:
    """(B, cell) -> (mJ/token over the mean of its campaign's baselines, the record): the READMEs' ratios."""
    out = {}
    for _, fam in records.filter(pl.col("status") == "measured").group_by("campaign_id"):
        base = fam.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
        for r in fam.iter_rows(named=True):
            out[(r["batch_size"], r["cell_name"])] = (r["mj_per_committed_token"] / base, r)
    return out


def _assert_family_table(session: Path, fam: pl.DataFrame, label: str = "", open_loop: bool = False) -> None:
    """A session README's per-cell table of one family is its records: ratios over the mean of its baselines
    (``open_loop``: with the mean running requests and the mean TPOT after the ratio)."""
    ratios = _ratios_over_mean_baseline(fam)
    for r in fam.iter_rows(named=True):
        ratio = "1" if r["role"] != "point" else f"{ratios[(r['batch_size'], r['cell_name'])][0]:.3f}"
        load = f"| {r['mean_running_requests']:.2f} | {1000 * r['tpot_mean_s']:.1f} ms " if open_loop else ""
        prefix = f"{label}| {r['cell_name']} |"
        assert _readme_line_in(session, prefix) == (
            f"{prefix} {r['realized_L']:.1f} | {r['mj_per_committed_token']:.1f} | {ratio} {load}"
            f"| {r['round_time_ms']:.2f} | {r['gpu_busy_fraction']:.2f} | {r['engine_start_s']:.1f} |"
        )


def test_1203b_three_sglang_pairs_verdict_and_readme_table():
    df, checks = _verdict(FAMILIES_1203B, "h200-schemes-sglang-families.yaml")
    measured = df.filter(pl.col("status") == "measured")
    assert measured.height == 12 and measured["gpu_uuid"].n_unique() == 1 and (measured["energy_j"] > 0).all()
    assert set(measured["engine_version"]) == {"0.5.17"}
    pairs = set(measured.filter(pl.col("role") == "point").select("model_pair", "method").iter_rows())
    assert pairs == {("mimo_7b", "mtp"), ("qwen3_30b_a3b", "eagle3"), ("glm47_flash", "eagle3")}
    assert df.filter(pl.col("status") == "unsupported").height == 12  # the rest of the three families, no engine
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass"] * 3
    committed = (FAMILIES_1203B / "results" / "checks.md").read_text()
    assert "0 fail, 1 flag, 62 pass, 15 not_applicable" in committed
    assert (
        "| flag | model_residual | sglang-glm47_flash-closed-b1-random-s0-cg1 | eagle3--mv1, eagle3--mv4 |" in committed
    )
    points = measured.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert set(points["verify_width"]) == {4.0}
    names = {"mimo_7b": "MiMo-7B", "qwen3_30b_a3b": "Qwen3-30B-A3B", "glm47_flash": "GLM-4.7-Flash"}
    for pair, label in names.items():
        _assert_family_table(SESSION_1203B, measured.filter(pl.col("model_pair") == pair), f"| {label} ")


def test_1203b_glm_baseline_on_two_boards_and_the_gemma4_start_failure():
    cell = "sglang-glm47_flash-closed-b1-random-s0-cg1/baseline--open.parquet"
    one, two, shift = _same_cell_on_two_boards(SESSION_1203 / "machine-1", FAMILIES_1203B, cell)
    readme = (SESSION_1203B / "README.md").read_text()
    assert f"{two['mj_per_committed_token']:.1f} mJ/token here against {one['mj_per_committed_token']:.1f}" in readme
    assert f"{100 * shift:+.1f} %".replace("-", "−") in readme
    log = logtext.read_log(
        SESSION_1203B
        / "gemma4-triton"
        / "results"
        / "logs"
        / "engines"
        / "sglang-gemma4_26b_a4b-closed-cg1"
        / "g00-opening-797a66d7c30f.log"
    )
    assert "AttributeError: 'Gemma4TextConfig' object has no attribute 'swa_num_key_value_heads'" in log
    assert "_build_hybrid_swa_kv_pool" in log
    # the plan now says so for every cell of that config, in the words the README quotes
    planned = list(cells.build(sj_config.load(SESSION_1203B / "gemma4-triton" / "h200-schemes-sglang-gemma4.yaml")))
    assert planned and all("swa_num_key_value_heads" in (c.unsupported_reason or "") for c in planned)


def test_1203b_sglang_round_profile_on_the_moe_target():
    table = pl.read_parquet(SESSION_1203B / "rounds" / "rounds.parquet")
    assert table.height == 1
    r = table.row(0, named=True)
    assert (r["engine"], r["scheme"], r["configured_L"]) == ("sglang", "eagle3", 4.0)
    assert r["rounds_profiled"] >= r["rounds_counted"] >= 20 and r["draft_phase_source"] == "label"
    assert 0 < r["draft_ms_per_round"] < r["verify_ms_per_round"]
    readme = (SESSION_1203B / "README.md").read_text()
    assert f"| draft GPU ms (3 head passes) | {r['draft_ms_per_round']:.2f} |" in readme
    assert f"| verify GPU ms (4 tokens) | {r['verify_ms_per_round']:.2f} |" in readme
    assert f"| {r['round_ms_profiled']:.2f} / {r['round_ms_unprofiled']:.2f} |" in readme
    (folder,) = sorted((SESSION_1203B / "rounds").glob("*/*"))
    row, _ = _analyzed_profile(folder)  # the committed trimmed trace still reads
    assert row["rounds_profiled"] == 3 and row["draft_ms_per_round"] > 0


SESSION_1203C = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03c"
GDN_PINNED_1203C = SESSION_1203C / "gdn-pinned"
GLM_V2_1203C = SESSION_1203C / "glm-v2"


@pytest.mark.parametrize(
    "folder,name",
    [(GDN_PINNED_1203C, "h200-schemes-gdn-pinned.yaml"), (GLM_V2_1203C, "h200-glm-mtp-v2.yaml")],
)
def test_1203c_configs_are_the_preregistered_ones(folder, name):
    _assert_shipped_copy(folder, name)


def test_1203c_gated_deltanet_with_pinned_blocks_matches_engines_and_the_readme_table_is_the_records():
    df, checks = _verdict(GDN_PINNED_1203C, "h200-schemes-gdn-pinned.yaml")
    assert df.height == 6 and df["gpu_uuid"].n_unique() == 1 and (df["energy_j"] > 0).all()
    assert checks.filter(pl.col("status") == "fail").height == 0
    matched = checks.filter(pl.col("check") == "engine_config_matched").row(0, named=True)
    assert matched["status"] == "flag" and "block_size" not in matched["detail"]  # ADR 0217: the 2026-12-02f fail
    assert {json.loads(e)["block_size"] for e in df["engine_config"]} == {1168}
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass"]
    committed = (GDN_PINNED_1203C / "results" / "checks.md").read_text()
    assert "0 fail, 2 flag, 19 pass, 5 not_applicable" in committed
    assert (
        "| flag | model_residual | vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1 | dflash--mv1, dflash--mv16 |"
        in committed
    )
    points = df.filter(pl.col("role") == "point")
    assert set(points.select("method", "configured_L").iter_rows()) == {
        ("mtp", 1.0),
        ("mtp", 4.0),
        ("dflash", 1.0),
        ("dflash", 16.0),
    }
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    _assert_family_table(SESSION_1203C, df)
    curves = pl.read_parquet(GDN_PINNED_1203C / "results" / "curves.parquet")
    for r in curves.iter_rows(named=True):  # the ratios the README quotes are the pipeline's
        assert f"| {r['cell_name']} |" in _readme_line_in(SESSION_1203C, f"| {r['cell_name']} |")
        assert f"| {r['energy_ratio']:.3f} |" in _readme_line_in(SESSION_1203C, f"| {r['cell_name']} |")


def test_1203c_dflash_cells_on_two_boards_share_the_engine_config_and_the_shift_is_in_their_own_round():
    """The README's cross-board table: same engine configuration, another GPU, the arm slower and the GPU less busy."""
    there = pl.read_parquet(GDN_1202F / "results" / "records.parquet")
    here = pl.read_parquet(GDN_PINNED_1203C / "results" / "records.parquet")
    base_there = there.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
    base_here = here.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
    for cell in ("dflash--mv1", "dflash--mv16"):
        a = there.filter(pl.col("cell_name") == cell).row(0, named=True)
        b = here.filter(pl.col("cell_name") == cell).row(0, named=True)
        assert json.loads(a["engine_config"]) == json.loads(b["engine_config"]) and a["gpu_uuid"] != b["gpu_uuid"]
        assert b["round_time_ms"] > 1.4 * a["round_time_ms"] and b["gpu_busy_fraction"] < a["gpu_busy_fraction"]
        line = _readme_line_in(
            SESSION_1203C, f"| {cell} | {a['mj_per_committed_token'] / base_there['mj_per_committed_token']:.3f} |"
        )
        assert line == (
            f"| {cell} | {a['mj_per_committed_token'] / base_there['mj_per_committed_token']:.3f} "
            f"| {b['mj_per_committed_token'] / base_here:.3f} | {a['round_time_ms']:.2f} → {b['round_time_ms']:.2f} "
            f"| {a['gpu_busy_fraction']:.2f} → {b['gpu_busy_fraction']:.2f} |"
        )
    b_open = here.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
    assert abs(b_open["round_time_ms"] / base_there["round_time_ms"] - 1) < 0.02
    # the README's within-window table: SM activity over thirds of each window, by the analysis' one definition
    campaign = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"
    said = _readme_text(SESSION_1203C)
    quoted = [
        (GDN_PINNED_1203C, "dflash--mv1", "% here"),
        (GDN_1202F, "dflash--mv1", "% on 2026-12-02f"),
        (GDN_PINNED_1203C, "baseline--open", "%."),
    ]
    paths = [folder / "results" / "timelines" / campaign / f"{cell}.parquet" for folder, cell, _ in quoted]
    for (_, cell, where), r in zip(quoted, window_activity.of_timelines(paths).iter_rows(named=True), strict=True):
        assert r["window_activity_signal"] == "sm_active_pct", cell
        thirds = (r[f"window_activity_{k}_third"] for k in ("first", "middle", "last"))
        assert "{:.1f}, {:.1f} and {:.1f} ".format(*thirds) + where in said, (cell, r)
    # its rank among every window with SM activity committed up to this session
    evidence = ROOT / "validation" / "h200-2026-12"
    later = [p.name for p in evidence.glob("session-*") if p.name > SESSION_1203C.name]
    drifts = window_activity.distribution([evidence]).filter(  # sorted most negative first
        (pl.col("window_activity_signal") == "sm_active_pct") & pl.col("window_activity_drift").is_not_null()
    )
    if later:  # windows of later sessions were not there when the README was written
        drifts = drifts.filter(~pl.col("timeline_path").str.contains_any(later))
    top, second = drifts["window_activity_drift"].head(2).to_list()
    assert Path(drifts["timeline_path"][0]).resolve() == paths[0].resolve()
    assert f"Across the {drifts.height} committed windows with SM activity" in said
    assert f"(−{-top:.2f} of its mean; the next is −{-second:.2f})" in said
    shift = b_open["mj_per_committed_token"] / base_there["mj_per_committed_token"] - 1
    readme = (SESSION_1203C / "README.md").read_text()
    assert (
        f"{b_open['mj_per_committed_token']:.1f} against {base_there['mj_per_committed_token']:.1f} mJ/token "
        f"({shift:+.1%})".replace("%", " %")
        in readme
    )


def test_1203c_glm_on_model_runner_v2_started_both_engines_and_measured_the_baseline():
    df, checks = _verdict(GLM_V2_1203C, "h200-glm-mtp-v2.yaml")
    measured = df.filter(pl.col("status") == "measured")
    assert measured["cell_name"].to_list() == ["baseline--open"]
    v2 = measured.row(0, named=True)
    assert json.loads(v2["engine_config"])["model_runner"] == "v2"
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert "0 fail, 0 flag, 17 pass, 9 not_applicable" in (GLM_V2_1203C / "results" / "checks.md").read_text()
    logs = GLM_V2_1203C / "results" / "logs" / "engines" / "vllm-glm47_flash-closed-cg1"
    opening = logtext.read_log(logs / "g00-opening-9c82b28cafb0.log")
    point = logtext.read_log(logs / "g01-point-8cd6c4064a4c.log")
    assert "Using V2 Model Runner" in opening and "Using V2 Model Runner" in point
    assert "Glm4MoeLiteMTPModel" in point and "engine: ready after 123.8 s" in point
    attempts = GLM_V2_1203C / "results" / ".specjoule" / "attempts" / "vllm-glm47_flash-closed-b1-random-s0-cg1"
    assert [p.name.split(".")[0] for p in attempts.iterdir()] == ["mtp--mv1"]  # started, never written
    v1 = pl.read_parquet(SESSION_1202C / "glm-mla" / "results" / "records.parquet")
    v1_open = v1.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
    assert json.loads(v1_open["engine_config"])["model_runner"] == "v1"
    assert abs(v2["round_time_ms"] / v1_open["round_time_ms"] - 1) < 0.01  # V2 leaves the target's step as it was
    readme = (SESSION_1203C / "README.md").read_text()
    assert f"{v2['mj_per_committed_token']:.1f} mJ/token, round {v2['round_time_ms']:.2f} ms" in readme
    assert f"{v1_open['mj_per_committed_token']:.1f} mJ/token, round" in readme
    shift = v2["mj_per_committed_token"] / v1_open["mj_per_committed_token"] - 1
    assert f"{shift:+.1%}".replace("%", " %") in readme


# --- session-2026-12-03d: GLM-4.7-Flash MTP on Model Runner V2 (17), depth on Qwen3-8B at B = 1 and 32 (16) ---------
SESSION_1203D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03d"
GLM_V2_1203D = SESSION_1203D / "glm-v2"
DEPTH_1203D = SESSION_1203D / "depth"


@pytest.mark.parametrize(
    "folder,name", [(GLM_V2_1203D, "h200-glm-mtp-v2.yaml"), (DEPTH_1203D, "h200-schemes-depth.yaml")]
)
def test_1203d_configs_are_the_preregistered_ones(folder, name):
    _assert_shipped_copy(folder, name)


def test_1203d_glm_mtp_on_v2_is_whole_and_its_round_is_shorter_than_v1s_in_the_arm_only():
    df, checks = _verdict(GLM_V2_1203D, "h200-glm-mtp-v2.yaml")
    assert df.height == 4 and (df["status"] == "measured").all() and df["gpu_uuid"].n_unique() == 1
    assert (df["energy_j"] > 0).all()
    assert {json.loads(e)["model_runner"] for e in df["engine_config"]} == {"v2"}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert "0 fail, 1 flag, 20 pass, 6 not_applicable" in (GLM_V2_1203D / "results" / "checks.md").read_text()
    logs = sorted((GLM_V2_1203D / "results" / "logs" / "engines" / "vllm-glm47_flash-closed-cg1").glob("*.log.gz"))
    assert len(logs) == 3 and all("Using V2 Model Runner" in logtext.read_log(p) for p in logs)
    _assert_family_table(SESSION_1203D, df)
    v1 = _ratios_over_mean_baseline(pl.read_parquet(SESSION_1202C / "glm-mla" / "results" / "records.parquet"))
    v2 = _ratios_over_mean_baseline(df)
    for cell in ("mtp--mv1", "mtp--mv4"):
        (r1, a), (r2, b) = v1[(1, cell)], v2[(1, cell)]
        assert json.loads(a["engine_config"])["model_runner"] == "v1" and a["gpu_uuid"] != b["gpu_uuid"]
        # the README's reading: the arm's own round is shorter and the GPU busier, the ratio lower
        assert b["round_time_ms"] < 0.7 * a["round_time_ms"] and b["gpu_busy_fraction"] > a["gpu_busy_fraction"] + 0.3
        assert r2 < 0.85 * r1
        assert _readme_line_in(SESSION_1203D, f"| {cell} | {r1:.3f} |") == (
            f"| {cell} | {r1:.3f} | {r2:.3f} | {a['round_time_ms']:.2f} → {b['round_time_ms']:.2f} "
            f"| {a['gpu_busy_fraction']:.2f} → {b['gpu_busy_fraction']:.2f} |"
        )
    base1, base2 = v1[(1, "baseline--open")][1], v2[(1, "baseline--open")][1]
    assert abs(base2["round_time_ms"] / base1["round_time_ms"] - 1) < 0.01  # the target's step is unchanged


def test_1203d_depth_is_whole_on_vllm_and_the_readme_tables_are_the_records():
    df, checks = _verdict(DEPTH_1203D, "h200-schemes-depth.yaml")
    measured = df.filter(pl.col("status") == "measured")
    assert measured.height == 16 and measured["gpu_uuid"].n_unique() == 1 and (measured["energy_j"] > 0).all()
    assert set(measured["engine"]) == {"vllm"} and measured["engine_instance"].n_unique() == 4
    points = measured.filter(pl.col("role") == "point")
    assert set(points.select("method", "configured_L", "batch_size").iter_rows()) == {
        (m, float(L), b) for m, ls in (("eagle3", (1, 3, 4)), ("dflash", (1, 8, 16))) for L in ls for b in (1, 32)
    }
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass", "pass"]
    committed = (DEPTH_1203D / "results" / "checks.md").read_text()
    assert "0 fail, 3 flag, 39 pass, 12 not_applicable" in committed
    assert "16 planned cell(s) in 2 campaign(s) not measured" in committed  # the SGLang family, not run
    assert "| flag | model_residual | vllm-qwen3_8b-closed-b32-random-s0-cg1 |" in committed
    for b in (1, 32):
        _assert_family_table(SESSION_1203D, measured.filter(pl.col("batch_size") == b), f"| {b} ")
    curves = pl.read_parquet(DEPTH_1203D / "results" / "curves.parquet")
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        line = _readme_line_in(SESSION_1203D, f"| {r['batch_size']} | {r['cell_name']} |")
        assert f"| {r['energy_ratio']:.3f} |" in line


def test_1203d_depth_at_b1_reproduces_2026_12_01d_on_another_board_within_one_percent():
    there = _ratios_over_mean_baseline(pl.read_parquet(SCHEMES_1201D / "qwen3-8b" / "results" / "records.parquet"))
    here = _ratios_over_mean_baseline(pl.read_parquet(DEPTH_1203D / "results" / "records.parquet"))
    shared = sorted(k[1] for k in there if k in here and k[1].startswith(("eagle3", "dflash")))
    assert shared == ["dflash--mv1", "dflash--mv16", "eagle3--mv1", "eagle3--mv3", "eagle3--mv4"]
    for cell in shared:
        (r1, a), (r2, b) = there[(1, cell)], here[(1, cell)]
        assert a["gpu_uuid"] != b["gpu_uuid"] and a["engine_version"] == b["engine_version"]
        assert abs(r2 / r1 - 1) < 0.011, cell  # the README's "within 1 %", at its rounding
        shift = f"{r2 / r1 - 1:+.1%}".replace("%", " %").replace("-", "−")
        assert _readme_line_in(SESSION_1203D, f"| {cell} | {r1:.3f} |") == (
            f"| {cell} | {r1:.3f} | {r2:.3f} | {shift} | {a['round_time_ms']:.2f} → {b['round_time_ms']:.2f} |"
        )


def test_1203d_b32_speculative_windows_ran_at_the_power_cap_and_b1_at_full_clock():
    """The README's power-cap paragraph, by the analysis' definition of a window's cap share and clock (ADR 0230)."""
    readme = _readme_text(SESSION_1203D)
    assert "every speculative arm ran at the board's 700 W power cap" in readme
    paths = packed.tree_files(DEPTH_1203D / "results" / "timelines", "*/*.parquet")
    b32_points = []
    for path, r in zip(paths, window_activity.of_timelines(paths).iter_rows(named=True), strict=True):
        capped, clock = r["window_power_capped_share"], r["window_sm_clock_median_mhz"]
        b32, point = "-b32-" in path.parent.name, not path.stem.startswith("baseline")
        if b32 and point:
            power = packed.read_frame(path).filter(pl.col("in_window"))["power_w"].mean()
            assert capped == 1.0 and 1_800 <= clock <= 1_875 and 690 <= power <= 695, path
            b32_points.append(clock)
        elif b32:
            assert 0.1 < capped < 0.3 and clock == 1_980, path
        else:
            assert clock == 1_980, path
    assert f"the SM clock's median {min(b32_points):,.0f}–{max(b32_points):,.0f} MHz" in readme
    records = pl.read_parquet(DEPTH_1203D / "results" / "records.parquet")
    assert set(records.filter(pl.col("batch_size") == 32)["throttle_reasons_mask"]) == {window_activity.SW_POWER_CAP}


# --- session-2026-12-03e: depth on Qwen3-8B, SGLang half (16); with 2026-12-03d's vLLM half the config is whole ------
SESSION_1203E = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03e"
DEPTH_1203E = SESSION_1203E / "depth"
SGLANG_SCHEMES_1202B = SESSION_1202B / "sglang-schemes"


def _depth_records_of_both_engines() -> pl.DataFrame:
    records = pl.read_parquet(DEPTH_1203E / "results" / "records.parquet")
    assert records.height == 32 and (records["status"] == "measured").all()
    return records


def test_1203e_config_is_the_preregistered_one():
    name = "h200-schemes-depth.yaml"
    _assert_shipped_copy(DEPTH_1203E, name)


def test_1203e_depth_is_whole_on_both_engines_and_the_sglang_table_is_the_records():
    df, checks = _verdict(DEPTH_1203E, "h200-schemes-depth.yaml", cells_also_in=(DEPTH_1203D,))
    assert df.height == 32 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    sglang = df.filter(pl.col("engine") == "sglang")
    assert sglang.height == 16 and set(sglang["engine_version"]) == {"0.5.17"}
    assert (
        sglang["gpu_uuid"].n_unique() == 1
        and sglang["gpu_uuid"][0] != df.filter(pl.col("engine") == "vllm")["gpu_uuid"][0]
    )
    assert sglang["engine_instance"].n_unique() == 8  # SGLang reads its simulated L at start: one start per L
    # the committed table holds only this session's cells; the analysis read both sessions' (every vLLM record too)
    assert {p.parent.name for p in packed.tree_files(DEPTH_1203E / "results" / "cells", "*/*.parquet")} == set(
        sglang["campaign_id"]
    )
    points = sglang.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["pass"] * 4
    committed = (DEPTH_1203E / "results" / "checks.md").read_text()
    assert "0 fail, 6 flag, 78 pass, 24 not_applicable" in committed and "not measured" not in committed
    for engine in ("sglang", "vllm"):
        assert f"| flag | model_residual | {engine}-qwen3_8b-closed-b32-random-s0-cg1 |" in committed
    for b in (1, 32):
        _assert_family_table(SESSION_1203E, sglang.filter(pl.col("batch_size") == b), f"| {b} ")
    curves = pl.read_parquet(DEPTH_1203E / "results" / "curves.parquet").filter(pl.col("engine") == "sglang")
    assert curves.height == 12
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        line = _readme_line_in(SESSION_1203E, f"| {r['batch_size']} | {r['cell_name']} |")
        assert f"| {r['energy_ratio']:.3f} |" in line


def test_1203e_engine_table_eagle3_gap_at_b1_and_dflash_at_the_cap_at_b32():
    records = _depth_records_of_both_engines()
    vllm_ratios = _ratios_over_mean_baseline(records.filter(pl.col("engine") == "vllm"))
    sglang_ratios = _ratios_over_mean_baseline(records.filter(pl.col("engine") == "sglang"))
    rows = 0
    for (b, cell), (rv, v) in sorted(vllm_ratios.items()):
        if v["role"] != "point":
            continue
        rs, s = sglang_ratios[(b, cell)]
        gap = f"{rs / rv - 1:+.1%}".replace("%", " %").replace("-", "−")
        prefix = f"| {b} | {cell} | {rv:.3f} |"
        assert _readme_line_in(SESSION_1203E, prefix) == (
            f"{prefix} {rs:.3f} | {gap} | {v['round_time_ms']:.2f} / {s['round_time_ms']:.2f} "
            f"| {v['mean_power_w']:.0f} / {s['mean_power_w']:.0f} |"
        )
        rows += 1
        if b == 1 and cell.startswith("eagle3"):
            assert -0.125 < rs / rv - 1 < -0.09, cell  # "9–12 % below vLLM's at every L"
        if b == 32 and cell.startswith("dflash"):
            # both at the cap: the absolute energy agrees across engines and boards, the baselines make the gap
            assert abs(s["mj_per_committed_token"] / v["mj_per_committed_token"] - 1) < 0.0013, cell
            assert abs(s["round_time_ms"] / v["round_time_ms"] - 1) < 0.005, cell
            base_v = v["mj_per_committed_token"] / rv
            base_s = s["mj_per_committed_token"] / rs
            assert abs((rs / rv) / (base_v / base_s) - 1) < 0.002, cell
    assert rows == 12


def test_1203e_sglang_b1_reproduces_2026_12_02b_on_another_board_while_the_baseline_moves_12_percent():
    there = _ratios_over_mean_baseline(pl.read_parquet(SGLANG_SCHEMES_1202B / "results" / "records.parquet"))
    here = _ratios_over_mean_baseline(_depth_records_of_both_engines().filter(pl.col("engine") == "sglang"))
    shared = sorted(k[1] for k in there if k in here and k[1].startswith(("eagle3", "dflash")))
    assert shared == ["dflash--mv1", "dflash--mv16", "eagle3--mv1", "eagle3--mv4"]
    for cell in shared:
        (r1, a), (r2, b) = there[(1, cell)], here[(1, cell)]
        assert a["gpu_uuid"] != b["gpu_uuid"] and a["engine_version"] == b["engine_version"] == "0.5.17"
        assert abs(r2 / r1 - 1) < 0.027, cell  # "each moved by at most 2.6 %"
        shift = f"{r2 / r1 - 1:+.1%}".replace("%", " %").replace("-", "−")
        assert _readme_line_in(SESSION_1203E, f"| {cell} | {r1:.3f} |") == (
            f"| {cell} | {r1:.3f} | {r2:.3f} | {shift} | {a['round_time_ms']:.2f} → {b['round_time_ms']:.2f} |"
        )
    bases = {
        name: df.filter(pl.col("role") != "point", pl.col("batch_size") == 1)
        for name, df in (
            ("there", pl.read_parquet(SGLANG_SCHEMES_1202B / "results" / "records.parquet")),
            ("here", _depth_records_of_both_engines().filter(pl.col("engine") == "sglang")),
        )
    }
    mj = {k: v["mj_per_committed_token"].mean() for k, v in bases.items()}
    watts = {k: v["mean_power_w"].mean() for k, v in bases.items()}
    tps = {k: v["tokens_per_s"].mean() for k, v in bases.items()}
    readme = _readme_text(SESSION_1203E)
    assert f"drew {mj['here']:.1f} mJ/token here against {mj['there']:.1f} on GPU-e4cfbcb3 (−12.2 %)" in readme
    assert round(100 * (mj["here"] / mj["there"] - 1), 1) == -12.2
    assert (
        f"({tps['here']:.1f} and {tps['there']:.1f} tokens/s): {watts['here']:.0f} W here, {watts['there']:.0f} W"
        in (readme)
    )


def test_1203e_b32_dflash_windows_ran_at_the_cap_on_both_engines_and_the_baselines_did_not():
    """The README's power-cap paragraph, by the analysis' definition of a window's cap share and clock (ADR 0230)."""
    seen = {}
    for folder in (DEPTH_1203D, DEPTH_1203E):
        paths = packed.tree_files(folder / "results" / "timelines", "*-b32-*/*.parquet")
        for path, r in zip(paths, window_activity.of_timelines(paths).iter_rows(named=True), strict=True):
            seen[(path.parent.name.split("-")[0], path.stem)] = (
                r["window_power_capped_share"],
                r["window_sm_clock_median_mhz"],
            )
    assert len(seen) == 16
    for (engine, cell), (capped, clock) in seen.items():
        if cell.startswith("dflash"):
            expected = (1_800, 1_800) if engine == "vllm" else (1_815, 1_830)
            assert capped == 1.0 and expected[0] <= clock <= expected[1], (engine, cell)
        elif cell.startswith("baseline"):
            assert 0.1 < capped < 0.3 and clock == 1_980, (engine, cell)
        elif engine == "sglang":  # EAGLE3 on SGLang: partly capped
            assert 0.2 < capped < 0.8 and 1_965 <= clock <= 1_980, cell
        else:
            assert capped == 1.0 and 1_845 <= clock <= 1_875, cell
    sglang_dflash = [seen[("sglang", c)][1] for c in ("dflash--mv1", "dflash--mv8", "dflash--mv16")]
    readme = _readme_text(SESSION_1203E)
    assert f"{min(sglang_dflash):,.0f}–{max(sglang_dflash):,.0f} MHz here" in readme
    shares = [seen[("sglang", c)][0] for c in ("eagle3--mv1", "eagle3--mv3", "eagle3--mv4")]
    assert f"were capped in {100 * min(shares):.0f}–{100 * max(shares):.0f} % of samples" in readme


def test_1203e_b32_rounds_read_as_decode_plus_admissions():
    """The README's linear reading: round ms = a + b · (B · L / 512) over each arm's three L."""
    records = _depth_records_of_both_engines().filter(pl.col("batch_size") == 32, pl.col("role") == "point")
    slopes = []
    for engine, label in (("sglang", "SGLang"), ("vllm", "vLLM")):
        for method, arm in (("dflash", "DFlash"), ("eagle3", "EAGLE3")):
            arm_rows = records.filter(pl.col("engine") == engine, pl.col("method") == method)
            admitted = arm_rows["realized_L"].to_numpy() * 32 / arm_rows["output_len"].to_numpy()
            slope, intercept = np.polyfit(admitted, arm_rows["round_time_ms"].to_numpy(), 1)
            assert _readme_line_in(SESSION_1203E, f"| {label} | {arm} |") == (
                f"| {label} | {arm} | {intercept:.2f} | {slope:.2f} |"
            )
            slopes.append(slope)
    assert max(slopes) / min(slopes) - 1 < 0.031  # "the four b agree within 3 %"


def test_1203e_sglang_dflash_round_at_b32_without_the_admission_round():
    """The README's round table: this session's profile (ADR 0232's analysis) beside 2026-12-02b's B = 1 DFlash
    re-summarized without its admission round."""
    here = pl.read_parquet(SESSION_1203E / "rounds" / "rounds.parquet").row(0, named=True)
    assert (here["engine"], here["scheme"], here["batch_size"], here["configured_L"]) == ("sglang", "dflash", 32, 16.0)
    assert here["rounds_profiled"] == 24  # 2 batches of 12: the admission interval between them is not a round
    b1 = rounds_analysis.resummarize(SESSION_1202B / "rounds").filter(pl.col("scheme") == "dflash").row(0, named=True)
    assert b1["rounds_profiled"] == 24 and b1["admission_rows_dropped"] == 1
    for label, key, fmt in (
        ("draft GPU ms (one block pass)", "draft_ms_per_round", "{:.2f}"),
        ("verify GPU ms (B × 16 tokens)", "verify_ms_per_round", "{:.2f}"),
        ("other GPU ms", "other_gpu_ms_per_round", "{:.2f}"),
        ("host ms outside GPU work (profiled)", "host_ms_per_round", "{:.2f}"),
    ):
        assert _readme_line_in(SESSION_1203E, f"| {label} |") == (
            f"| {label} | {fmt.format(here[key])} | {fmt.format(b1[key])} |"
        )
    assert _readme_line_in(SESSION_1203E, "| round, profiled / unprofiled ms |") == (
        f"| round, profiled / unprofiled ms | {here['round_ms_profiled']:.2f} / {here['round_ms_unprofiled']:.2f} "
        f"| {b1['round_ms_profiled']:.2f} / {b1['round_ms_unprofiled']:.2f} |"
    )
    assert _readme_line_in(SESSION_1203E, "| GPU busy, profiled / NVML unprofiled |") == (
        f"| GPU busy, profiled / NVML unprofiled | {100 * here['gpu_busy_fraction']:.0f} % / "
        f"{100 * here['nvml_util_unprofiled']:.0f} % | {100 * b1['gpu_busy_fraction']:.0f} % / "
        f"{100 * b1['nvml_util_unprofiled']:.0f} % |"
    )
    readme = _readme_text(SESSION_1203E)
    gpu_ms = here["draft_ms_per_round"] + here["verify_ms_per_round"] + here["other_gpu_ms_per_round"]
    assert f"{gpu_ms:.1f} ms of kernels in a {here['round_ms_profiled']:.1f} ms profiled round" in readme
    ratio = here["verify_ms_per_round"] / b1["verify_ms_per_round"]
    assert f"Verifying 512 tokens costs {ratio:.1f} × what 16 cost at B = 1" in readme
    (folder,) = sorted((SESSION_1203E / "rounds").glob("*/*"))
    row, _ = _analyzed_profile(folder)  # the committed trimmed trace still reads
    assert row["rounds_profiled"] == 3 and row["draft_ms_per_round"] > 0


@pytest.mark.parametrize("session", ["session-2026-12-02b", "session-2026-12-03b"])
def test_sglang_round_tables_written_before_adr_0232_have_addenda_with_the_admission_round_out(session):
    folder = ROOT / "validation" / "h200-2026-12" / session
    committed = pl.read_parquet(folder / "rounds" / "rounds.parquet")
    fixed = rounds_analysis.resummarize(folder / "rounds")
    readme = _readme_text(folder)
    assert "Addendum (2026-12-03e, ADR 0232)" in readme
    for old, new in zip(committed.iter_rows(named=True), fixed.iter_rows(named=True), strict=True):
        assert old["rounds_profiled"] == 25 and new["rounds_profiled"] == 24 and new["admission_rows_dropped"] == 1
        assert (
            new["round_ms_profiled"] < old["round_ms_profiled"] and new["host_ms_per_round"] < old["host_ms_per_round"]
        )
        quoted = f"{new['round_ms_profiled']:.2f} / {new['round_ms_unprofiled']:.2f}"
        assert quoted in readme, (session, new["scheme"], quoted)
        assert f"{new['host_ms_per_round']:.2f}" in readme
    if session == "session-2026-12-02b":
        e, d = (fixed.filter(pl.col("scheme") == s).row(0, named=True) for s in ("eagle3", "dflash"))
        assert _readme_line_in(folder, "| host ms outside GPU work (profiled) |") == (
            f"| host ms outside GPU work (profiled) | {e['host_ms_per_round']:.2f} | {d['host_ms_per_round']:.2f} |"
        )
        assert f"the profiler's tax on the EAGLE3 round is {e['profiler_inflation']:.2f} ×" in readme
    else:
        (r,) = fixed.iter_rows(named=True)
        assert f"GPU busy {100 * r['gpu_busy_fraction']:.0f} % profiled" in readme
        assert f"({r['profiler_inflation']:.2f} ×)" in readme


# --- session-2026-12-03f: SGLang Qwen3.6 whole, gemma-4's multimodal shape cut (issue 16) ---------------------------
SESSION_1203F = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03f"
GDN_1203F = SESSION_1203F / "gdn-sglang"
GEMMA_MM_1203F = SESSION_1203F / "gemma4-mm"
GEMMA_1202D = SESSION_1202D / "gemma4"


@pytest.mark.parametrize(
    ("folder", "name"),
    [(GDN_1203F, "h200-schemes-sglang-families.yaml"), (GEMMA_MM_1203F, "h200-schemes-sglang-gemma4-mm.yaml")],
)
def test_1203f_configs_are_the_preregistered_ones(folder, name):
    _assert_shipped_copy(folder, name)


def test_1203f_qwen36_on_sglang_is_whole_and_the_readme_table_is_the_records():
    df, checks = _verdict(GDN_1203F, "h200-schemes-sglang-families.yaml")
    measured = df.filter(pl.col("status") == "measured")
    assert measured.height == 6 and set(measured["model_pair"]) == {"qwen36_35b_a3b"}
    assert set(df.filter(pl.col("status") == "unsupported")["cell_name"]) == {"eagle3--mv1", "eagle3--mv4"}
    assert measured["gpu_uuid"].unique().to_list() == ["GPU-be9eea70-478a-2e33-3b35-2ba5022e18fa"]
    assert set(measured["engine_version"]) == {"0.5.17"} and (measured["energy_j"] > 0).all()
    assert measured["engine_instance"].n_unique() == 6  # SGLang reads its simulated L at start
    points = measured.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert dict(points.select("method", "verify_width").unique().iter_rows()) == {"mtp": 4.0, "dflash": 16.0}
    assert checks.filter(pl.col("status") == "fail").height == 0
    drift = checks.filter(pl.col("check") == "baseline_drift").row(0, named=True)
    assert drift["status"] == "pass"
    assert f"`baseline_drift` {100 * drift['value']:.2f} %" in _readme_text(SESSION_1203F)
    committed = (GDN_1203F / "results" / "checks.md").read_text()
    assert "0 fail, 1 flag, 20 pass, 6 not_applicable" in committed
    assert "| flag | model_residual | sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1 | dflash--mv16, dflash--mv1 |" in (
        committed
    )
    _assert_family_table(SESSION_1203F, measured, "| Qwen3.6 ")
    curves = pl.read_parquet(GDN_1203F / "results" / "curves.parquet")
    assert curves.height == 4
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        assert f"| {r['energy_ratio']:.3f} |" in _readme_line_in(SESSION_1203F, f"| Qwen3.6 | {r['cell_name']} |")


def test_1203f_qwen36_points_of_2026_12_03_on_another_board_against_each_opening_baseline():
    campaign = pl.col("campaign_id") == "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1"
    there = pl.read_parquet(SESSION_1203 / "gdn-sglang" / "results" / "records.parquet").filter(campaign)
    here = pl.read_parquet(GDN_1203F / "results" / "records.parquet").filter(campaign)
    base = {
        name: df.filter(pl.col("cell_name") == "baseline--open")["mj_per_committed_token"][0]
        for name, df in (("there", there), ("here", here))
    }
    for cell in ("dflash--mv16", "mtp--mv1"):
        a = there.filter(pl.col("cell_name") == cell).row(0, named=True)
        b = here.filter(pl.col("cell_name") == cell).row(0, named=True)
        assert a["cell_id"] == b["cell_id"] and a["gpu_uuid"] != b["gpu_uuid"]
        r1, r2 = a["mj_per_committed_token"] / base["there"], b["mj_per_committed_token"] / base["here"]
        shift = f"{r2 / r1 - 1:+.1%}".replace("%", " %").replace("-", "−")
        assert _readme_line_in(SESSION_1203F, f"| {cell} | {r1:.3f} |") == (
            f"| {cell} | {r1:.3f} | {r2:.3f} | {shift} | {a['mj_per_committed_token']:.1f} → "
            f"{b['mj_per_committed_token']:.1f} | {a['round_time_ms']:.2f} → {b['round_time_ms']:.2f} |"
        )
    readme = _readme_text(SESSION_1203F)
    assert f"drew {100 * (base['here'] / base['there'] - 1):.1f} % more energy per token here" in readme


def test_1203f_gemma4_mm_starts_on_sglang_cut_before_its_closing_baseline():
    df, checks = _verdict(GEMMA_MM_1203F, "h200-schemes-sglang-gemma4-mm.yaml")
    assert df.height == 3 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert sorted(df["cell_name"]) == ["baseline--open", "eagle3--mv1", "eagle3--mv4"]
    assert df["gpu_uuid"].unique().to_list() == ["GPU-9a9813cc-81d8-c6e6-4a00-3ea09b9d00ad"]
    assert set(df["target_architecture"]) == {"Gemma4ForConditionalGeneration"}
    assert set(df["target_family"]) == {"gqa_sliding"}
    assert set(checks["status"]) <= {"pass", "not_applicable"}
    assert checks.filter(pl.col("check") == "baseline_drift")["status"].to_list() == ["not_applicable"]
    committed = (GEMMA_MM_1203F / "results" / "checks.md").read_text()
    assert "0 fail, 0 flag, 20 pass, 7 not_applicable" in committed
    assert "sglang-gemma4_26b_a4b_mm-closed-b1-random-s0-cg1: 1 not measured: baseline--close" in committed
    _assert_family_table(SESSION_1203F, df, "| gemma-4-mm ")
    # the cut closing start and machine 1's lost opening: markers and logs committed, no error in either log
    results = GEMMA_MM_1203F / "results"
    campaign = "sglang-gemma4_26b_a4b_mm-closed-b1-random-s0-cg1"
    assert [p.name for p in (results / ".specjoule" / "attempts" / campaign).iterdir()] == [
        "baseline--close.ae7f33c454f7"
    ]
    engines = results / "logs" / "engines" / "sglang-gemma4_26b_a4b_mm-closed-cg1"
    closing = logtext.read_log(engines / "g03-closing-99880a281d71.log")
    assert "window: 6 generation(s)" in closing and "Traceback" not in closing and "window: done" not in closing
    lost = GEMMA_MM_1203F / "machine-1" / "results"
    assert [p.name for p in (lost / ".specjoule" / "attempts" / campaign).iterdir()] == ["baseline--open.badc69307095"]
    opening = logtext.read_log(
        lost / "logs" / "engines" / "sglang-gemma4_26b_a4b_mm-closed-cg1" / "g00-opening-9dac1ba24180.log"
    )
    assert "engine: start (sglang, offline)" in opening and "Traceback" not in opening and "ready after" not in opening


def test_1203f_gemma4_engine_gap_is_power_not_time():
    """The README's comparison with vLLM's gemma-4 EAGLE3 (2026-12-02d, the text shape): time ratios alike, the
    speculative arms' power against their baseline's opposite in sign."""
    vllm = pl.read_parquet(GEMMA_1202D / "results" / "records.parquet").filter(
        pl.col("model_pair") == "gemma4_26b_a4b", pl.col("batch_size") == 1
    )
    sglang = pl.read_parquet(GEMMA_MM_1203F / "results" / "records.parquet")
    readme = _readme_text(SESSION_1203F)
    quoted = {}
    for name, df in (("vllm", vllm), ("sglang", sglang)):
        base = df.filter(pl.col("role") != "point")
        tps, watts = base["tokens_per_s"].mean(), base["mean_power_w"].mean()
        arm = {c: df.filter(pl.col("cell_name") == c).row(0, named=True) for c in ("eagle3--mv1", "eagle3--mv4")}
        time = [tps / arm[c]["tokens_per_s"] for c in arm]
        power = [arm[c]["mean_power_w"] / watts - 1 for c in arm]
        quoted[name] = (time, power, watts, [arm[c]["mean_power_w"] for c in arm])
    (tv, pv, wv, av), (ts, ps, ws, as_) = quoted["vllm"], quoted["sglang"]
    assert f"{tv[0]:.2f} and {tv[1]:.3f} there, {ts[0]:.2f} and {ts[1]:.3f} here" in readme
    assert abs(ts[0] / tv[0] - 1) < 0.04 and abs(ts[1] / tv[1] - 1) < 0.04  # "alike on the two engines"
    assert all(-0.12 < p < -0.10 for p in ps) and all(0.04 < p < 0.075 for p in pv)  # "10–12 % less", "4–7 % more"
    assert "drew 10–12 % less power than its baseline" in readme and "vLLM's drew 4–7 % more" in readme
    assert f"({as_[0]:.0f} and {as_[1]:.0f} W against {ws:.0f} W)" in readme
    assert f"({av[0]:.0f} and {av[1]:.0f} W against {wv:.0f} W)" in readme


# --- session-2026-12-03g: Qwen3-30B-A3B with graphs on, whole; graphs off lost with two machines (issue 16) --------
SESSION_1203G = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03g"
CAPTURE_1203G = SESSION_1203G / "capture-moe"
MOE_CG1 = "vllm-qwen3_30b_a3b-closed-b1-random-s0-cg1"


def test_1203g_config_is_the_preregistered_one():
    name = "h200-capture-bias.yaml"
    _assert_shipped_copy(CAPTURE_1203G, name)


def test_1203g_moe_graphs_on_is_whole_and_the_readme_table_is_the_records():
    df, checks = _verdict(CAPTURE_1203G, "h200-capture-bias.yaml")
    assert df.height == 4 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["campaign_id"]) == {MOE_CG1} and df["cuda_graphs"].to_list() == [True] * 4
    assert df["gpu_uuid"].unique().to_list() == ["GPU-a8351c02-14ab-93a2-19f9-fc8c6d3383d5"]
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert points["engine_instance"].n_unique() == 1  # one EAGLE3 engine, acceptance swapped in place
    assert checks.filter(pl.col("status") == "fail").height == 0
    flagged = checks.filter(pl.col("status") == "flag")["check"].to_list()
    assert flagged == ["engine_config_matched"]
    drift = checks.filter(pl.col("check") == "baseline_drift").row(0, named=True)
    assert drift["status"] == "pass" and f"`baseline_drift` {100 * drift['value']:.2f} %" in _readme_text(SESSION_1203G)
    committed = (CAPTURE_1203G / "results" / "checks.md").read_text()
    assert "0 fail, 1 flag, 20 pass, 6 not_applicable" in committed
    for family in (
        "qwen3_8b-closed-b1-random-s0-cg1",
        "qwen3_8b-closed-b1-random-s0-cg0",
        "qwen3_30b_a3b-closed-b1-random-s0-cg0",
    ):
        assert f"- vllm-{family}: 4 not measured" in committed
    _assert_family_table(SESSION_1203G, df, "| Qwen3-30B-A3B ")
    curves = pl.read_parquet(CAPTURE_1203G / "results" / "curves.parquet")
    assert curves.height == 2
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        assert f"| {r['energy_ratio']:.3f} |" in _readme_line_in(SESSION_1203G, f"| Qwen3-30B-A3B | {r['cell_name']} |")
    saving = 100 * (1 - curves.filter(pl.col("configured_L") == 4)["energy_ratio"][0])
    assert f"with graphs on is {saving:.1f} % here" in _readme_text(SESSION_1203G)


def test_1203g_lost_starts_are_committed_without_an_error():
    """Machine 2's graphs-off opening start and machine 1's EAGLE3 start, both cut by a released machine (ADR
    0222): attempt markers and logs committed, each log stops inside the engine's start."""
    cases = (
        (CAPTURE_1203G, "vllm-qwen3_30b_a3b-closed-cg0", "g00-opening-07ef5f920ae2", "baseline--open.dd02d32f84a4"),
        (
            SESSION_1203G / "machine-1",
            "vllm-qwen3_30b_a3b-closed-cg1",
            "g01-point-4fd76c5459f3",
            "eagle3--mv4.3fe2640f5dd6",
        ),
    )
    for folder, family, group, marker in cases:
        results = folder / "results"
        campaign = family.replace("-closed-", "-closed-b1-random-s0-")
        assert [p.name for p in (results / ".specjoule" / "attempts" / campaign).iterdir()] == [marker]
        log = logtext.read_log(results / "logs" / "engines" / family / f"{group}.log")
        assert "engine: start (vllm, offline)" in log and "Traceback" not in log and "ready after" not in log
    cg0 = logtext.read_log(CAPTURE_1203G / "results" / "logs" / "engines" / cases[0][1] / f"{cases[0][2]}.log")
    assert '"compilation_config": {"cudagraph_mode": "NONE"}' in cg0  # graphs off, torch.compile kept (ADR 0010)


def test_1203g_against_2026_12_02_and_the_baseline_on_three_boards():
    """The README's comparisons, from the records: the same four cells on 2026-12-02's board, and the opening
    baseline on three boards at one time per token."""
    here = pl.read_parquet(CAPTURE_1203G / "results" / "records.parquet")
    there = pl.read_parquet(SESSION_1202 / "families" / "results" / "records.parquet").filter(
        pl.col("campaign_id") == MOE_CG1
    )
    lost = _aggregated(packed.tree_files(SESSION_1203G / "machine-1" / "results" / "cells", "*/*.parquet"))
    assert there.height == 4 and set(there["cell_name"]) == set(here["cell_name"])
    readme = _readme_text(SESSION_1203G)
    # not the same cells: the engine's batch limits differ (there it also served B = 32), as the README says
    assert not set(there["cell_id"]) & set(here["cell_id"])
    for a, b in zip(there.sort("cell_name").iter_rows(named=True), here.sort("cell_name").iter_rows(named=True)):
        ea, eb = json.loads(a["engine_config"]), json.loads(b["engine_config"])
        differ = {k for k in ea.keys() | eb.keys() if ea.get(k) != eb.get(k)}
        assert differ <= {
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_num_scheduled_tokens",
            "max_cudagraph_capture_size",
            "cudagraph_capture_sizes",
        }, differ
        assert f"`max_num_seqs` {ea['max_num_seqs']} and {ea['max_num_batched_tokens']} batched" in readme
        assert f"here `max_num_seqs` {eb['max_num_seqs']}, {eb['max_num_batched_tokens']} tokens" in readme
    ratios = {}
    for name, df in (("there", there), ("here", here)):
        base = df.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
        cell = {r["cell_name"]: r for r in df.iter_rows(named=True)}
        ratios[name] = [cell[c]["mj_per_committed_token"] / base for c in ("eagle3--mv1", "eagle3--mv4")]
    assert f"EAGLE3 L = 1 {ratios['there'][0]:.3f} there, {ratios['here'][0]:.3f} here" in readme
    assert f"L = 4 {ratios['there'][1]:.3f} there, {ratios['here'][1]:.3f} here" in readme

    def mean_ms(df: pl.DataFrame, point: bool) -> float:
        return df.filter((pl.col("role") == "point") == point)["round_time_ms"].mean()

    step = [mean_ms(df, False) for df in (there, here)]
    rnd = [mean_ms(df, True) for df in (there, here)]
    assert f"same on both boards ({step[0]:.2f} and {step[1]:.2f} ms)" in readme
    assert f"round is {100 * (1 - rnd[1] / rnd[0]):.0f} % shorter here ({rnd[0]:.2f} → {rnd[1]:.2f} ms" in readme
    opening = {
        name: df.filter(pl.col("cell_name") == "baseline--open").row(0, named=True)
        for name, df in (("02", there), ("m1", lost), ("m2", here))
    }
    assert opening["m1"]["gpu_uuid"].startswith("GPU-bf6a7c95") and opening["m2"]["gpu_uuid"].startswith("GPU-a8351c02")
    tpot = sorted(1000 * o["tpot_mean_s"] for o in opening.values())
    assert f"({tpot[0]:.3f}–{tpot[-1]:.3f} ms)" in readme and tpot[-1] / tpot[0] < 1.005
    mj = {k: o["mj_per_committed_token"] for k, o in opening.items()}
    assert f"{mj['02']:.1f} mJ/token on GPU-98f2ec42" in readme
    assert f"{mj['m1']:.1f} on GPU-bf6a7c95 (machine 1 here, {opening['m1']['mean_power_w']:.1f} W)" in readme
    assert f"{mj['m2']:.1f} on GPU-a8351c02 (machine 2, {opening['m2']['mean_power_w']:.1f} W)" in readme
    assert f"{100 * (mj['m1'] / mj['m2'] - 1):.1f} % apart between this session's two boards" in readme


# --- session-2026-12-04: Qwen3-30B-A3B graphs off (cut) and graphs on (whole), on two boards (issue 16) ------------
SESSION_1204 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04"
CAPTURE_1204 = SESSION_1204 / "capture-moe"
MOE_CG0 = "vllm-qwen3_30b_a3b-closed-b1-random-s0-cg0"


def test_1204_config_is_the_preregistered_one():
    name = "h200-capture-bias.yaml"
    _assert_shipped_copy(CAPTURE_1204, name)


def test_1204_verdict_and_the_readme_tables_are_the_records():
    df, checks = _verdict(CAPTURE_1204, "h200-capture-bias.yaml")
    assert df.height == 7 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    gpus = {c: set(f["gpu_uuid"]) for (c,), f in df.group_by("campaign_id")}
    assert gpus == {
        MOE_CG0: {"GPU-21207a74-8173-ad3a-0578-e6c4f914413f"},
        MOE_CG1: {"GPU-add5a720-784f-48fa-b6de-8171f00c97ff"},
    }
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert checks.filter(pl.col("status") == "fail").height == 0
    flagged = checks.filter(pl.col("status") == "flag").select("check", "campaign_id").rows()
    assert flagged == [("engine_config_matched", MOE_CG1)]
    drift = {r["campaign_id"]: r for r in checks.filter(pl.col("check") == "baseline_drift").iter_rows(named=True)}
    assert drift[MOE_CG0]["status"] == "not_applicable" and drift[MOE_CG1]["status"] == "pass"
    assert f"`baseline_drift` {100 * drift[MOE_CG1]['value']:.2f} %" in _readme_text(SESSION_1204)
    committed = (CAPTURE_1204 / "results" / "checks.md").read_text()
    assert "0 fail, 1 flag, 40 pass, 13 not_applicable" in committed
    assert "0 fail, 1 flag, 40 pass, 13 not applicable" in _readme_text(SESSION_1204)
    for graphs, campaign in (("off", MOE_CG0), ("on", MOE_CG1)):
        fam = df.filter(pl.col("campaign_id") == campaign)
        assert set(fam["cuda_graphs"]) == {graphs == "on"}
        _assert_family_table(SESSION_1204, fam, f"| {graphs} ")
    curves = pl.read_parquet(CAPTURE_1204 / "results" / "curves.parquet")
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        graphs = "on" if r["cuda_graphs"] else "off"
        assert f"| {r['energy_ratio']:.3f} |" in _readme_line_in(SESSION_1204, f"| {graphs} | {r['cell_name']} |")


def test_1204_capture_bias_and_the_host_bound_baseline_from_the_records():
    """The README's capture bias is the pipeline's (``capture_bias_table`` over the committed records), and the
    graphs-off baseline's step, GPU busy fraction and power are its record's."""
    from specjoule.report import figures as rf

    records = pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet")
    inputs = rf.FigureInputs(records=records, curves=pl.read_parquet(CAPTURE_1204 / "results" / "curves.parquet"))
    bias = {float(r["arm"][-1]): r for r in rf.capture_bias_table(inputs).iter_rows(named=True)}
    readme = _readme_text(SESSION_1204)
    assert sorted(rf.capture_bias_table(inputs)["arm"]) == ["eagle3 · mv1", "eagle3 · mv4"] and set(bias) == {1.0, 4.0}
    assert f"+{bias[4.0]['bias_pp']:.1f} pp at L = 4, +{bias[1.0]['bias_pp']:.1f} pp at L = 1" in readme
    assert f"graphs-off saving is {bias[4.0]['saving_off']:.1f} %, against {bias[4.0]['saving_on']:.1f} %" in readme
    off = records.filter((pl.col("campaign_id") == MOE_CG0) & (pl.col("role") == "opening_baseline")).row(0, named=True)
    on = records.filter((pl.col("campaign_id") == MOE_CG1) & (pl.col("role") == "opening_baseline")).row(0, named=True)
    assert off["round_time_ms"] > 10 * on["round_time_ms"] and off["gpu_busy_fraction"] < 0.1
    ratio = off["round_time_ms"] / on["round_time_ms"]
    assert f"{off['round_time_ms']:.2f} ms against {on['round_time_ms']:.2f} ms with graphs ({ratio:.1f} ×)" in readme
    assert f"draws {off['mean_power_w']:.1f} W" in readme
    # against 2026-12-03g's graphs-on family, on its own board
    then = pl.read_parquet(CAPTURE_1203G / "results" / "curves.parquet").filter(pl.col("configured_L") == 4)
    assert f"the bias at L = 4 is +{bias[4.0]['saving_off'] - 100 * (1 - then['energy_ratio'][0]):.1f} pp" in readme


def test_1204_graphs_on_is_a_replicate_of_1203g_on_another_board():
    here = pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet").filter(pl.col("campaign_id") == MOE_CG1)
    then = pl.read_parquet(CAPTURE_1203G / "results" / "records.parquet")
    assert sorted(here["cell_id"]) == sorted(then["cell_id"])  # the same cells, two boards
    assert set(here["gpu_uuid"]).isdisjoint(then["gpu_uuid"])
    readme = _readme_text(SESSION_1204)
    ratios, base = {}, {}
    for name, df in (("then", then), ("here", here)):
        base[name] = df.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
        ratios[name] = {cell: ratio for (_, cell), (ratio, _) in _ratios_over_mean_baseline(df).items()}
    assert f"L = 1 {ratios['then']['eagle3--mv1']:.3f} and {ratios['here']['eagle3--mv1']:.3f}" in readme
    assert f"L = 4 {ratios['then']['eagle3--mv4']:.3f} and {ratios['here']['eagle3--mv4']:.3f}" in readme
    assert f"the baseline {base['then']:.1f} and {base['here']:.1f} mJ/token" in readme
    shift = max(abs(ratios["here"][c] / ratios["then"][c] - 1) for c in ("eagle3--mv1", "eagle3--mv4"))
    assert 0.01 < shift < 0.06 and "2–5 % in the ratio" in readme


def test_1204_lost_closing_start_is_committed_without_an_error():
    results = CAPTURE_1204 / "results"
    assert [p.name for p in (results / ".specjoule" / "attempts" / MOE_CG0).iterdir()] == [
        "baseline--close.89851c109ce6"
    ]
    log = logtext.read_log(
        results / "logs" / "engines" / "vllm-qwen3_30b_a3b-closed-cg0" / "g02-closing-e9ebbc98300a.log"
    )
    # cut in its warm-up: the engine was ready, no window had started, no error
    assert "engine: ready after 49.4 s" in log and "warm-up: start" in log
    assert "window: start" not in log and "Traceback" not in log
    assert '"compilation_config": {"cudagraph_mode": "NONE"}' in log
    assert "cut in its warm-up (its engine ready after 49.4 s)" in _readme_text(SESSION_1204)


def test_1204_the_report_warns_that_the_graphs_off_baseline_is_host_bound():
    """render.graphs_off_caveats over the committed records: the graphs-off baseline's step and busy fraction
    beside the graphs-on ones'; nothing where only one mode ran (2026-12-03g) or the columns are absent."""
    records = pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet")
    (caveat,) = render.graphs_off_caveats(records)
    assert caveat.level == "warn"
    assert "CUDA graphs off in 1 baseline window(s): a baseline step takes 61.29 ms against 4.23–4.25 ms" in caveat.text
    assert "the GPU busy 0.08 of the window against 0.98 (NVML utilization)" in caveat.text
    assert render.graphs_off_caveats(pl.read_parquet(CAPTURE_1203G / "results" / "records.parquet")) == []
    assert render.graphs_off_caveats(records.filter(pl.col("cuda_graphs"))) == []
    assert render.graphs_off_caveats(records.drop("gpu_busy_fraction")) == []
    # a CPU record (no NVML busy fraction) is no GPU baseline: the caveat does not count it
    cpu = records.with_columns(gpu_busy_fraction=pl.when(pl.col("cuda_graphs")).then(pl.col("gpu_busy_fraction")))
    assert render.graphs_off_caveats(cpu) == []


# --- session-2026-12-04b: Qwen3-8B graphs off (cut) and graphs on (whole), on two boards; one analysis of the four
# capture-bias families with 2026-12-04's MoE records (issue 16 item 4) -------------------------------------------
SESSION_1204B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04b"
CAPTURE_1204B = SESSION_1204B / "capture-dense"
DENSE_CG0 = "vllm-qwen3_8b-closed-b1-random-s0-cg0"
DENSE_CG1 = "vllm-qwen3_8b-closed-b1-random-s0-cg1"


def test_1204b_config_is_the_preregistered_one():
    name = "h200-capture-bias.yaml"
    _assert_shipped_copy(CAPTURE_1204B, name)


def test_1204b_verdict_of_the_four_families_and_the_readme_tables_are_the_records():
    df, checks = _verdict(CAPTURE_1204B, "h200-capture-bias.yaml", cells_also_in=(CAPTURE_1204,))
    assert df.height == 14 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    # the committed cells are this session's only; the analysis read 2026-12-04's too (its records.parquet holds all)
    assert {p.parent.name for p in packed.tree_files(CAPTURE_1204B / "results" / "cells", "*/*.parquet")} == {DENSE_CG0, DENSE_CG1}
    assert pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet").height == 14
    gpus = {c: set(f["gpu_uuid"]) for (c,), f in df.group_by("campaign_id") if c in (DENSE_CG0, DENSE_CG1)}
    assert gpus == {
        DENSE_CG0: {"GPU-1d1a7d52-86b3-2f28-40a6-bab5d9d62c7f"},
        DENSE_CG1: {"GPU-9f71ed11-863a-bb6e-1e8c-4bb051db3ce4"},
    }
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    assert checks.filter(pl.col("status") == "fail").height == 0
    flagged = sorted(checks.filter(pl.col("status") == "flag").select("check", "campaign_id").rows())
    assert flagged == [("engine_config_matched", MOE_CG1), ("engine_config_matched", DENSE_CG1)]
    drift = {r["campaign_id"]: r for r in checks.filter(pl.col("check") == "baseline_drift").iter_rows(named=True)}
    assert drift[DENSE_CG0]["status"] == "not_applicable" and drift[DENSE_CG1]["status"] == "pass"
    readme = _readme_text(SESSION_1204B)
    assert f"`baseline_drift` {100 * drift[DENSE_CG1]['value']:.2f} %" in readme
    committed = (CAPTURE_1204B / "results" / "checks.md").read_text()
    assert "0 fail, 3 flag, 79 pass, 26 not_applicable" in committed
    assert "0 fail, 3 flag, 79 pass, 26 not applicable" in readme
    for campaign in (DENSE_CG0, MOE_CG0):  # both graphs-off closing baselines were lost with their machines
        assert f"- {campaign}: 1 not measured: baseline--close" in committed
    # the third flag is the roofline's (a later rule, not re-derived here): the host-bound L = 4 point
    (residual,) = [ln for ln in committed.splitlines() if ln.startswith("| flag | model_residual |")]
    assert residual.startswith(f"| flag | model_residual | {DENSE_CG0} | eagle3--mv4 | 0.2797 | 0.25 |")
    assert "(measured 1646.0 mJ/token against 1286.0 predicted" in readme and "residual 0.28 > 0.25" in readme
    for graphs, campaign in (("off", DENSE_CG0), ("on", DENSE_CG1)):
        fam = df.filter(pl.col("campaign_id") == campaign)
        assert set(fam["cuda_graphs"]) == {graphs == "on"}
        _assert_family_table(SESSION_1204B, fam, f"| {graphs} ")
    curves = pl.read_parquet(CAPTURE_1204B / "results" / "curves.parquet").filter(pl.col("model_pair") == "qwen3_8b")
    assert curves.height == 4
    for r in curves.iter_rows(named=True):  # the pipeline's ratios are the README's
        graphs = "on" if r["cuda_graphs"] else "off"
        assert f"| {r['energy_ratio']:.3f} |" in _readme_line_in(SESSION_1204B, f"| {graphs} | {r['cell_name']} |")


def test_1204b_dense_and_moe_capture_bias_from_the_records_against_the_papers_bands():
    """The README's bias table is ``capture_bias_table`` over the committed analysis of the four families; at L = 4
    the dense bias is under the paper's 10 pp and the MoE one inside its 19-39 pp."""
    from specjoule.report import figures as rf

    results = CAPTURE_1204B / "results"
    inputs = rf.FigureInputs(
        records=pl.read_parquet(results / "records.parquet"), curves=pl.read_parquet(results / "curves.parquet")
    )
    table = rf.capture_bias_table(inputs)
    assert table.height == 4 and set(table["moe"]) == {True, False}
    names = {"qwen3_8b": ("Qwen3-8B", "dense"), "qwen3_30b_a3b": ("Qwen3-30B-A3B", "MoE")}
    for r in table.iter_rows(named=True):
        model, kind = names[r["model_pair"]]
        lo, hi, _ = rf.PAPER_CAPTURE_BIAS_PP[r["moe"]]
        paper = f"< {hi:.0f} pp" if lo == 0 else f"{lo:.0f}–{hi:.0f} pp"
        line = (
            f"| {model} | {kind} | {r['arm'][-1]} | {r['saving_on']:.1f} | {r['saving_off']:.1f} "
            f"| {r['bias_pp']:+.1f} | {paper} |"
        )
        assert line in (SESSION_1204B / "README.md").read_text(), line
        if r["arm"].endswith("mv4"):
            assert r["bias_pp"] < hi and (not r["moe"] or r["bias_pp"] > lo)
    # the MoE half is 2026-12-04's, read from its own committed analysis too
    then = rf.capture_bias_table(
        rf.FigureInputs(
            records=pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet"),
            curves=pl.read_parquet(CAPTURE_1204 / "results" / "curves.parquet"),
        )
    )
    moe_here = table.filter(pl.col("moe")).sort("arm")
    assert np.allclose(moe_here["bias_pp"], then.sort("arm")["bias_pp"])


def test_1204b_without_graphs_the_dense_step_is_host_bound_less_than_the_moe_one():
    records = pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet")

    def opening(campaign: str) -> dict:
        return records.filter((pl.col("campaign_id") == campaign) & (pl.col("role") == "opening_baseline")).row(
            0, named=True
        )

    off, on = opening(DENSE_CG0), opening(DENSE_CG1)
    moe_off, moe_on = opening(MOE_CG0), opening(MOE_CG1)
    dense, moe = off["round_time_ms"] / on["round_time_ms"], moe_off["round_time_ms"] / moe_on["round_time_ms"]
    assert 3 < dense < 5 and moe > 3 * dense
    readme = _readme_text(SESSION_1204B)
    assert f"{off['round_time_ms']:.2f} ms against {on['round_time_ms']:.2f} ms with graphs ({dense:.1f} ×)" in readme
    assert f"busy {100 * off['gpu_busy_fraction']:.0f} % of the window at {off['mean_power_w']:.1f} W" in readme
    assert (
        f"the MoE baseline's {moe_off['round_time_ms']:.2f} against {moe_on['round_time_ms']:.2f} ms ({moe:.1f} ×)"
        in readme
    )
    # the dense EAGLE3 round at L = 1 is longer than the step it replaces; the MoE one is not (unexplained)
    l1 = {
        c: records.filter((pl.col("campaign_id") == c) & (pl.col("cell_name") == "eagle3--mv1"))["round_time_ms"][0]
        for c in (DENSE_CG0, MOE_CG0)
    }
    assert l1[DENSE_CG0] > off["round_time_ms"] and l1[MOE_CG0] < moe_off["round_time_ms"]
    assert f"(L = 1: {l1[DENSE_CG0]:.2f} ms against the {off['round_time_ms']:.2f} ms step)" in readme


def test_1204b_graphs_on_qwen3_8b_eagle3_on_three_boards():
    """The same shapes on 2026-12-01d's and 2026-12-03d's boards (other engines: the cell ids differ)."""
    runs = (SCHEMES_1201D / "qwen3-8b", DEPTH_1203D, CAPTURE_1204B)
    ratios: dict[int, list[float]] = {1: [], 4: []}
    boards = set()
    for run in runs:
        fam = pl.read_parquet(run / "results" / "records.parquet").filter(pl.col("campaign_id") == DENSE_CG1)
        boards |= set(fam["gpu_uuid"])
        over_base = _ratios_over_mean_baseline(fam)
        for L in ratios:
            ratios[L].append(over_base[(1, f"eagle3--mv{L}")][0])
    assert len(boards) == 3
    readme = _readme_text(SESSION_1204B)
    for L, rs in ratios.items():
        assert f"L = {L} {rs[0]:.3f}, {rs[1]:.3f} and {rs[2]:.3f}" in readme
    spread = max(max(rs) / min(rs) - 1 for rs in ratios.values())
    assert f"at most {100 * spread:.1f} % apart" in readme and spread < 0.015


def test_1204b_lost_closing_start_is_committed_without_an_error():
    results = CAPTURE_1204B / "results"
    assert [p.name for p in (results / ".specjoule" / "attempts" / DENSE_CG0).iterdir()] == [
        "baseline--close.52753a7a0a17"
    ]
    log = logtext.read_log(results / "logs" / "engines" / "vllm-qwen3_8b-closed-cg0" / "g02-closing-b5403496b69a.log")
    # cut inside the engine's start: no ready line, no window, no error
    assert "engine: start (vllm, offline)" in log and "ready after" not in log and "window: start" not in log
    assert "Traceback" not in log and '"compilation_config": {"cudagraph_mode": "NONE"}' in log
    assert log.rstrip().splitlines()[-1].startswith("(EngineCore pid=2213) INFO 12-04 06:55:53")
    assert "its log stops at 06:55:53, no error" in _readme_text(SESSION_1204B)


def test_1204b_the_report_caveat_spans_both_graphs_off_baselines():
    (caveat,) = render.graphs_off_caveats(pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet"))
    assert "CUDA graphs off in 2 baseline window(s): a baseline step takes 22.15–61.29 ms against 4.23–5.31 ms" in (
        caveat.text
    )
    assert "the GPU busy 0.08–0.25 of the window against 0.98–0.99" in caveat.text
    # the committed report was made at ce23108, after the caveat landed (d89ca67): it shows it
    report = slim_evidence.read_report(CAPTURE_1204B / "results" / "report.html.gz")
    assert "CUDA graphs off in 2 baseline window(s)" in report


def test_1204b_the_pairs_ran_on_different_model_runners_and_the_controls_are_preregistered():
    """vLLM 0.26.0 put the dense pair on Model Runner V2 and the MoE pair on V1, in both graph modes: the README
    says so, and the two control configs force the other runner on an otherwise unchanged pair."""
    records = pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet")
    runner_of = {
        (moe, graphs): {json.loads(e)["model_runner"] for e in f["engine_config"]}
        for (moe, graphs), f in records.group_by("target_moe", "cuda_graphs")
    }
    assert runner_of == {(False, False): {"v2"}, (False, True): {"v2"}, (True, False): {"v1"}, (True, True): {"v1"}}
    readme = _readme_text(SESSION_1204B)
    assert "Qwen3-8B on Model Runner V2, Qwen3-30B-A3B on V1, in both graph modes" in readme
    base = sj_config.load(ROOT / "config" / "h200-capture-bias.yaml")
    for name, model, forced in (("dense-v1", "qwen3_8b", "0"), ("moe-v2", "qwen3_30b_a3b", "1")):
        assert f"`config/h200-capture-bias-{name}.yaml`" in readme
        control = sj_config.load(ROOT / "config" / f"h200-capture-bias-{name}.yaml")
        assert list(control["models"]) == [model] and control["models"][model] == base["models"][model]
        assert control["engine_options"]["vllm"]["env"] == {"VLLM_USE_V2_MODEL_RUNNER": forced}
        assert control["checks"] == base["checks"] and control["schemes"] == base["schemes"]
        assert control["cuda_graphs"] == base["cuda_graphs"] and control["workloads"] == base["workloads"]


def test_1204b_the_moe_graphs_off_baseline_spends_host_time_not_gpu_work():
    """The README's reading of 2026-12-04's unexplained order, from its records: the GPU's SM-active time per step
    moves little with graphs, and the baseline's prefill is slower than the EAGLE3 engine's too."""
    records = pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet")
    cell = {(r["cell_name"], r["cuda_graphs"]): r for r in records.iter_rows(named=True)}

    def active_ms(name: str, graphs: bool) -> float:
        r = cell[(name, graphs)]
        return r["sm_active_pct"] / 100 * r["round_time_ms"]

    readme = _readme_text(SESSION_1204B)
    for name in ("baseline--open", "eagle3--mv1"):
        assert abs(active_ms(name, False) / active_ms(name, True) - 1) < 0.1
    b_off, b_on = active_ms("baseline--open", False), active_ms("baseline--open", True)
    e_off, e_on = active_ms("eagle3--mv1", False), active_ms("eagle3--mv1", True)
    assert (
        f"per baseline step {b_off:.2f} ms off against {b_on:.2f} on, per EAGLE3 L = 1 round {e_off:.2f} against {e_on:.2f}"
        in readme
    )
    ttft = {n: 1000 * cell[(n, False)]["ttft_mean_s"] for n in ("baseline--open", "eagle3--mv1")}
    assert ttft["baseline--open"] > 1.2 * ttft["eagle3--mv1"]
    assert f"first token {ttft['baseline--open']:.1f} ms against {ttft['eagle3--mv1']:.1f} for EAGLE3 L = 1" in readme


def test_1204b_the_report_warns_that_the_capture_pairs_ran_on_different_runners():
    """render.capture_runner_caveats on the committed records: it names each model's runner where the models
    measured both ways ran on different ones, and is silent where they did not."""
    records = pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet")
    (caveat,) = render.capture_runner_caveats(records)
    assert caveat.level == "warn"
    assert "(qwen3_30b_a3b on v1, qwen3_8b on v2; the engine picks it by architecture)" in caveat.text
    assert render.capture_runner_caveats(pl.read_parquet(CAPTURE_1204 / "results" / "records.parquet")) == []
    one_runner = records.with_columns(
        pl.col("engine_config").str.replace('"model_runner": "v2"', '"model_runner": "v1"')
    )
    assert render.capture_runner_caveats(one_runner) == []
    # a model measured with graphs on only is no capture pair: its runner does not count
    dense_on_only = records.filter(pl.col("target_moe") | pl.col("cuda_graphs"))
    assert render.capture_runner_caveats(dense_on_only) == []
    assert render.capture_runner_caveats(records.drop("engine_config")) == []


def test_1204b_smoke_eagle3_on_qwen36_started_drafted_and_counted_on_v1():
    """Addendum 1's smoke (no record): the engine took the reconstructed head, ran on Model Runner V1 (a hybrid
    target), and realized the configured L at both ends with the scheme's verify width; the README says so."""
    smoke = SESSION_1204B / "smoke-qwen36-eagle3"
    summary = json.loads((smoke / "summary.json").read_text())
    assert summary["ok"] is True and summary["engine"] == "vllm"
    cell = smoke / "0-qwen3.6-35b-a3b-eagle3"
    info = json.loads((cell / "engine_info.json").read_text())
    assert info["engine_version"] == "0.26.0" and info["engine_config"]["model_runner"] == "v1"
    for L in (1, 4):
        got = json.loads((cell / f"L{L}.json").read_text())
        assert got["configured_L"] == got["realized_L"] == L
        assert got["verify_width_measured"] == got["verify_width_scheme"] == 4 and got["requests_ok"] == 2
    log = logtext.read_log(cell / "engine-L1.log")
    assert "speculative_config=SpeculativeConfig(method='eagle3'" in log and "qwen3.6-35b-a3b-eagle3" in log
    scheme = summary["schemes"]["0-qwen3.6-35b-a3b-eagle3"]
    assert scheme["ok"] is True and scheme["drafter"] == "config/models/qwen3.6-35b-a3b-eagle3"
    (start,) = [r["start_s"] for r in scheme["runs"] if "start_s" in r]  # vLLM swaps L in place: one start
    assert f"the engine started in {start:.1f} s on Model Runner V1" in _readme_text(SESSION_1204B)


# --- session-2026-12-04c: draft_model under async scheduling, whole (issue 17 item 6); EAGLE3 on Qwen3.6 lost with
# machine 1 after its opening baseline (issue 16) -------------------------------------------------------------------
SESSION_1204C = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04c"
ASYNC_1204C = SESSION_1204C / "draft-async"
GDN_LOST_1204C = SESSION_1204C / "gdn-lost"
ASYNC_B1, ASYNC_B32 = "vllm-qwen3b-closed-b1-random-s0-cg1", "vllm-qwen3b-closed-b32-random-s0-cg1"


def test_1204c_analysis_config_is_the_preregistered_one_plus_allow_failed_checks():
    run, analysis = _run_and_analysis_configs(ASYNC_1204C, "h200-draft-async.yaml")
    assert analysis["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in run["checks"]
    assert analysis == run  # no threshold, window count or other key changed


def test_1204c_verdict_and_the_readme_tables_are_the_records():
    df, checks = _verdict(ASYNC_1204C, "config-analysis.yaml", replicated=True)
    assert df.height == 16 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {"GPU-f6dbc935-6ba1-16ee-abfc-fca9068f6de6"}
    assert set(df["async_scheduling"]) == {True}  # vLLM accepted the setting on every arm
    runners = df.select("role", pl.col("engine_config").str.json_path_match("$.model_runner").alias("runner"))
    assert set(runners.filter(pl.col("role") == "point")["runner"]) == {"v1"}
    assert set(runners.filter(pl.col("role") != "point")["runner"]) == {"v2"}
    failed = checks.filter(pl.col("status") == "fail").select("check", "campaign_id").rows()
    assert failed == [("baseline_drift", ASYNC_B32)]  # it stays failed: 2.01 % against 2 %
    (drift,) = checks.filter((pl.col("check") == "baseline_drift") & (pl.col("campaign_id") == ASYNC_B32))["value"]
    assert 0.02 < drift < 0.0202
    committed = (ASYNC_1204C / "results" / "checks.md").read_text()
    assert "1 fail, 6 flag, 37 pass, 10 not_applicable" in committed and "`allow_failed_checks` = True" in committed
    readme = _readme_text(SESSION_1204C)
    assert "**1 fail, 6 flag, 37 pass, 10 not applicable.**" in readme and "**2.01 % > 2 %**" in readme
    for b in (1, 32):
        _assert_family_table(SESSION_1204C, df.filter(pl.col("batch_size") == b), f"| {b} ")
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9


def test_1204c_the_preregistered_rule_says_async_does_not_remove_the_host_bound_round():
    """The config's rule: removes if the B = 1, L = 3 mean round < 17 ms and busy > 0.6 in both windows; does not if
    the round stays above 25 ms; "partly" between. Computed from the records, then found in the README."""
    df = _aggregated(packed.tree_files(ASYNC_1204C / "results" / "cells", "*/*.parquet"))
    cell = df.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 3.0))
    assert cell.height == 2
    mean_round = cell["round_time_ms"].mean()
    removes = mean_round < 17 and (cell["gpu_busy_fraction"] > 0.6).all()
    verdict = "removes" if removes else "does not remove" if mean_round > 25 else "partly"
    assert verdict == "does not remove"
    readme = _readme_text(SESSION_1204C)
    assert (
        f"**{mean_round:.2f} ms**" in readme and "**async scheduling does not remove the host-bound round.**" in readme
    )
    # shorter than the synchronous reference (2026-12-02e) by the README's 10.2 ms
    ref = _aggregated(packed.tree_files(SPREAD_1202E / "results" / "cells", "*/*.parquet"))
    sync = ref.filter((pl.col("engine") == "vllm") & (pl.col("batch_size") == 1) & (pl.col("configured_L") == 3.0))
    assert set(sync["async_scheduling"]) == {False}
    assert f"by {sync['round_time_ms'].mean() - mean_round:.1f} ms" in readme
    adr = (ROOT / "docs" / "adr" / "0096-why-a-vllm-draft-model-round-takes-30-ms.md").read_text()
    assert "**Addendum 4 (2026-12-04c" in adr and f"mean round {mean_round:.2f} ms" in adr


def test_1204c_paired_ratios_in_the_readme_are_the_pipeline_s_beside_the_synchronous_reference():
    ours = pl.read_parquet(ASYNC_1204C / "results" / "curves_summary.parquet")
    ref = pl.read_parquet(SPREAD_1202E / "results" / "curves_summary.parquet").filter(pl.col("engine") == "vllm")
    assert ours.height == 4 and set(ours["n_windows"]) == {2}
    for r in ours.iter_rows(named=True):
        same = ref.filter((pl.col("batch_size") == r["batch_size"]) & (pl.col("configured_L") == r["configured_L"]))
        assert same.height == 1
        s = same.row(0, named=True)
        line = _readme_line_in(SESSION_1204C, f"| {r['batch_size']} | {r['configured_L']:.0f} | ")
        assert (
            f"{r['energy_ratio_mean']:.3f}× [{r['energy_ratio_ci_low']:.3f}, {r['energy_ratio_ci_high']:.3f}]" in line
        )
        assert (
            f"{s['energy_ratio_mean']:.3f}× [{s['energy_ratio_ci_low']:.3f}, {s['energy_ratio_ci_high']:.3f}]" in line
        )
        assert (
            ("baseline_drift failed" in line) == (r["batch_size"] == 32) == (r["failed_checks"] == ["baseline_drift"])
        )


def test_1204c_the_lost_gdn_family_is_kept_and_not_analysed():
    (record,) = packed.tree_files(GDN_LOST_1204C / "results" / "cells", "*/*.parquet")
    assert record.name == "baseline--open.parquet"  # no EAGLE3 point, no closing baseline came back
    r = packed.read_frame(record).row(0, named=True)
    assert r["status"] == "measured" and r["energy_j"] > 0 and r["gpu_uuid"].startswith("GPU-4c6f7a68")
    assert json.loads(r["engine_config"])["block_size"] == 1072  # the EAGLE3 arm's block size, as pre-registered
    readme = _readme_text(SESSION_1204C)
    assert f"engine start **{r['engine_start_s']:.1f} s**" in readme
    assert f"{r['mj_per_committed_token']:.1f} mJ/token" in readme and "**Not analysed**" in readme
    assert not (GDN_LOST_1204C / "results" / "records.parquet").exists()
    markers = list((GDN_LOST_1204C / "results" / ".specjoule" / "attempts").glob("*/eagle3--*"))
    assert len(markers) == 1
    log = logtext.read_log(
        GDN_LOST_1204C
        / "results"
        / "logs"
        / "engines"
        / "vllm-qwen36_35b_a3b-closed-cg1"
        / "g01-point-86698c96110b.log"
    )
    assert "Initial profiling/warmup run took 91.04 s" in log and "record written" not in log


# --- session-2026-12-04d: EAGLE3 on Qwen3.6-35B-A3B on vLLM, whole (issue 16); draft_model round profiles in both
# scheduling modes (issue 17, ADR 0096 Result and addendum 5) ---------------------------------------------------------
SESSION_1204D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04d"
GDN_1204D = SESSION_1204D / "gdn-eagle3"
ROUNDS_1204D = SESSION_1204D / "rounds"


def test_1204d_config_is_the_preregistered_one():
    name = "h200-schemes-gdn-eagle3.yaml"
    _assert_shipped_copy(GDN_1204D, name)


def test_1204d_gdn_eagle3_family_is_whole_and_the_readme_table_is_the_records():
    df, checks = _verdict(GDN_1204D, "h200-schemes-gdn-eagle3.yaml")
    assert sorted(df["cell_name"]) == ["baseline--close", "baseline--open", "eagle3--mv1", "eagle3--mv4"]
    assert (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {"GPU-a336f504-dac5-1839-639e-5bc186ea8330"} and set(df["engine"]) == {"vllm"}
    assert set(df["target_model"]) == {"config/models/qwen3.6-35b-a3b"}
    runner = df.select(pl.col("engine_config").str.json_path_match("$.model_runner"))
    assert set(runner.to_series()) == {"v1"} and set(df["async_scheduling"]) == {True}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    committed = (GDN_1204D / "results" / "checks.md").read_text()
    assert "0 fail, 1 flag, 20 pass, 6 not_applicable" in committed
    assert "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1: 4 not measured" in committed  # the half not run, named
    readme = _readme_text(SESSION_1204D)
    assert "**0 fail, 1 flag, 20 pass, 6 not applicable.**" in readme
    _assert_family_table(SESSION_1204D, df)
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    (drift,) = checks.filter(pl.col("check") == "baseline_drift")["value"]
    assert f"passes at {100 * drift:.2f} %" in readme


def test_1204d_the_eagle3_round_costs_the_same_at_both_l_and_breaks_even_where_adr_0233_says():
    """The committed crossover table (the commit that ran: a line through the ratios) says 3.22; the same curves
    through ADR 0233's a + b/L say 2.24, which is where the round's energy (ratio x L, the same at L 1 and 4) is 1."""
    curves = pl.read_parquet(GDN_1204D / "results" / "curves_summary.parquet").sort("configured_L")
    points = [(r["configured_L"], r["energy_ratio_mean"]) for r in curves.iter_rows(named=True)]
    (l1, r1), (l4, r4) = points
    assert (l1, l4) == (1.0, 4.0) and r1 > 1 > r4
    per_round = [r1 * l1, r4 * l4]  # the round's energy in plain-step tokens
    assert abs(per_round[1] / per_round[0] - 1) < 0.01
    new, bracket = roofline.measured_crossover(points)
    assert min(per_round) <= new <= max(per_round)  # a round that costs c steps breaks even at L = c
    (old,) = pl.read_parquet(GDN_1204D / "results" / "crossover.parquet")["measured_crossover_L"]
    assert old == pytest.approx(l1 + (1 - r1) * (l4 - l1) / (r4 - r1))  # the straight line, as committed
    readme = _readme_text(SESSION_1204D)
    assert f"ratio × L is {per_round[0]:.3f} at L 1 and {per_round[1]:.3f} at L 4" in readme
    assert f"**L ≈ {new:.2f}**" in readme and f"says {old:.2f}" in readme and f"gives **{new:.2f}**" in readme
    assert bracket == "between L = 1 (ratio 2.24) and L = 4 (ratio 0.563)"


def test_1204d_round_profiles_put_the_round_in_the_drafter_and_the_readme_table_is_the_profiles():
    table = pl.read_parquet(ROUNDS_1204D / "rounds.parquet").with_columns(  # tag: the folder's --<tag>, if any
        pl.col("profile_dir").str.split("/").list.last().str.split("--").list.get(2, null_on_oob=True).alias("tag")
    )
    assert table.height == 5 and set(table["method"]) == {"draft_model"} and set(table["model_runner"]) == {"v1"}
    got = sorted(table.select("configured_L", "tag").iter_rows(), key=str)
    assert got == sorted([(3.0, None), (3.0, "async"), (3.0, "async-r2"), (6.0, None), (6.0, "async")], key=str)
    assert (table["async_scheduling"] == table["tag"].is_not_null()).all()
    gpu = table["gpu_ms_per_round"]
    assert gpu.max() / gpu.min() < 1.01  # the same GPU work in both modes, at both L, on both boards
    assert f"The GPU works {gpu.min():.2f}–{gpu.max():.2f} ms a round in all five" in _readme_text(SESSION_1204D)
    for r in table.iter_rows(named=True):
        mode = r["tag"] or "sync"
        line = _readme_line_in(SESSION_1204D, f"| {r['configured_L']:.0f} | {mode} |")
        assert line == (
            f"| {r['configured_L']:.0f} | {mode} | {r['round_ms_unprofiled']:.2f} | {r['round_ms_profiled']:.2f} "
            f"| {r['gpu_ms_per_round']:.2f} ({r['draft_ms_per_round']:.2f} / {r['verify_ms_per_round']:.2f}) "
            f"| {r['host_ms_per_round']:.2f} | {r['draft_span_ms_per_round']:.2f} "
            f"| {100 * r['gpu_busy_fraction']:.0f} % / {100 * r['nvml_util_unprofiled']:.0f} % |"
        )
        assert r["rounds_profiled"] >= 22 and r["draft_kernel_launches_per_round"] > 0
    # ADR 0096's rule, applied to its cell (B 1, L 3): host-bound, the drafter host-bound, and async does not remove
    # the gap (a cut of at least 7.7 ms of the unprofiled round would)
    sync, asyn = (
        table.filter((pl.col("configured_L") == 3.0) & pl.col("tag").eq_missing(t)).row(0, named=True)
        for t in (None, "async")
    )
    assert sync["host_ms_per_round"] >= 0.5 * sync["round_ms_profiled"] and sync["nvml_util_unprofiled"] < 0.6
    assert sync["draft_span_ms_per_round"] >= 2 * sync["draft_ms_per_round"]
    cut = sync["round_ms_unprofiled"] - asyn["round_ms_unprofiled"]
    assert 0 < cut < 7.7
    adr = (ROOT / "docs" / "adr" / "0096-why-a-vllm-draft-model-round-takes-30-ms.md").read_text()
    assert f"round **{sync['round_ms_unprofiled']:.2f} ms unprofiled**" in adr
    assert f"a cut of {cut:.2f} ms, under the rule's 7.7 ms" in adr and "**Removes the gap: no.**" in adr
    assert "**Addendum 5 (2026-12-04d" in adr
    detail = pl.read_parquet(ROUNDS_1204D / "rounds_detail.parquet")
    assert detail.height == int(table["rounds_profiled"].sum())


# --- session-2026-12-04e: SGLang — EAGLE3 on Qwen3.6-35B-A3B fails at start (issue 16), the open loop as a campaign
# (issue 19), STANDALONE round profiles (issue 17, ADR 0096 addendum 6) ---------------------------------------------
SESSION_1204E = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04e"
GDN_1204E = SESSION_1204E / "gdn-eagle3-sglang"
OPENLOOP_1204E = SESSION_1204E / "openloop-sglang"
ROUNDS_1204E = SESSION_1204E / "rounds"
GPU_1204E = "GPU-ecd3b27f-8605-9b06-540f-54af3b539bce"


def test_1204e_configs_are_the_preregistered_ones():
    name = "h200-schemes-gdn-eagle3.yaml"
    _assert_shipped_copy(GDN_1204E, name)
    run, analysis = _run_and_analysis_configs(OPENLOOP_1204E, "h200-sglang-openloop.yaml")
    assert analysis["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in run["checks"]
    assert analysis == run  # no threshold, rate or window changed


def test_1204e_sglang_eagle3_on_qwen36_died_at_start_with_the_engines_defect_and_only_the_baseline_measured():
    (record,) = packed.tree_files(GDN_1204E / "results" / "cells", "*/*.parquet")
    assert (
        record.parent.name == "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1"
        and record.name == "baseline--open.parquet"
    )
    r = packed.read_frame(record).row(0, named=True)
    assert r["status"] == "measured" and r["energy_j"] > 0 and r["gpu_uuid"] == GPU_1204E and r["engine"] == "sglang"
    readme = _readme_text(SESSION_1204E)
    assert f"**{r['mj_per_committed_token']:.1f} mJ/token**, round {r['round_time_ms']:.2f} ms" in readme
    assert f"GPU busy {r['gpu_busy_fraction']:.2f}" in readme and f"engine start {r['engine_start_s']:.1f} s" in readme
    (marker,) = (GDN_1204E / "results" / ".specjoule" / "attempts").glob("*/eagle3--mv4.*")
    attempt = json.loads(marker.read_text())
    assert attempt["root_cause"] == "ValueError: too many values to unpack (expected 2)"
    log = logtext.read_log(
        GDN_1204E / "results" / "logs" / "engines" / "sglang-qwen36_35b_a3b-closed-cg1" / "g01-point-5a2c8c8b755f.log"
    )
    assert 'qwen3_vl.py", line 1428' in log and "hidden_states, aux_hidden_states = hidden_states" in log
    assert "no record written for the cell in progress" in log
    committed = (GDN_1204E / "results" / "checks.md").read_text()
    assert "0 fail, 0 flag, 17 pass, 10 not_applicable" in committed
    assert "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1: 3 not measured" in committed
    assert "0 fail, 0 flag, 17 pass, 10 not applicable" in readme
    # the plan now refuses the arm before any GPU time, with the engine's defect (ADR 0194 addendum 3)
    _, table = sj_config.plan(yaml.safe_load((ROOT / "config" / "h200-schemes-gdn-eagle3.yaml").read_text()), "x")
    refused = {c.name: c.unsupported_reason for c in table if c.engine == "sglang" and c.unsupported_reason}
    assert sorted(refused) == ["eagle3--mv1", "eagle3--mv4"]
    assert all("too many values to unpack" in reason for reason in refused.values())


def test_1204e_sglang_open_loop_fails_batch_shape_as_vllm_did_and_the_readme_table_is_the_records():
    df, checks = _verdict(OPENLOOP_1204E, "config-analysis.yaml")
    assert df.height == 4 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {GPU_1204E} and set(df["engine"]) == {"sglang"}
    failed = sorted(checks.filter(pl.col("status") == "fail")["check"])
    assert failed == ["batch_shape", "committed_spread"]  # they stay failed
    (spread,) = checks.filter(pl.col("check") == "committed_spread")["value"]
    assert 0.05 < spread < 0.054
    committed = (OPENLOOP_1204E / "results" / "checks.md").read_text()
    assert "2 fail, 3 flag, 19 pass, 3 not_applicable" in committed and "`allow_failed_checks` = True" in committed
    readme = _readme_text(SESSION_1204E)
    assert "**2 fail, 3 flag, 19 pass, 3 not applicable.**" in readme and f"{100 * spread:.2f} %" in readme
    rates = sorted(df["realized_request_rate"])
    assert rates[-1] - rates[0] < 0.01 and f"**{rates[0]:.2f}–{rates[-1]:.2f} requests/s**" in readme
    _assert_family_table(SESSION_1204E, df, open_loop=True)
    base = df.filter(pl.col("role") != "point")["mj_per_committed_token"].mean()
    # the arm that accepts nothing "saves" energy only by running at a far larger batch than the baselines
    l1 = df.filter(pl.col("cell_name") == "draft--mv1").row(0, named=True)
    assert (
        l1["mj_per_committed_token"] < base and l1["mean_running_requests"] > 5 * l1["baseline_mean_running_requests"]
    )


def test_1204e_sglang_round_profiles_do_the_same_gpu_work_as_vllms_with_less_host_time():
    table = pl.read_parquet(ROUNDS_1204E / "rounds.parquet").sort("configured_L")
    assert table.height == 2 and set(table["engine"]) == {"sglang"} and set(table["method"]) == {"draft_model"}
    assert table["configured_L"].to_list() == [3.0, 6.0] and set(table["async_scheduling"]) == {True}
    for r in table.iter_rows(named=True):
        line = _readme_line_in(SESSION_1204E, f"| {r['configured_L']:.0f} | {r['round_ms_unprofiled']:.2f} / ")
        assert line == (
            f"| {r['configured_L']:.0f} | {r['round_ms_unprofiled']:.2f} / {r['round_ms_profiled']:.2f} "
            f"| {r['gpu_ms_per_round']:.2f} ({r['draft_ms_per_round']:.2f} / {r['verify_ms_per_round']:.2f}) "
            f"| {r['host_ms_per_round']:.2f} | {r['draft_span_ms_per_round']:.2f} "
            f"| {r['draft_graph_launches_per_round']:.0f} graph + {r['draft_kernel_launches_per_round']:.0f} kernels "
            f"| {100 * r['gpu_busy_fraction']:.0f} % / {100 * r['nvml_util_unprofiled']:.0f} % |"
        )
        assert r["rounds_profiled"] >= 22
    vllm = pl.read_parquet(ROUNDS_1204D / "rounds.parquet")
    gpu = pl.concat([vllm["gpu_ms_per_round"], table["gpu_ms_per_round"]])
    assert gpu.max() / gpu.min() < 1.02  # the same GPU work a round on both engines
    # ADR 0096's rule at its cell (B 1, L 3): the SGLang round is host-bound too, with far less host time than vLLM's
    l3 = table.row(0, named=True)
    assert l3["host_ms_per_round"] >= 0.5 * l3["round_ms_profiled"] and l3["nvml_util_unprofiled"] < 0.6
    sync3 = vllm.filter((pl.col("configured_L") == 3.0) & ~pl.col("async_scheduling")).row(0, named=True)
    extra_sglang = l3["round_ms_unprofiled"] - l3["gpu_ms_per_round"]
    extra_vllm = sync3["round_ms_unprofiled"] - sync3["gpu_ms_per_round"]
    assert extra_vllm > 3 * extra_sglang
    adr = " ".join((ROOT / "docs" / "adr" / "0096-why-a-vllm-draft-model-round-takes-30-ms.md").read_text().split())
    assert "**Addendum 6 (2026-12-04e" in adr and f"**L 3: round {l3['round_ms_unprofiled']:.2f} ms unprofiled**" in adr
    assert f"≈ {extra_sglang:.1f} ms a round on SGLang, ≈ {extra_vllm:.1f} ms on vLLM's synchronous path" in adr
    detail = pl.read_parquet(ROUNDS_1204E / "rounds_detail.parquet")
    assert detail.height == int(table["rounds_profiled"].sum())


# --- session-2026-12-04f: the spread campaign's vLLM engine replicate 1 (issue 17) ---
SESSION_1204F = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04f"
SPREAD_1204F = SESSION_1204F / "spread-r1"
GPU_1204F = "GPU-c2635eb4-73be-e360-65bf-12ed9f30c2b1"


def test_1204f_config_is_the_preregistered_one_plus_allow_failed_checks():
    run, analysis = _run_and_analysis_configs(SPREAD_1204F, "h200-spread.yaml")
    assert analysis["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in run["checks"]
    assert analysis == run  # no threshold, window, seed or replicate count changed


def test_1204f_replicate_1_is_whole_on_one_board_and_the_verdict_is_the_readme_s():
    df, checks = _verdict(SPREAD_1204F, "config-analysis.yaml", replicated=True, cells_also_in=(SPREAD_1202E,))
    r1 = df.filter(pl.col("engine_replicate") == 1)
    assert df.height == 76 and r1.height == 40 and (df["energy_j"] > 0).all()
    assert set(r1["gpu_uuid"]) == {GPU_1204F} and GPU_1204F not in set(
        df.filter(pl.col("engine_replicate") == 0)["gpu_uuid"]
    )
    assert r1["engine_instance"].n_unique() == 3  # opening, point and closing starts
    failed = checks.filter(pl.col("status") == "fail")
    assert failed["check"].to_list() == ["baseline_drift"]  # it stays failed
    assert failed["campaign_id"].to_list() == ["vllm-qwen3b-closed-b1-random-s0-cg1-r1"]
    committed = (SPREAD_1204F / "results" / "checks.md").read_text()
    assert "1 fail, 24 flag, 151 pass, 40 not_applicable" in committed and "`allow_failed_checks` = True" in committed
    for check in ("preregistration", "engine_config_matched", "reproduces_reference"):
        assert committed.count(f"| flag | {check} |") == 8, check
    readme = _readme_text(SESSION_1204F)
    assert "**Verdict: 1 fail, 24 flag, 151 pass, 40 not applicable**" in readme
    drift = checks.filter((pl.col("check") == "baseline_drift") & pl.col("campaign_id").str.ends_with("-r1"))
    values = dict(zip(drift["campaign_id"], drift["value"]))
    order = ["b1-random-s0", "b1-random-s1", "b32-random-s0", "b32-random-s1"]
    cells = [f"{100 * values[f'vllm-qwen3b-closed-{o}-cg1-r1']:.2f} %" for o in order]
    cells[0] += " (fail)"
    assert _readme_line_in(SESSION_1204F, "| replicate 1 |") == "| replicate 1 | " + " | ".join(cells) + " |"
    # every closing baseline of replicate 1 above its opening one: the README's upward drift
    for (campaign,), g in r1.filter(pl.col("role") != "point").group_by("campaign_id"):
        opening = g.filter(pl.col("role") == "opening_baseline")["mj_per_committed_token"].mean()
        assert g.filter(pl.col("role") == "closing_baseline")["mj_per_committed_token"].mean() > opening, campaign
    points = r1.filter(pl.col("role") == "point")
    assert (points["realized_L"] == points["configured_L"]).all()
    starts = sorted(r1["engine_start_s"].unique(), reverse=True)
    assert f"({starts[0]:.1f}, {starts[1]:.1f} and {starts[2]:.1f} s)" in readme


def _assert_two_unit_ratio_row(
    session: Path, g: pl.DataFrame, records: pl.DataFrame, B: int, L: float, level: str, windows: int
) -> None:
    """One (B, L) row of a spread session's ratio table, from its curve rows ``g`` (one per window): the interval is
    over the two units of ``level`` (engine replicates or seeds), each unit its paired ratio of means (ADR 0081), so
    with two units they are the interval's ends; then the README's line, windows' range and round beside it."""
    r = g.row(0, named=True)
    assert r["interval_level"] == level and r["energy_ratio_n"] == 2 and g.height == windows
    unit = {
        key: u["mj_per_committed_token"].sum() / u["baseline_window_mj_per_committed_token"].sum()
        for (key,), u in g.group_by(level)
    }
    assert sorted(unit.values()) == pytest.approx([r["energy_ratio_ci_low"], r["energy_ratio_ci_high"]], rel=1e-3)
    pts = records.filter((pl.col("batch_size") == B) & (pl.col("configured_L") == L) & (pl.col("role") == "point"))
    base_step = records.filter((pl.col("batch_size") == B) & (pl.col("role") != "point"))["round_time_ms"].mean()
    assert _readme_line_in(session, f"| {B} | {L:.0f} | ") == (
        f"| {B} | {L:.0f} | {r['energy_ratio_mean']:.3f}× [{r['energy_ratio_ci_low']:.3f}, "
        f"{r['energy_ratio_ci_high']:.3f}] | {unit[0]:.3f}× / {unit[1]:.3f}× "
        f"| {g['energy_ratio'].min():.3f}–{g['energy_ratio'].max():.3f} "
        f"| {pts['round_time_ms'].min():.1f}–{pts['round_time_ms'].max():.1f} / {base_step:.2f} ms |"
    )


def test_1204f_ratio_table_is_the_curves_over_two_engine_replicates():
    curves = pl.read_parquet(SPREAD_1204F / "results" / "curves.parquet").filter(pl.col("method") != "baseline")
    records = pl.read_parquet(SPREAD_1204F / "results" / "records.parquet")
    for (B, L), g in curves.group_by("batch_size", "configured_L"):
        _assert_two_unit_ratio_row(SESSION_1204F, g, records, B, L, level="engine_replicate", windows=8)
    b1l6 = curves.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 6)).row(0, named=True)
    b32l6 = curves.filter((pl.col("batch_size") == 32) & (pl.col("configured_L") == 6)).row(0, named=True)
    assert b1l6["energy_ratio_ci_high"] < 1 < b32l6["energy_ratio_ci_low"]  # pays at B 1, not at B 32
    summary = pl.read_parquet(SPREAD_1204F / "results" / "curves_summary.parquet").filter(
        pl.col("method") != "baseline"
    )
    marked = {(r["batch_size"], r["configured_L"]): r["failed_checks"] for r in summary.iter_rows(named=True)}
    assert all(marked[(1, L)] == ["baseline_drift"] and marked[(32, L)] == [] for L in (1.0, 3.0, 6.0))


def _round_regression(curves: pl.DataFrame) -> tuple[int, float, float]:
    """Within each (B, L), ln(energy ratio) against ln(round time), both centred on the configuration's mean: the
    number of windows, the correlation and the slope (ADR 0096 addenda 7 and 8)."""
    pts = curves.with_columns(
        (pl.col(c).log() - pl.col(c).log().mean().over("batch_size", "configured_L")).alias(f"d_{c}")
        for c in ("energy_ratio", "round_time_ms")
    )
    x, y = pts["d_round_time_ms"].to_numpy(), pts["d_energy_ratio"].to_numpy()
    return len(x), float(np.corrcoef(x, y)[0, 1]), float(np.polyfit(x, y, 1)[0])


def test_1204f_the_round_time_explains_the_window_spread_and_the_boards_cancel_in_the_ratio():
    n, corr, slope = _round_regression(
        pl.read_parquet(SPREAD_1204F / "results" / "curves.parquet").filter(pl.col("method") != "baseline")
    )
    readme = _readme_text(SESSION_1204F)
    assert n == 48 and corr**2 > 0.8 and 0 < slope < 1
    assert f"**{100 * corr**2:.0f} %** of the variance" in readme
    assert f"(48 windows; correlation {corr:.2f}, slope {slope:.2f})" in readme
    adr = " ".join((ROOT / "docs" / "adr" / "0096-why-a-vllm-draft-model-round-takes-30-ms.md").read_text().split())
    assert "**Addendum 7 (2026-12-04f" in adr
    assert f"explains {100 * corr**2:.0f} % of the variance of ln(energy ratio) (correlation {corr:.2f}" in adr
    records = pl.read_parquet(SPREAD_1204F / "results" / "records.parquet")
    base = records.filter((pl.col("role") != "point") & (pl.col("batch_size") == 1))
    by_rep = {rep: g for (rep,), g in base.group_by("engine_replicate")}
    w0, w1 = by_rep[0]["mean_power_w"].mean(), by_rep[1]["mean_power_w"].mean()
    mj0, mj1 = by_rep[0]["mj_per_committed_token"].mean(), by_rep[1]["mj_per_committed_token"].mean()
    assert f"drew {w0:.0f} W, this one {w1:.0f} W" in readme
    assert f"cost {mj0:,.0f} against {mj1:,.0f} mJ/token ({100 * (mj1 / mj0 - 1):.1f} %)".replace("-", "−") in readme
    cmp = pl.read_parquet(SPREAD_1204F / "results" / "compare_r1_vs_r0.parquet")
    assert cmp.height == 6 and cmp["reproduces"].all()
    assert (cmp["shift_ci_low"] < 0).all() and (cmp["shift_ci_high"] > 0).all()
    lo, hi = cmp["shift"].min(), cmp["shift"].max()
    assert f"shifts from {100 * lo:.1f} % to {100 * hi:+.1f} %".replace("-", "−") in readme
    ref = pl.read_parquet(SPREAD_1204F / "results" / "compare_reference.parquet")
    assert ref.height == 6 and not ref["reproduces"].any() and (ref["shift"] < 0).all()
    assert f"ratio is {-100 * ref['shift'].max():.0f}–{-100 * ref['shift'].min():.0f} % below today's" in readme


def _budget_table_is_the_readme_s(session: Path, folder: Path, family: str) -> dict[str, dict]:
    """A spread session's variance budget (energy ratio) by component, each of the README's four rows checked
    against it (share and CV); returns the components for the session's own assertions."""
    table = pl.read_parquet(folder / "results" / "variance.parquet")
    ratio = table.filter((pl.col("family") == family) & (pl.col("metric") == "energy_ratio"))
    comp = {r["component"]: r for r in ratio.iter_rows(named=True)}
    for name, label in (
        ("board", "| board (includes run and engine restart"),
        ("seed", "| seed |"),
        ("window", "| window |"),
        ("total", "| total |"),
    ):
        line = _readme_line_in(session, label)
        assert line.endswith(f"| {comp[name]['share']:.0%} | {comp[name]['cv_percent']:.1f} % |".replace("%", " %", 1))
    return comp


def test_1204f_variance_budget_and_the_0928_vs_0759_shift_are_the_readme_s():
    comp = _budget_table_is_the_readme_s(SESSION_1204F, SPREAD_1204F, "vllm-qwen3b-closed-cg1")
    assert comp["total"]["n_observations"] == 54 and "board" in comp["board"]["includes"]
    readme = _readme_text(SESSION_1204F)
    assert comp["window"]["share"] > comp["board"]["share"] > comp["seed"]["share"]  # windows first, then boards
    board, window, total = comp["board"]["variance"], comp["window"]["variance"], comp["total"]["variance"]
    mean_sd = (board / 2 + window / 8) ** 0.5
    assert f"standard deviation of {100 * mean_sd:.1f} %" in readme and f"±{196 * mean_sd:.1f} % at 95 %" in readme
    curves = pl.read_parquet(SPREAD_1204F / "results" / "curves.parquet")
    b1l6 = curves.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 6)).row(0, named=True)
    mean, low, high = b1l6["energy_ratio_mean"], b1l6["energy_ratio_ci_low"], b1l6["energy_ratio_ci_high"]
    assert 0.759 < low < high < 0.928  # the two earlier single windows, one on either side of the range
    band = (mean * np.exp(-1.96 * total**0.5), mean * np.exp(1.96 * total**0.5))
    assert band[0] < 0.759 < 0.928 < band[1]  # both inside one window's band on one board
    assert f"= {band[0]:.3f}–{band[1]:.3f}×)" in readme
    z = np.log(0.928 / 0.759) / (2 * total) ** 0.5
    assert z < 1.96 and f"**{z:.2f} standard deviations**" in readme
    adr = " ".join((ROOT / "docs" / "adr" / "0081-intervals-over-the-highest-replicate-level.md").read_text().split())
    half = (high - low) / 2 / mean
    assert f"[{low:.3f}, {high:.3f}]: the two replicates' paired ratios of means, ±{100 * half:.1f} %" in adr
    assert f"at {100 * mean_sd:.1f} % on the log scale, ±{196 * mean_sd:.1f} % at 95 %" in adr


# --- session-2026-12-04g: the spread campaign's SGLang engine replicate 0, on the SGLang site alone (issue 17) ---
SESSION_1204G = ROOT / "validation" / "h200-2026-12" / "session-2026-12-04g"
SPREAD_1204G = SESSION_1204G / "spread-sglang-r0"
GPU_1204G = "GPU-ee3729f3-f3e0-707b-4478-8312f077d0e1"
REFERENCE_1201B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-01b" / "results" / "cells"


def _sglang_1204g(frame: pl.DataFrame, column: str = "engine") -> pl.DataFrame:
    return frame.filter(pl.col(column).str.starts_with("sglang"))


def test_1204g_config_is_the_preregistered_one_plus_allow_failed_checks():
    run, analysis = _run_and_analysis_configs(SPREAD_1204G, "h200-spread.yaml")
    assert analysis["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in run["checks"]
    assert analysis == run  # no threshold, window, seed or replicate count changed
    # the same analysis copy as 2026-12-04f's, comments aside
    assert yaml.safe_load((SPREAD_1204F / "config-analysis.yaml").read_text()) == yaml.safe_load(
        (SPREAD_1204G / "config-analysis.yaml").read_text()
    )


def test_1204g_the_sglang_site_alone_passed_its_measurement_path_check_and_ran_the_family():
    log = logtext.read_log(SESSION_1204G / "device-logs" / "install-sglang-alone.log.gz")
    assert "MEASUREMENT PATH: OK" in log and "/tmp/site-sglang" in log and "/tmp/site/" not in log
    installed = next(ln for ln in log.splitlines() if ln.startswith("install_bundle: installed in "))
    seconds = installed.removeprefix("install_bundle: installed in ").split(" s;")[0]
    adr = " ".join(
        (ROOT / "docs" / "adr" / "0235-an-sglang-session-carries-the-sglang-bundle-alone.md").read_text().split()
    )
    assert f"(`installed in {seconds} s`;" in adr
    calls = (SESSION_1204G / "device-logs" / "commands.txt").read_text()
    family_call = next(ln for ln in calls.splitlines() if "gated_families.sh" in ln and not ln.startswith("#"))
    assert "SITE_ENV=/tmp/site-sglang/specjoule-env.sh" in family_call and "source /tmp/site/" not in family_call
    assert "'config/h200-spread.yaml sglang-qwen3b-closed-cg1 1518'" in family_call  # PLAN.md's gate
    assert "| 1,518 s (1.2 × the plan" in " ".join((SESSION_1204G / "PLAN.md").read_text().split())


def test_1204g_sglang_replicate_0_is_whole_on_one_board_and_the_verdict_is_the_readme_s():
    df, checks = _verdict(
        SPREAD_1204G, "config-analysis.yaml", replicated=True, cells_also_in=(SPREAD_1202E, SPREAD_1204F)
    )
    sglang = _sglang_1204g(df)
    assert df.height == 116 and sglang.height == 40 and (df["energy_j"] > 0).all()
    assert set(sglang["gpu_uuid"]) == {GPU_1204G} and GPU_1204G not in set(
        df.filter(pl.col("engine") == "vllm")["gpu_uuid"]
    )
    assert sglang["engine_instance"].n_unique() == 5  # opening, one per L, closing: SGLang swaps no acceptance in place
    assert set(sglang["engine_replicate"]) == {0}
    failed = checks.filter(pl.col("status") == "fail")
    assert failed["check"].to_list() == ["baseline_drift"]  # vLLM's, from 2026-12-04f: it stays failed
    assert failed["campaign_id"].to_list() == ["vllm-qwen3b-closed-b1-random-s0-cg1-r1"]
    committed = (SPREAD_1204G / "results" / "checks.md").read_text()
    assert "1 fail, 48 flag, 227 pass, 48 not_applicable" in committed and "`allow_failed_checks` = True" in committed
    table = _sglang_1204g(pl.read_parquet(SPREAD_1204G / "results" / "checks.parquet"), "campaign_id")
    counts = dict(table.group_by("status").len().iter_rows())
    assert counts == {"pass": 76, "flag": 16, "not_applicable": 16}
    assert set(table.filter(pl.col("status") == "flag")["check"]) == {
        "preregistration",
        "engine_config_matched",
        "reproduces_reference",
        "model_residual",
    }
    readme = _readme_text(SESSION_1204G)
    assert "**Verdict: 1 fail, 48 flag, 227 pass, 48 not applicable**" in readme
    assert "**The four SGLang campaigns: 0 fail, 16 flag, 76 pass, 16 not applicable**" in readme
    drift = _sglang_1204g(checks.filter(pl.col("check") == "baseline_drift"), "campaign_id")
    values = dict(zip(drift["campaign_id"], drift["value"]))
    order = ["b1-random-s0", "b1-random-s1", "b32-random-s0", "b32-random-s1"]
    cells = [f"{100 * values[f'sglang-qwen3b-closed-{o}-cg1']:.2f} %" for o in order]
    assert (
        _readme_line_in(SESSION_1204G, "| SGLang replicate 0 |") == "| SGLang replicate 0 | " + " | ".join(cells) + " |"
    )
    assert max(values.values()) < 0.02
    points = sglang.filter(pl.col("role") == "point")
    assert (points["realized_L"] == points["configured_L"]).all()
    by_start = sglang.sort("window_start").unique("engine_instance", keep="first", maintain_order=True)
    starts = [f"{s:.1f}" for s in by_start["engine_start_s"]]
    assert f"({starts[0]} s cold, then {starts[1]}, {starts[2]}, {starts[3]} and {starts[4]} s)" in readme
    # the model_residual numbers the README quotes, per engine and batch size
    curves = pl.read_parquet(SPREAD_1204G / "results" / "curves.parquet").filter(pl.col("method") != "baseline")
    res = {k: g["residual"] for k, g in curves.group_by("engine", "batch_size")}
    assert f"{100 * res[('sglang', 1)].min():.0f}–{100 * res[('sglang', 1)].max():.0f} % more at B = 1" in readme
    assert f"{100 * res[('sglang', 32)].min():.0f}–{100 * res[('sglang', 32)].max():.0f} % more at B = 32" in readme
    sg_res = pl.concat([res[("sglang", 1)], res[("sglang", 32)]])
    assert f"past the 25 % threshold in {int((sg_res > 0.25).sum())} of {sg_res.len()}" in readme
    vl_res = pl.concat([res[("vllm", 1)], res[("vllm", 32)]])
    assert (vl_res > 0.25).all() and vl_res.len() == 48
    assert f"{100 * vl_res.min():.0f}–{100 * vl_res.max():.0f} % more than predicted" in readme


def test_1204g_ratio_table_is_the_curves_over_two_seeds_and_the_round_explains_the_windows():
    curves = _sglang_1204g(pl.read_parquet(SPREAD_1204G / "results" / "curves.parquet")).filter(
        pl.col("method") != "baseline"
    )
    records = _sglang_1204g(pl.read_parquet(SPREAD_1204G / "results" / "records.parquet"))
    for (B, L), g in curves.group_by("batch_size", "configured_L"):
        _assert_two_unit_ratio_row(SESSION_1204G, g, records, B, L, level="seed", windows=4)
        # L 6 pays and L 3 costs, at both batch sizes, every window
        if L == 6:
            assert g["energy_ratio"].max() < 1
        if L == 3:
            assert g["energy_ratio"].min() > 1
    n, corr, slope = _round_regression(curves)
    readme = _readme_text(SESSION_1204G)
    assert n == 24 and corr**2 > 0.8 and 0 < slope < 1
    assert f"explains **{100 * corr**2:.0f} %** of the variance" in readme
    assert f"(24 windows; correlation {corr:.2f}, slope {slope:.2f})" in readme
    adr = " ".join((ROOT / "docs" / "adr" / "0096-why-a-vllm-draft-model-round-takes-30-ms.md").read_text().split())
    assert "**Addendum 8 (2026-12-04g" in adr
    assert (
        f"explains {100 * corr**2:.0f} % of the variance of ln(energy ratio) (correlation {corr:.2f}, slope {slope:.2f})"
        in adr
    )
    rounds = curves["round_time_ms"]
    busy = records.filter(pl.col("role") == "point")["gpu_busy_fraction"]
    assert (
        f"between {rounds.min():.1f} and {rounds.max():.1f} ms" in adr and f"{busy.min():.2f}–{busy.max():.2f}" in adr
    )
    # against vLLM: each engine's ratio to its own boards' baselines
    summary = pl.read_parquet(SPREAD_1204G / "results" / "curves_summary.parquet").filter(
        pl.col("method") != "baseline"
    )
    mean = {
        (r["engine"], r["batch_size"], r["configured_L"]): r["energy_ratio_mean"] for r in summary.iter_rows(named=True)
    }
    rel = {(B, L): mean[("sglang", B, L)] / mean[("vllm", B, L)] for B in (1, 32) for L in (1.0, 3.0, 6.0)}
    assert max(rel.values()) < 0.8
    assert f"SGLang's ratio is {min(rel.values()):.3f}–{max(rel.values()):.3f} of vLLM's" in readme
    for B in (1, 32):
        assert f"B = {B}: " + ", ".join(f"{rel[(B, L)]:.3f}" for L in (1.0, 3.0, 6.0)) in readme


def test_1204g_sglang_variance_budget_and_the_reference_comparison_are_the_readme_s():
    comp = _budget_table_is_the_readme_s(SESSION_1204G, SPREAD_1204G, "sglang-qwen3b-closed-cg1")
    assert comp["total"]["n_observations"] == 30 and "engine_restart" in comp["board"]["includes"]
    readme = _readme_text(SESSION_1204G)
    board, window, total = comp["board"]["variance"], comp["window"]["variance"], comp["total"]["variance"]
    mean_sd = (board / 1 + window / 4) ** 0.5
    assert (
        f"a standard deviation of {100 * mean_sd:.1f} %" in readme and f"**±{196 * mean_sd:.1f} % at 95 %**" in readme
    )
    summary = _sglang_1204g(pl.read_parquet(SPREAD_1204G / "results" / "curves_summary.parquet"))
    at = {(r["batch_size"], r["configured_L"]): r["energy_ratio_mean"] for r in summary.iter_rows(named=True)}

    def band(m: float) -> tuple[float, float]:
        return m * float(np.exp(-1.96 * mean_sd)), m * float(np.exp(1.96 * mean_sd))

    (lo1, hi1), (lo32, hi32), (lo3, hi3) = band(at[(1, 6.0)]), band(at[(32, 6.0)]), band(at[(1, 3.0)])
    assert hi1 < 1 and hi32 < 1 and lo3 > 1  # L 6 pays, L 3 costs, at the budget's width
    assert f"(B = 1: {lo1:.3f}–{hi1:.3f}×; B = 32: {lo32:.3f}–{hi32:.3f}×)" in readme
    assert f"at B = 1 ({lo3:.3f}–{hi3:.3f}×)" in readme
    # the reference comparison, re-derived from the records of both folders
    cmp = compare_evidence.compare_sources(SPREAD_1204G / "results" / "cells", REFERENCE_1201B)
    committed = pl.read_parquet(SPREAD_1204G / "results" / "compare_reference_sglang.parquet")
    assert committed.height == 6 and int(committed["reproduces"].sum()) == 3
    key = ["batch_size", "configured_L"]
    assert cmp.sort(key)["shift"].to_list() == pytest.approx(committed.sort(key)["shift"].to_list(), rel=1e-9)
    assert cmp.sort(key)["reproduces"].to_list() == committed.sort(key)["reproduces"].to_list()
    shifts = committed["shift"]
    assert f"{-100 * shifts.filter(shifts < 0).max():.1f}–{-100 * shifts.min():.1f} % below today's" in readme
    assert f"{100 * shifts.max():.1f} % above in one" in readme
    l3 = committed.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 3)).row(0, named=True)
    assert not l3["reproduces"] and l3["energy_ratio_b"] < 1 < l3["energy_ratio_a"]
    z = np.log(l3["energy_ratio_a"] / l3["energy_ratio_b"]) / (2 * total) ** 0.5
    assert z < 1.96 and f"**{z:.2f} standard deviations**" in readme
    ref = pl.concat([packed.read_frame(p) for p in packed.tree_files(REFERENCE_1201B, "sglang*/*.parquet")], how="diagonal_relaxed")
    ours = _sglang_1204g(pl.read_parquet(SPREAD_1204G / "results" / "records.parquet"))

    def base_b1(frame: pl.DataFrame, column: str) -> float:
        return frame.filter((pl.col("role") != "point") & (pl.col("batch_size") == 1))[column].mean()

    assert (
        f"drew {base_b1(ref, 'mean_power_w'):.0f} W at B = 1 against {base_b1(ours, 'mean_power_w'):.0f} W here"
        in readme
    )
    assert f"(+{100 * (l3['baseline_mj_b'] / l3['baseline_mj_a'] - 1):.1f} %;" in readme

    def round_l3(frame: pl.DataFrame) -> float:
        return frame.filter((pl.col("batch_size") == 1) & (pl.col("configured_L") == 3))["round_time_ms"].mean()

    assert f"({round_l3(ours):.2f} against {round_l3(ref):.2f} ms" in readme


# --- validation/h100-2026-12: evidence on the seeds' board class (ADR 0241) ----------------------------------------

SESSION_1205D_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-05d"
GPU_1205D = "GPU-e4e5be69-60f7-3a97-371e-2becc874f142"
MLA_1205D = SESSION_1205D_H100 / "depth-mla-sglang"
BREADTH_1203B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-03b" / "families-sglang"


def _ratios_to_mean_baseline(df: pl.DataFrame) -> dict[tuple[int, float], float]:
    """{(B, L): point mJ/token over the mean of that batch size's opening and closing baselines}, from records."""
    out = {}
    for (batch,), g in df.group_by("batch_size"):
        base = g.filter(pl.col("role").is_in(["opening_baseline", "closing_baseline"]))["mj_per_committed_token"].mean()
        for L, mj in g.filter(pl.col("role") == "point").select("configured_L", "mj_per_committed_token").iter_rows():
            out[(batch, L)] = mj / base
    return out


def test_1205d_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(MLA_1205D, "h200-schemes-depth-mla.yaml")


def _h100_depth_family(evidence_dir: Path, session: Path, config_name: str, gpu_uuid: str,
                       pair: str, engine: str = "sglang",
                       summary: str = "0 fail, 4 flag, 38 pass, 12 not_applicable",
                       committed_flags: frozenset = frozenset({"engine_config_matched", "model_residual"}),
                       arm: str = "EAGLE3", cells: int = 10) -> pl.DataFrame:
    """An H100 depth family (EAGLE3 L = 1, 3, 4 at B = 1 and 32, both baselines, unless ``arm`` and ``cells`` say
    another; SGLang unless ``engine`` says) whole, its verdict re-derived (0 fail; the roofline's model_residual flags
    only in the committed one), and its README's drift phrase and table rows the records: each ratio over the mean of
    its two baselines, as the curves compute it, and the round column beside each ratio (the B = 32 below-the-floor
    readings rest on it). Returns the points."""
    df, checks = _verdict(evidence_dir, config_name)
    assert df.height == cells and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {gpu_uuid}
    assert df["gpu_names"].to_list() == [["NVIDIA H100 80GB HBM3"]] * cells  # the board class the README names
    assert set(df["engine"]) == {engine} and set(df["batch_size"]) == {1, 32}
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    # the pipeline's verdict adds the roofline's flags (model_residual reads the roofline table, not re-derived here)
    committed = pl.read_parquet(evidence_dir / "results" / "checks.parquet")
    assert set(committed.filter(pl.col("status") == "flag")["check"]) == committed_flags
    assert committed.filter(pl.col("status") == "fail").height == 0
    assert summary in (evidence_dir / "results" / "checks.md").read_text()
    points = df.filter(pl.col("role") == "point")
    assert (points["realized_L"] - points["configured_L"]).abs().max() < 1e-9
    drift = dict(checks.filter(pl.col("check") == "baseline_drift").select("campaign_id", "value").iter_rows())
    b1, b32 = (drift[f"{engine}-{pair}-closed-b{b}-random-s0-cg1"] for b in (1, 32))
    assert f"{100 * b1:.2f} % apart at B = 1, {100 * b32:.2f} % at B = 32" in _readme_text(session)
    ratios = _ratios_to_mean_baseline(df)
    curves = pl.read_parquet(evidence_dir / "results" / "curves.parquet")
    for batch, L, ratio in curves.select("batch_size", "configured_L", "energy_ratio").iter_rows():
        assert ratio == pytest.approx(ratios[(batch, L)], rel=1e-9)
    lines = (session / "README.md").read_text().splitlines()
    rounds = {(b, L): r for b, L, r in points.select("batch_size", "configured_L", "round_time_ms").iter_rows()}
    for (batch, L), ratio in ratios.items():
        row = next(ln for ln in lines if ln.startswith(f"| {batch} | {arm} L = {L:.0f} |"))
        assert f"**{ratio:.3f}×**" in row and f"| {rounds[(batch, L)]:.2f} |" in row, row
    return points


def _engine_starts(evidence_dir: Path) -> set[float]:
    """The engine starts of a committed run's records, to 0.1 s (as its README quotes them)."""
    cells = _aggregated(packed.tree_files(evidence_dir / "results" / "cells"))
    return {round(s, 1) for s in cells["engine_start_s"]}


def test_1205d_h100_mla_depth_family_is_whole_and_the_readme_table_is_the_records():
    _h100_depth_family(MLA_1205D, SESSION_1205D_H100, "h200-schemes-depth-mla.yaml", GPU_1205D, "glm47_flash")


def test_1205d_h100_and_the_h200_breadth_run_differ_only_in_the_board_class_and_are_never_paired():
    """compare_evidence pairs no cell across classes (gpu_names is measured, ADR 0241); read side by side, the
    README's H200 ratios are 2026-12-03b's records and every other measured parameter is the same."""
    paired = compare_evidence.compare_sources(MLA_1205D / "results" / "cells", BREADTH_1203B / "results" / "cells")
    assert paired.height == 0
    h100, h200 = (_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet"))
                  for f in (MLA_1205D, BREADTH_1203B))
    h200 = h200.filter(pl.col("campaign_id") == "sglang-glm47_flash-closed-b1-random-s0-cg1",
                       pl.col("status") == "measured")
    for name in ("eagle3--mv1", "eagle3--mv4"):
        a, b = (f.filter(pl.col("cell_name") == name, pl.col("batch_size") == 1) for f in (h100, h200))
        differ = [k for k in evidence.MEASURED_KEY if a[k].to_list() != b[k].to_list()]
        assert differ == ["gpu_names"], (name, differ)
    readme = _readme_text(SESSION_1205D_H100)
    for (_, L), ratio in _ratios_to_mean_baseline(h200).items():
        assert f"L = {L:.0f} **{ratio:.3f}×**" in readme, (L, ratio)


# bf16 bytes of one routed expert in each of Qwen3-30B-A3B's 48 layers (published shape: hidden 2048, expert 768)
QWEN3_30B_EXPERT_BYTES = 48 * 3 * 2048 * 768 * 2


def _qwen3_30b_floor_ms(batch_size: int, verified_per_request: int, hbm_bytes_per_s: float) -> float:
    """ADR 0242's floor from the published shape alone: expected distinct experts of 128 (top 8) a pass over
    B · verified tokens reaches under uniform routing, read once at the board's HBM ceiling."""
    tokens = batch_size * verified_per_request
    return 1e3 * QWEN3_30B_EXPERT_BYTES * 128 * (1 - (1 - 8 / 128) ** tokens) / hbm_bytes_per_s


SESSION_1205E_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-05e"
MOE_1205E = SESSION_1205E_H100 / "depth-moe-sglang"


def test_1205e_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(MOE_1205E, "h200-schemes-depth-moe.yaml")


def test_1205e_h100_moe_depth_family_is_whole_and_the_readme_table_is_the_records():
    _h100_depth_family(MOE_1205E, SESSION_1205E_H100, "h200-schemes-depth-moe.yaml",
                       "GPU-86cacde5-519a-5750-1e49-851f70a81f90", "qwen3_30b_a3b")


def test_1205e_the_l1_round_at_b32_is_below_its_routed_expert_floor_and_the_readme_and_report_say_so():
    """ADR 0242 on this run: the floor re-derived from the records, the shape and the board's calibration (not
    read from the committed tables) puts B = 32, L = 1 alone below it; the committed curves and report agree."""
    records = _aggregated(packed.tree_files(MOE_1205E / "results" / "cells", "*/*.parquet"))
    cal = json.loads(next((MOE_1205E / "results" / "hardware").glob("*.json")).read_text())
    hbm = cal["constants"]["hbm_bytes_per_s"]
    routed = QWEN3_30B_EXPERT_BYTES
    below = {}
    for r in records.iter_rows(named=True):
        floor_ms = _qwen3_30b_floor_ms(r["batch_size"], 4 if r["role"] == "point" else 1, hbm)  # k 3: four verified
        below[(r["batch_size"], r["cell_name"])] = r["round_time_ms"] < floor_ms
        if (r["batch_size"], r["cell_name"]) == (32, "eagle3--mv1"):
            l1 = (r["round_time_ms"], floor_ms)
    assert [k for k, v in below.items() if v] == [(32, "eagle3--mv1")]
    readme = _readme_text(SESSION_1205E_H100)
    assert f"Its round, {l1[0]:.2f} ms" in readme and f"**{l1[1]:.2f} ms**" in readme
    assert f"({routed * 128 / 1e9:.1f} GB)" in readme and f"({hbm / 1e12:.2f} TB/s)" in readme
    curves = pl.read_parquet(MOE_1205E / "results" / "curves.parquet")
    assert dict(curves.filter(pl.col("below_expert_floor")).select("batch_size", "cell_name").iter_rows()) == {
        32: "eagle3--mv1"}
    assert curves["expert_floor_ms"].to_list() == pytest.approx(
        [_qwen3_30b_floor_ms(b, 4, hbm) for b in curves["batch_size"]], rel=1e-6)
    (caveat,) = render.expert_routing_caveats(curves, ["qwen3_30b_a3b"])
    assert "eagle3--mv1 in sglang-qwen3_30b_a3b-closed-b32-random-s0-cg1" in caveat.text
    report = slim_evidence.read_report(MOE_1205E / "results" / "report.html.gz")
    assert "MoE rounds shorter than the board" in report and "(ADR 0242)" in report
    # roofline.routed_expert_bytes is the same count from the shape file
    shape = roofline.models_lookup("config/models/qwen3-30b-a3b", "target")
    assert roofline.routed_expert_bytes(shape, 1e9) == pytest.approx(routed * 128, rel=1e-6)


def _below_floor(folder: Path) -> dict[tuple[str, int, str], bool]:
    """{(model pair, B, cell): round below its routed-expert floor} over a folder's records, its board's own
    calibration and the shipped shapes (ADR 0242); MoE cells only."""
    records = _aggregated(packed.tree_files(folder / "results" / "cells", "*/*.parquet"))
    records = records.filter(pl.col("status").is_null() | (pl.col("status") == "measured"))
    calibrations = roofline.load_calibrations(str(folder / "results" / "hardware"))
    modelled = roofline.model_cells(records, roofline.models_lookup, calibrations, resamples=0).cells
    modelled = modelled.filter(pl.col("below_expert_floor").is_not_null())
    return {(p, b, c): v for p, b, c, v in modelled.select("model_pair", "batch_size", "cell_name",
                                                            "below_expert_floor").iter_rows()}


def test_the_routed_expert_floor_over_the_committed_moe_evidence_is_what_adr_0242_says():
    """The ADR's list: GLM-4.7-Flash (SGLang, H100) below at B = 32 in every arm, gemma-4-26B-A4B's vLLM baselines
    below at B = 16, 32, 64 but not its EAGLE3 points, Qwen3-30B-A3B on vLLM nowhere, nothing below at B = 1."""
    glm = _below_floor(MLA_1205D)
    assert {k for k, v in glm.items() if v} == {k for k in glm if k[1] == 32} and len(glm) == 10
    gemma = _below_floor(ROOT / "validation" / "h200-2026-12" / "session-2026-12-02d" / "gemma4")
    assert {(b, c) for (_, b, c), v in gemma.items() if v} == {
        (16, "baseline--open"), (32, "baseline--open"), (32, "baseline--close"), (64, "baseline--open")}
    assert {(b, c) for (_, b, c) in gemma if b == 32} >= {(32, "eagle3--mv1"), (32, "eagle3--mv4")}
    qwen_vllm = _below_floor(ROOT / "validation" / "h200-2026-12" / "session-2026-12-02" / "families")
    assert qwen_vllm and not any(qwen_vllm.values()) and max(b for _, b, _ in qwen_vllm) == 64
    assert not any(v for (_, b, _), v in {**glm, **gemma, **qwen_vllm}.items() if b == 1)
    adr = " ".join((ROOT / "docs" / "adr" / "0242-the-routed-expert-floor-moe-routing-on-dummy-weights.md")
                   .read_text().split())
    assert "**all five B = 32 cells of GLM-4.7-Flash on SGLang**" in adr
    assert "**gemma-4-26B-A4B's vLLM baselines at B = 16, 32 and 64**" in adr


SESSION_1205F_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-05f"
TOKEN_1205F = SESSION_1205F_H100 / "moe-token-mode"
VLLM_MOE_1205F = SESSION_1205F_H100 / "depth-moe-vllm"
GPU_1205F = "GPU-6c50f189-d866-c079-dba9-592e74a0e508"
def test_1205f_h100_configs_are_the_preregistered_ones():
    _assert_shipped_copy(TOKEN_1205F, "h200-moe-token-mode.yaml")
    _assert_shipped_copy(VLLM_MOE_1205F, "h200-schemes-depth-moe.yaml")


def test_1205f_the_token_mode_ab_is_whole_and_its_registered_reading_rule_says_the_mode_sets_the_round():
    """ADR 0244: the header's rule re-derived from the records, the engines' own reported token mode and the board's
    calibration: real-draft-token's round >= 1.5 x fixed's, above the floor where fixed's is below."""
    df, checks = _verdict(TOKEN_1205F, "h200-moe-token-mode.yaml")
    assert df.height == 3 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {GPU_1205F} and set(df["engine"]) == {"sglang"} and set(df["batch_size"]) == {32}
    assert checks.filter(pl.col("status") == "fail").height == 0
    committed = pl.read_parquet(TOKEN_1205F / "results" / "checks.parquet")
    assert committed.filter(pl.col("status") == "fail").height == 0
    residual = committed.filter(pl.col("check") == "model_residual", pl.col("status") == "flag")
    assert residual["cell_names"].to_list() == [["eagle3_fixed--mv1"]]
    assert "0 fail, 2 flag, 18 pass, 7 not_applicable" in (TOKEN_1205F / "results" / "checks.md").read_text()
    by = {r["cell_name"]: r for r in df.iter_rows(named=True)}
    modes = {n: json.loads(r["engine_config"])["speculative_simulate_acc_token_mode"] for n, r in by.items()
             if r["role"] == "point"}
    assert modes == {"eagle3_fixed--mv1": "fixed", "eagle3_rt--mv1": "real-draft-token"}  # what each engine ran
    assert all(r["realized_L"] == 1.0 for r in by.values())
    cal = json.loads(next((TOKEN_1205F / "results" / "hardware").glob("*.json")).read_text())
    floor = _qwen3_30b_floor_ms(32, 4, cal["constants"]["hbm_bytes_per_s"])
    fixed, rt, base = (by[n] for n in ("eagle3_fixed--mv1", "eagle3_rt--mv1", "baseline--open"))
    assert rt["round_time_ms"] >= 1.5 * fixed["round_time_ms"] and fixed["round_time_ms"] < floor <= rt["round_time_ms"]
    readme, adr = _readme_text(SESSION_1205F_H100), " ".join(
        (ROOT / "docs" / "adr" / "0244-the-token-mode-ab-sglangs-fixed-token-sets-the-moe-l1-round.md").read_text()
        .split())
    ratio = rt["round_time_ms"] / fixed["round_time_ms"]
    assert f"**{ratio:.2f} ×** `fixed`'s" in readme and f"**{ratio:.2f} ×** `fixed`'s" in adr
    for name, r in (("`fixed`", fixed), ("`real-draft-token`", rt)):
        e = r["mj_per_committed_token"] / base["mj_per_committed_token"]
        below = "**yes**" if r["round_time_ms"] < floor else "no"
        assert (f"| EAGLE3 {name} | {r['round_time_ms']:.2f} | {floor:.2f} | {below} | "
                f"{r['mj_per_committed_token']:.1f} | **{e:.3f}×** |") in readme, name
        assert f"| {name} | {r['round_time_ms']:.2f} ms | {floor:.2f} ms |" in adr, name
    # the other H100's fixed-mode round (2026-12-05e) within the README's 0.3 %
    then = _aggregated(packed.tree_files(MOE_1205E / "results" / "cells", "*b32*/eagle3--mv1.parquet"))
    shift = abs(fixed["round_time_ms"] / then["round_time_ms"][0] - 1)
    assert f"to {100 * shift:.1f} %" in readme and then["gpu_uuid"][0] != GPU_1205F


def test_1205f_h100_vllm_moe_depth_family_is_whole_and_the_readme_table_is_the_records():
    _h100_depth_family(VLLM_MOE_1205F, SESSION_1205F_H100, "h200-schemes-depth-moe.yaml", GPU_1205F,
                       "qwen3_30b_a3b", engine="vllm", summary="0 fail, 2 flag, 40 pass, 12 not_applicable",
                       committed_flags=frozenset({"engine_config_matched"}))
    cal = json.loads(next((VLLM_MOE_1205F / "results" / "hardware").glob("*.json")).read_text())
    hbm = cal["constants"]["hbm_bytes_per_s"]
    for b, role, rnd in _aggregated(packed.tree_files(VLLM_MOE_1205F / "results" / "cells", "*/*.parquet")).select(
            "batch_size", "role", "round_time_ms").iter_rows():
        assert rnd > _qwen3_30b_floor_ms(b, 4 if role == "point" else 1, hbm)  # "every round is above its floor"
    curves = pl.read_parquet(VLLM_MOE_1205F / "results" / "curves.parquet")
    assert curves["below_expert_floor"].to_list() == [False] * 6


def test_1205f_the_two_engines_at_matched_token_streams_on_one_board_and_the_h200_side_by_side():
    """The README's same-board comparison (B = 32, L = 1) and its H200 numbers are the records'; compare_evidence
    pairs nothing across board classes, and only gpu_names differs among the measured parameters it reads."""
    tok = {r["cell_name"]: r for r in _aggregated(packed.tree_files(TOKEN_1205F / "results" / "cells",
        "*/*.parquet")).iter_rows(named=True)}
    h100 = _aggregated(packed.tree_files(VLLM_MOE_1205F / "results" / "cells", "*/*.parquet"))
    assert set(h100["gpu_uuid"]) == {tok["baseline--open"]["gpu_uuid"]}  # one board
    ratios = _ratios_to_mean_baseline(h100)
    vllm_l1 = h100.filter(pl.col("batch_size") == 32, pl.col("cell_name") == "eagle3--mv1")
    rt = tok["eagle3_rt--mv1"]
    readme = _readme_text(SESSION_1205F_H100)
    rt_ratio = rt["mj_per_committed_token"] / tok["baseline--open"]["mj_per_committed_token"]
    gap = vllm_l1["round_time_ms"][0] / rt["round_time_ms"]
    assert (f"vLLM {vllm_l1['round_time_ms'][0]:.2f} ms and {ratios[(32, 1.0)]:.3f} ×, SGLang with `real-draft-token` "
            f"{rt['round_time_ms']:.2f} ms and {rt_ratio:.3f} × — rounds {100 * (gap - 1):.0f} % apart") in readme
    breadth = ROOT / "validation" / "h200-2026-12" / "session-2026-12-02" / "families"
    assert compare_evidence.compare_sources(VLLM_MOE_1205F / "results" / "cells", breadth / "results" / "cells"
                                            ).height == 0
    h200 = _aggregated(packed.tree_files(breadth / "results" / "cells", "vllm-qwen3_30b_a3b-*/*.parquet"))
    h200 = h200.filter(pl.col("batch_size").is_in([1, 32]))
    for name in ("eagle3--mv1", "eagle3--mv4", "baseline--open"):
        for b in (1, 32):
            a, c = (f.filter(pl.col("cell_name") == name, pl.col("batch_size") == b) for f in (h100, h200))
            assert [k for k in evidence.MEASURED_KEY if a[k].to_list() != c[k].to_list()] == ["gpu_names"]
    theirs = _ratios_to_mean_baseline(h200)
    assert (f"L = 1 **{theirs[(1, 1.0)]:.3f}×** / **{theirs[(32, 1.0)]:.3f}×** and L = 4 **{theirs[(1, 4.0)]:.3f}×** / "
            f"**{theirs[(32, 4.0)]:.3f}×** (B = 1 / B = 32)") in readme
    higher = [ratios[k] / theirs[k] - 1 for k in theirs]
    assert f"ratios are {100 * min(higher):.1f}–{100 * max(higher):.1f} % higher" in readme
    longer = h100.join(h200, on=["batch_size", "cell_name"]).select(
        pl.col("role"), (pl.col("round_time_ms") / pl.col("round_time_ms_right") - 1) * 100)
    pts = longer.filter(pl.col("role") == "point")["round_time_ms"]
    bases = longer.filter(pl.col("role") != "point")["round_time_ms"]
    assert (f"EAGLE3 rounds {pts.min():.0f}–{pts.max():.0f} % longer (its baselines' "
            f"{bases.min():.0f}–{bases.max():.0f} %)") in readme


def test_every_config_the_readme_says_ran_on_an_h100_has_its_h100_evidence():
    """A README config-table row that points at validation/h100-2026-12/ names a config whose byte-identical copy
    lies in an H100 evidence folder (a careless edit once gave a config that never ran an H100 row)."""
    copies = {p.name: p.read_bytes() for p in (ROOT / "validation" / "h100-2026-12").glob("session-*/*/*.yaml")}
    rows = [ln for ln in (ROOT / "README.md").read_text().splitlines()
            if ln.startswith("| `config/") and "validation/h100-2026-12/" in ln]
    assert rows  # the MLA depth family's row
    for row in rows:
        names = re.findall(r"`config/([^`]+\.yaml)`", row.split(" | ")[0])
        assert names, row
        for name in names:
            assert copies.get(name) == (ROOT / "config" / name).read_bytes(), (name, row[:120])


SESSION_1205G_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-05g"
SW_1205G = SESSION_1205G_H100 / "depth-sw-vllm"
GPU_1205G = "GPU-4f31f1ec-6d15-b1a3-4239-d273ab1aca13"


def test_1205g_h100_vllm_sliding_window_depth_family_is_whole_and_the_readme_table_is_the_records():
    """The first run whose records were committed packed (ADR 0246): read through their paths as before."""
    assert packed.is_packed(SW_1205G / "results" / "cells.parquet") and not (SW_1205G / "results" / "cells").exists()
    points = _h100_depth_family(SW_1205G, SESSION_1205G_H100, "h200-schemes-depth-sw.yaml", GPU_1205G,
                                "gemma4_26b_a4b", engine="vllm", summary="0 fail, 4 flag, 38 pass, 12 not_applicable")
    assert set(points["git_commit"]) == {"4f7c8d0902a0c5f73b87c790e954f7e6a30a8e1a"}
    # the README's below-the-floor paragraph is the roofline's table
    roof = pl.read_parquet(SW_1205G / "results" / "roofline.parquet")
    below = {(int(c.split("-closed-b")[1].split("-")[0]), n)
             for c, n in roof.filter(pl.col("below_expert_floor")).select("campaign_id", "cell_name").iter_rows()}
    assert below == {(32, "baseline--open"), (32, "baseline--close"), (32, "eagle3--mv1")}
    floors = sorted({round(f, 2) for f in roof.filter(pl.col("campaign_id").str.contains("-b32-"))["expert_floor_ms"]})
    text = _readme_text(SESSION_1205G_H100)
    assert floors == [12.95, 14.83] and "against 12.95 ms" in text and "13.37 against 14.83 ms" in text
    # the starts the README quotes
    assert sorted(_engine_starts(SW_1205G)) == [76.5, 129.2, 140.3] and "129.2 s cold, 140.3 s for the EAGLE3 engine, 76.5 s" in text


SESSION_1205H_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-05h"
RT_1205H = SESSION_1205H_H100 / "depth-moe-sglang-rt"
GPU_1205H = "GPU-6bc5af68-5903-0453-eda5-845d01edf015"


def test_1205h_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(RT_1205H, "h200-schemes-depth-moe-sglang-rt.yaml")


def test_1205h_h100_real_draft_token_companion_is_whole_and_the_readme_table_is_the_records():
    points = _h100_depth_family(RT_1205H, SESSION_1205H_H100, "h200-schemes-depth-moe-sglang-rt.yaml", GPU_1205H,
                                "qwen3_30b_a3b", summary="0 fail, 3 flag, 39 pass, 12 not_applicable")
    assert set(points["git_commit"]) == {"8ef92fe55efd45e1d0cc9252e8024eb697890e78"}
    # what each EAGLE3 engine itself reported running (ADR 0243), not what the config asked for
    assert {json.loads(c)["speculative_simulate_acc_token_mode"] for c in points["engine_config"]} == {
        "real-draft-token"}
    assert sorted(_engine_starts(RT_1205H), reverse=True) == [110.1, 67.3, 51.2, 47.2, 44.8]
    assert "110.1 s cold, then 67.3, 51.2, 47.2 and 44.8 s" in _readme_text(SESSION_1205H_H100)


def _token_mode_reading(apart: float) -> str:
    """The rule registered in the -rt configs' headers: >= 10 % apart changes the round, <= 5 % does not."""
    return "changes" if abs(apart) >= 0.10 else "does not change" if abs(apart) <= 0.05 else "not decided"


def test_1205h_the_registered_reading_rule_re_derived_from_both_families_records():
    """The header's rule (fixed 2026-12-05g): per B and L, rounds >= 10 % apart change, <= 5 % do not, between
    undecided, against 2026-12-05e's fixed-mode family on another H100; the A/B reproduces within 10 % of ADR 0244's
    real-draft-token arm (2026-12-05f, a third H100); every round at or above the floor re-derived from the shape and
    this board's own calibration. The README's column, verdicts and ratios are these numbers."""
    rt, fixed = (_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet"))
                 for f in (RT_1205H, MOE_1205E))
    assert set(rt["gpu_uuid"]) == {GPU_1205H} and set(fixed["gpu_uuid"]) != {GPU_1205H}
    assert set(rt["gpu_names"].explode()) == set(fixed["gpu_names"].explode()) == {"NVIDIA H100 80GB HBM3"}
    pairs = rt.join(fixed, on=["batch_size", "cell_name"], suffix="_fixed").filter(pl.col("role") == "point")
    assert pairs.height == 6
    readme = _readme_text(SESSION_1205H_H100)
    lines = (SESSION_1205H_H100 / "README.md").read_text().splitlines()
    verdicts = {}
    for b, L, mine, theirs in pairs.select("batch_size", "configured_L", "round_time_ms",
                                           "round_time_ms_fixed").iter_rows():
        apart, other_way = abs(mine - theirs) / theirs, abs(mine - theirs) / mine
        verdict = _token_mode_reading(apart)
        # "with this round as the denominator instead, every verdict below is the same"
        assert verdict == _token_mode_reading(other_way)
        verdicts[(b, int(L))] = verdict
        row = next(ln for ln in lines if ln.startswith(f"| {b} | EAGLE3 L = {L:.0f} |"))
        assert f"| {theirs:.2f} | {100 * apart:.1f} % |" in row, row
    assert verdicts == {(32, 1): "changes", (1, 3): "changes", (1, 4): "changes",
                        (1, 1): "not decided", (32, 3): "not decided", (32, 4): "not decided"}
    assert "**B = 32, L = 1: the token mode changes the round**" in readme
    assert "**B = 1, L = 3 and L = 4: changes**" in readme
    assert "**B = 1, L = 1 (8.1 %) and B = 32, L = 3 (6.7 %) and L = 4 (6.3 %): not decided**" in readme
    # the A/B's reproduction: ADR 0244's real-draft-token arm on the third board
    ab = _aggregated(packed.tree_files(TOKEN_1205F / "results" / "cells", "*/eagle3_rt--mv1.parquet"))
    assert ab["gpu_uuid"][0] not in {GPU_1205H, fixed["gpu_uuid"][0]}
    mine = pairs.filter(pl.col("batch_size") == 32, pl.col("configured_L") == 1.0)["round_time_ms"][0]
    shift = abs(mine / ab["round_time_ms"][0] - 1)
    assert shift <= 0.10 and f"{mine:.2f} ms against ADR 0244's real-draft-token arm's {ab['round_time_ms'][0]:.2f} ms" \
        in readme and f"{100 * shift:.1f} % apart" in readme
    # the floors, from the published shape and this board's calibration, not from the committed curves
    cal = json.loads(next((RT_1205H / "results" / "hardware").glob("*.json")).read_text())
    hbm = cal["constants"]["hbm_bytes_per_s"]
    for b, role, rnd in rt.select("batch_size", "role", "round_time_ms").iter_rows():
        assert rnd >= _qwen3_30b_floor_ms(b, 4 if role == "point" else 1, hbm), (b, role, rnd)
    assert f"B = 32 {_qwen3_30b_floor_ms(32, 4, hbm):.2f} ms" in readme and f"{hbm / 1e12:.2f} TB/s" in readme
    assert pl.read_parquet(RT_1205H / "results" / "curves.parquet")["below_expert_floor"].to_list() == [False] * 6
    # the energy ratios the summary quotes, against the fixed mode's committed ones
    ours, theirs = _ratios_to_mean_baseline(rt), _ratios_to_mean_baseline(fixed)
    assert f"from **{theirs[(32, 1.0)]:.3f}×** (a saving) to **{ours[(32, 1.0)]:.3f}×** (a cost)" in readme
    assert (f"({ours[(1, 1.0)]:.3f}× and {ours[(32, 1.0)]:.3f}×) and saves from L = 3 ({ours[(1, 3.0)]:.3f}× / "
            f"{ours[(32, 3.0)]:.3f}×) and L = 4 ({ours[(1, 4.0)]:.3f}× / {ours[(32, 4.0)]:.3f}×)") in readme


SESSION_1206_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-06"
SW_SGLANG_1206 = SESSION_1206_H100 / "depth-sw-sglang"
GPU_1206 = "GPU-ae37207b-9c25-9020-caf8-1af1cf8605d0"
SESSION_1206 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-06"


def test_1206_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(SW_SGLANG_1206, "h200-schemes-depth-sw-sglang.yaml")


def test_1206_h100_sglang_sliding_window_depth_family_is_whole_and_the_readme_table_is_the_records():
    points = _h100_depth_family(SW_SGLANG_1206, SESSION_1206_H100, "h200-schemes-depth-sw-sglang.yaml", GPU_1206,
                                "gemma4_26b_a4b_mm")
    assert set(points["git_commit"]) == {"fc5572b5901f9c14ed050d9b8f720a964f6c249f"}
    # the token mode as registered: unset, so no engine reports one and SGLang ran its default (ADR 0244)
    assert not any("speculative_simulate_acc_token_mode" in json.loads(c) for c in points["engine_config"])
    assert {json.loads(c)["speculative_attention_mode"] for c in points["engine_config"]} == {"prefill"}
    assert {json.loads(c)["attention_backend"] for c in points["engine_config"]} == {"triton"}
    text = _readme_text(SESSION_1206_H100)
    assert sorted(_engine_starts(SW_SGLANG_1206), reverse=True) == [156.0, 70.5, 59.7, 49.2, 45.0]
    assert "156.0 s cold, then 70.5, 59.7, 49.2 and 45.0 s" in text
    # the README's arithmetic on the B = 32 rounds, from the records
    rounds = {(b, L): r for b, L, r in points.select("batch_size", "configured_L", "round_time_ms").iter_rows()}
    b32 = [rounds[(32, L)] for L in (1.0, 3.0, 4.0)]
    steps = points["baseline_round_time_ms"].filter(points["batch_size"] == 32).unique().to_list()
    assert len(steps) == 1 and f"the {steps[0]:.2f} ms step" in text
    assert f"{min(b32):.1f}–{max(b32):.1f} ms at every L, {min(b32) / steps[0]:.1f}–{max(b32) / steps[0]:.1f} ×" in text
    records = _aggregated(packed.tree_files(SW_SGLANG_1206 / "results" / "cells", "*/*.parquet"))
    ratio_l3 = _ratios_to_mean_baseline(records)[(32, 3.0)]
    assert f"L = 3 costs {100 * (ratio_l3 - 1):.1f} % more" in text


def test_1206_below_the_floor_only_the_b32_baselines_and_the_readme_says_so():
    roof = pl.read_parquet(SW_SGLANG_1206 / "results" / "roofline.parquet")
    below = set(roof.filter(pl.col("below_expert_floor")).select("batch_size", "cell_name").iter_rows())
    assert below == {(32, "baseline--open"), (32, "baseline--close")}
    floors = sorted({round(f, 2) for f in roof.filter(pl.col("batch_size") == 32)["expert_floor_ms"]})
    text = _readme_text(SESSION_1206_H100)
    assert floors == [12.95, 14.83] and "routed-expert floor (14.83 ms;" in text and "below theirs, 12.95 ms" in text
    # the same shape's floors as the vLLM family's (2026-12-05g): one model, the boards' calibrations agree to 0.01 ms
    assert "against 12.95 ms" in _readme_text(SESSION_1205G_H100)


def test_1206_the_side_by_side_table_is_three_runs_records_and_none_is_paired_across():
    """SGLang on this H100, vLLM on 2026-12-05g's H100 (text shape), SGLang on 2026-12-03f's H200 (opening baseline
    only): each cell of the README's table is its run's ratio and round; compare_evidence pairs none of them."""
    runs = {"sglang": SW_SGLANG_1206, "vllm": SW_1205G, "h200": GEMMA_MM_1203F}
    frames = {k: _aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet")) for k, f in runs.items()}
    for a, b in (("sglang", "vllm"), ("sglang", "h200")):
        assert compare_evidence.compare_sources(runs[a] / "results" / "cells", runs[b] / "results" / "cells").height == 0
    ratios = {k: _ratios_to_mean_baseline(f) for k, f in frames.items()}
    rounds = {k: {(b, L): r for b, L, r, role in f.select("batch_size", "configured_L", "round_time_ms", "role")
                  .iter_rows() if role == "point"} for k, f in frames.items()}
    lines = (SESSION_1206_H100 / "README.md").read_text().splitlines()
    for (b, L) in sorted(ratios["sglang"]):
        cells = [f"{ratios[k][(b, L)]:.3f}× ({rounds[k][(b, L)]:.2f} ms)" if (b, L) in ratios[k] else "—"
                 for k in ("sglang", "vllm", "h200")]
        assert f"| {b} | {L:.0f} | " + " | ".join(cells) + " |" in lines, (b, L, cells)
    assert len(ratios["h200"]) == 2  # the breadth run measured L = 1 and 4 at B = 1 only


def test_1206_session_readme_device_time_adds_up():
    """The calls table's budget steps chain from 1,800 s to the last reply, and the README's totals are their sums."""
    rows = [ln for ln in (SESSION_1206 / "README.md").read_text().splitlines() if ln.startswith("| ") and "→" in ln]
    steps = [tuple(int(x.replace(",", "")) for x in m) for ln in rows
             for m in re.findall(r"([\d,]+) → ([\d,]+)", ln)]
    # call 1, then (a machine held: "N left" replies) the calls after the give-back, each from the last reply
    assert steps[0][0] == 1800 and all(a[1] == b[0] for a, b in zip(steps[1:], steps[2:]))
    text = _readme_text(SESSION_1206)
    assert f"`give_back` (nothing in PLAN.md fit {steps[1][0]} s) | {steps[1][0]} left |" in text
    none = sum(a - b for (a, b), ln in zip(steps, rows) if "no machine" in ln or "not asked" in ln)
    used = 1800 - steps[-1][1]
    assert f"Device time used: {used:,} of 1,800 s: {used - none} s on the one machine" in text
    assert f"{none} s on the six calls that got none" in text
    assert sum("no machine" in ln or "not asked" in ln for ln in rows) == 6


def test_1206_the_counters_table_is_the_windows_gpm_means():
    """The README's B = 32 counter table (GPU busy, SM, tensor and DRAM activity) from both runs' records, and the
    reading it rests on: the SGLang rounds are GPU time, with busier SMs but less HBM and tensor-core use than vLLM's."""
    def span(xs: list[float], digits: int, unit: str = "") -> str:
        lo, hi = f"{min(xs):.{digits}f}", f"{max(xs):.{digits}f}"
        return (lo if lo == hi else f"{lo}–{hi}") + unit

    cols = ("gpu_busy_fraction", "sm_active_pct", "tensor_active_pct", "dram_bw_util_pct")
    rows = {}
    for name, folder in (("sglang", SW_SGLANG_1206), ("vllm", SW_1205G)):
        df = _aggregated(packed.tree_files(folder / "results" / "cells", "*/*.parquet"))
        df = df.filter(pl.col("batch_size") == 32)
        assert set(df["counters_source"]) == {"gpm"}
        rows[name] = df.filter(pl.col("role") == "point")
        if name == "sglang":
            base = [df.filter(pl.col("cell_name") == n).row(0, named=True) for n in ("baseline--open", "baseline--close")]
    lines = (SESSION_1206_H100 / "README.md").read_text().splitlines()
    fmt = [(2, ""), (1, " %"), (1, " %"), (1, " %")]
    expect = {
        "| SGLang baseline (open / close) |": [f"{base[0][c]:.{d}f} / {base[1][c]:.{d}f}{u}" for c, (d, u) in zip(cols, fmt)],
        "| SGLang EAGLE3 L = 1, 3, 4 |": [span(rows["sglang"][c].to_list(), d, u) for c, (d, u) in zip(cols, fmt)],
        "| vLLM EAGLE3 L = 1, 3, 4 (2026-12-05g) |": [span(rows["vllm"][c].to_list(), d, u) for c, (d, u) in zip(cols, fmt)],
    }
    for prefix, row in expect.items():
        assert prefix + " " + " | ".join(row) + " |" in lines, (prefix, row)
    s, v = rows["sglang"], rows["vllm"]
    assert s["gpu_busy_fraction"].min() > 0.95
    assert s["sm_active_pct"].min() > v["sm_active_pct"].max()
    assert s["dram_bw_util_pct"].max() < 0.65 * v["dram_bw_util_pct"].min()
    share = (s["dram_bw_util_pct"].min() / v["dram_bw_util_pct"].max(), s["dram_bw_util_pct"].max() / v["dram_bw_util_pct"].min())
    assert f"DRAM bandwidth in use is {share[0]:.2f}–{share[1]:.2f} of vLLM's" in _readme_text(SESSION_1206_H100)
    assert s["tensor_active_pct"].max() < v["tensor_active_pct"].min()


SESSION_1206B_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-06b"
SW_RT_1206B = SESSION_1206B_H100 / "depth-sw-sglang-rt"
GPU_1206B = "GPU-af312e7f-d262-b58b-7d1c-7d4bc4503b69"
SESSION_1206B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-06b"


def test_1206b_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(SW_RT_1206B, "h200-schemes-depth-sw-sglang-rt.yaml")


def test_1206b_h100_sliding_window_rt_family_is_whole_and_the_readme_table_is_the_records():
    points = _h100_depth_family(SW_RT_1206B, SESSION_1206B_H100, "h200-schemes-depth-sw-sglang-rt.yaml", GPU_1206B,
                                "gemma4_26b_a4b_mm")
    assert set(points["git_commit"]) == {"cd02142b4d86452cd5c49503b4f7efd3c26f8769"}
    # the one registered change against the fixed family: every EAGLE3 engine committed the drafted tokens
    assert {json.loads(c)["speculative_simulate_acc_token_mode"] for c in points["engine_config"]} == {"real-draft-token"}
    assert {json.loads(c)["attention_backend"] for c in points["engine_config"]} == {"triton"}
    assert sorted(_engine_starts(SW_RT_1206B), reverse=True) == [107.1, 60.6, 43.1, 42.5, 40.3]
    assert "107.1 s cold, then 60.6, 43.1, 42.5 and 40.3 s" in _readme_text(SESSION_1206B_H100)


def test_1206b_the_token_mode_reading_is_the_registered_rule_on_both_families_records():
    """Each round against the fixed family's (2026-12-06, another H100 of the class), read by the header's rule; the
    README's table and its verdict follow from the records, and the rule is the one the header registered."""
    header = (ROOT / "config" / "h200-schemes-depth-sw-sglang-rt.yaml").read_text()
    assert "changes the round if the two rounds differ by at least 10 %, does not if they are within 5 %" in " ".join(
        ln.lstrip("# ") for ln in header.splitlines() if ln.startswith("#")).replace("  ", " ")
    rt, fixed = (_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet")).filter(
        pl.col("role") == "point") for f in (SW_RT_1206B, SW_SGLANG_1206))
    assert set(rt["gpu_names"].explode()) == set(fixed["gpu_names"].explode()) == {"NVIDIA H100 80GB HBM3"}
    assert set(rt["gpu_uuid"]) != set(fixed["gpu_uuid"])  # one board class, two boards
    rounds = {k: {(b, L): r for b, L, r in f.select("batch_size", "configured_L", "round_time_ms").iter_rows()}
              for k, f in (("rt", rt), ("fixed", fixed))}
    lines = (SESSION_1206B_H100 / "README.md").read_text().splitlines()
    readings = set()
    for (b, L), r in sorted(rounds["rt"].items()):
        apart = r / rounds["fixed"][(b, L)] - 1
        readings.add(_token_mode_reading(apart))
        row = (f"| {b} | {L:.0f} | {r:.2f} | {rounds['fixed'][(b, L)]:.2f} | {100 * apart:+.1f} % | "
               f"{_token_mode_reading(apart)} |").replace("-", "−")
        assert row in lines, row
    assert readings == {"does not change"}
    assert "the token mode does not set SGLang's round at any B or L" in _readme_text(SESSION_1206B_H100)


def test_1206b_session_readme_device_time_adds_up():
    """The calls table's budgets, read in order ("A → B left" or "N left"), start at 1,800 s and only fall; each
    machine's share and the total are the README's; every give-back names what was left."""
    text = _readme_text(SESSION_1206B)
    budgets = _budgets_left(text)
    assert budgets[0] == 1800 and budgets == sorted(budgets, reverse=True)
    first_give_back, last = 618, budgets[-1]
    assert f"`give_back` (nothing in PLAN.md fit {first_give_back} s) | {first_give_back} left |" in text
    assert "`give_back` (no start fits 160 s) | 155 left |" in text and last == 155
    assert (f"Device time used: {1800 - last:,} of 1,800 s, all on two machines: {1800 - first_give_back:,} s on the "
            f"first") in text and f"{first_give_back - last} s on the second" in text


def test_1206b_the_round_profile_table_is_the_committed_analysis_and_the_trimmed_traces_still_read():
    """The README's profile table is rounds.parquet (whole traces) with the median of rounds_detail's wall times; each
    trimmed trace reads three rounds by the same rules, its verify time near the whole trace's mean; and the reading's
    phrases follow: at B = 32 the verify pass is most of the round and does not move with L or the token mode."""
    lines = (SESSION_1206B_H100 / "README.md").read_text().splitlines()
    rows = {}
    for folder, label in (("rounds", "fixed"), ("rounds-rt", "real-draft-token")):
        table = pl.read_parquet(SESSION_1206B_H100 / folder / "rounds.parquet")
        detail = pl.read_parquet(SESSION_1206B_H100 / folder / "rounds_detail.parquet")
        wall = dict(detail.group_by("profile_dir").agg(pl.col("wall_ms").median()).iter_rows())
        for r in table.iter_rows(named=True):
            assert r["engine"] == "sglang" and r["rounds_counted"] == r["rounds_profiled"] == 24
            arm = "baseline" if r["scheme"] == "baseline" else f"EAGLE3 L = {r['configured_L']:.0f}, {label}"
            row = (f"| `{folder}/` | {r['batch_size']} | {arm} | {r['draft_ms_per_round']:.2f} | "
                   f"{r['verify_ms_per_round']:.2f} | {r['other_gpu_ms_per_round']:.2f} | {r['host_ms_per_round']:.2f} | "
                   f"{wall[r['profile_dir']]:.2f} | {r['round_ms_unprofiled']:.2f} | {100 * r['gpu_busy_fraction']:.0f} % |")
            assert row in lines, row
            rows[(folder, r["batch_size"], r["scheme"], r["configured_L"])] = r
            trimmed, _ = _analyzed_profile(
                SESSION_1206B_H100 / folder / r["campaign_id"] / r["cell_name"])
            assert trimmed["rounds_profiled"] == 3
            key = "verify_ms_per_round" if r["scheme"] != "baseline" else "other_gpu_ms_per_round"
            assert trimmed[key] == pytest.approx(r[key], rel=0.05)
    assert len(rows) == 6
    l3, l1 = rows[("rounds", 32, "eagle3", 3.0)], rows[("rounds", 32, "eagle3", 1.0)]
    real, base = rows[("rounds-rt", 32, "eagle3", 3.0)], rows[("rounds", 32, "baseline", None)]
    assert l3["verify_ms_per_round"] / base["other_gpu_ms_per_round"] == pytest.approx(2.9, abs=0.05)
    phases = ("draft_ms_per_round", "verify_ms_per_round", "other_gpu_ms_per_round", "host_ms_per_round")
    assert l3["verify_ms_per_round"] > 0.8 * sum(l3[k] for k in phases)  # the round is its verify pass
    for other in (l1, real):
        assert abs(other["verify_ms_per_round"] / l3["verify_ms_per_round"] - 1) < 0.01
    text = _readme_text(SESSION_1206B_H100)
    assert (f"{l3['verify_ms_per_round']:.1f} ms of GPU time a round, 2.9 × the baseline's "
            f"{base['other_gpu_ms_per_round']:.2f} ms decode step") in text
    assert (f"({l1['verify_ms_per_round']:.2f} ms at L = 1, {l3['verify_ms_per_round']:.2f} ms at L = 3" in text
            and f"nor with the token mode ({real['verify_ms_per_round']:.2f} ms)" in text)


def test_1206b_the_kernel_class_table_is_rounds_kernels_and_attention_is_most_of_the_extra_verify_time():
    """The README's class table is rounds_kernels.parquet (ADR 0249), each phase's classes add up to its rounds.parquet
    column, and the reading's numbers follow: at B = 32 attention is most of what verifying costs over a decode step."""
    lines = (SESSION_1206B_H100 / "README.md").read_text().splitlines()
    classes = ("attention", "moe", "gemm", "norm", "copy", "other")
    ms = {}
    for folder in ("rounds", "rounds-rt"):
        kernels = pl.read_parquet(SESSION_1206B_H100 / folder / "rounds_kernels.parquet")
        table = pl.read_parquet(SESSION_1206B_H100 / folder / "rounds.parquet")
        for r in table.iter_rows(named=True):
            for phase, column in rounds_analysis.PHASE_COLUMNS.items():
                part = kernels.filter(pl.col("profile_dir") == r["profile_dir"], pl.col("phase") == phase)
                assert sorted(part["kernel_class"]) == sorted(classes)
                assert part["kernel_ms_per_round"].sum() == pytest.approx(r[column], rel=1e-9, abs=1e-12)
                if folder == "rounds":
                    ms[(r["batch_size"], r["cell_name"], phase)] = dict(part.select("kernel_class", "kernel_ms_per_round").iter_rows())
    for b in (32, 1):
        for cell, phase, label in (("baseline--open", "other", "baseline decode step"),
                                   ("eagle3--mv3", "verify", "EAGLE3 L = 3 verify pass"),
                                   ("eagle3--mv3", "draft", "EAGLE3 L = 3 drafter")):
            m = ms[(b, cell, phase)]
            row = f"| {b} | {label} | {sum(m.values()):.2f} | " + " | ".join(f"{m[c]:.2f}" for c in classes) + " |"
            assert row in lines, row
    step, verify = ms[(32, "baseline--open", "other")], ms[(32, "eagle3--mv3", "verify")]
    extra = sum(verify.values()) - sum(step.values())
    share = (verify["attention"] - step["attention"]) / extra
    assert share > 0.5
    text = _readme_text(SESSION_1206B_H100)
    assert f"costs {extra:.2f} ms more GPU time a round, and **attention is {100 * share:.0f} % of it**" in text
    assert f"({verify['attention'] / step['attention']:.1f} ×)" in text and f"({verify['moe'] / step['moe']:.1f} ×" in text


def test_adr_0249_class_table_is_every_committed_trace_read_again():
    """ADR 0249 addendum 2's table: each committed round profile with a trace, its verify pass by kernel class, as the
    analysis reads the trimmed traces today; and the attention backends its reading names, from the committed files."""
    adr = (ROOT / "docs" / "adr" / "0249-round-time-split-by-kernel-class.md").read_text().splitlines()
    folders = [p for p in sorted((ROOT / "validation").glob("*/session-*/rounds*")) if any(p.glob("*/*/trace/*.json*"))]
    rows = 0
    for folder in folders:
        table, _, kernels = rounds_analysis.analyze_dir_tables(folder)
        board = "H100" if "h100" in folder.parent.parent.name else "H200"
        for r in table.sort("campaign_id", "cell_name").iter_rows(named=True):
            if not r["verify_ms_per_round"]:
                continue
            ms = dict(kernels.filter(pl.col("profile_dir") == r["profile_dir"], pl.col("phase") == "verify")
                      .select("kernel_class", "kernel_ms_per_round").iter_rows())
            line = (f"| `{folder.parent.name.removeprefix('session-')}/{folder.name}` | {board} | {r['engine']} "
                    f"{r['engine_version']} | {r['campaign_id'].split('-')[1]} | {r['cell_name']} | {r['batch_size']} | "
                    f"{r['rounds_profiled']} | {r['verify_ms_per_round']:.2f} | {ms['attention']:.2f} | {ms['moe']:.2f} | "
                    f"{ms['gemm']:.2f} | {ms['norm'] + ms['copy'] + ms['other']:.2f} |")
            assert line in adr, line
            rows += 1
    assert rows == 20
    sglang = {p.parent.parent.name: json.loads(p.read_text())["engine_config"]["attention_backend"]
              for p in (ROOT / "validation").glob("*/session-*/rounds/sglang-*/*/profile.json")
              if "attention_backend" in (json.loads(p.read_text()).get("engine_config") or {})}
    assert sglang["sglang-gemma4_26b_a4b_mm-closed-b32-random-s0-cg1"] == "triton"
    assert sglang["sglang-qwen3_8b-closed-b32-random-s0-cg1"] == sglang["sglang-qwen3_30b_a3b-closed-b1-random-s0-cg1"] == "fa3"
    vllm_gemma = next((ROOT / "validation" / "h200-2026-12" / "session-2026-12-02d" / "rounds").glob("*/*/engine.log.gz"))
    assert "Using FLASH_ATTN attention backend" in gzip.decompress(vllm_gemma.read_bytes()).decode()


SESSION_1206C_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-06c"
OLM_1206C = SESSION_1206C_H100 / "openloop-matched-conc3"
GPU_1206C = "GPU-d9bac83a-04a2-38b8-42b3-a3ce2c91483a"
SESSION_1206C = ROOT / "validation" / "h200-2026-12" / "session-2026-12-06c"


def _loop_family_readme_table(df: pl.DataFrame, checks: pl.DataFrame, folder: Path, session: Path,
                              tails: dict[str, str]) -> dict[str, dict]:
    """A loop family's README table (baseline open / close, then each arm with its ratio to the mean baseline and the
    tail the README writes after it), its checks sentence and its baseline_drift sentence, all from the records and
    the checks re-derived from them. Returns the records by cell name."""
    by = {r["cell_name"]: r for r in df.iter_rows(named=True)}
    o, c = by["baseline--open"], by["baseline--close"]
    mj = {k: r["energy_j"] / r["committed_tokens"] * 1000 for k, r in by.items()}
    base = (mj["baseline--open"] + mj["baseline--close"]) / 2
    lines = (session / "README.md").read_text().splitlines()
    text = _readme_text(session)

    def tok_s(r):
        return r["committed_tokens"] / r["window_s"]

    assert (f"| baseline (open / close) | {o['mean_running_requests']:.2f} / {c['mean_running_requests']:.2f} | "
            f"{tok_s(o):.1f} / {tok_s(c):.1f} | {o['realized_request_rate']:.2f} / {c['realized_request_rate']:.2f} | "
            f"{1000 * o['tpot_mean_s']:.2f} ({1000 * o['tpot_p99_s']:.2f}) / {1000 * c['tpot_mean_s']:.2f} "
            f"({1000 * c['tpot_p99_s']:.2f}) ms | {o['mean_power_w']:.1f} / {c['mean_power_w']:.1f} W | "
            f"{mj['baseline--open']:.1f} / {mj['baseline--close']:.1f} | — | "
            f"{(o['round_time_ms'] + c['round_time_ms']) / 2:.2f} ms step |") in lines
    for name, tail in tails.items():
        r = by[name]
        label = f"draft L = {name.removeprefix('draft--mv')}"
        assert (f"| {label} | {r['mean_running_requests']:.2f} | {tok_s(r):.1f} | {r['realized_request_rate']:.2f} | "
                f"{1000 * r['tpot_mean_s']:.2f} ({1000 * r['tpot_p99_s']:.2f}) ms | {r['mean_power_w']:.1f} W | "
                f"{mj[name]:,.4g} | **{mj[name] / base:.3f}×**{tail} | {r['round_time_ms']:.2f} ms |") in lines
    drift = checks.filter(pl.col("check") == "baseline_drift").row(0, named=True)
    assert f"`baseline_drift` ({100 * drift['value']:.2f} %: {mj['baseline--open']:.2f} and {mj['baseline--close']:.2f} mJ/token)" in text
    fail, flag, passed, na = re.search(r"(\d+) fail, (\d+) flag, (\d+) pass, (\d+) not_applicable",
                                       (folder / "results" / "checks.md").read_text()).groups()
    assert f"**{fail} fail**, {flag} flag, {passed} pass, {na} not applicable." in text
    return by


def _h100_loop_family(
    folder: Path, session: Path, failed: set[str], campaign: str, gpu: str, commit: str, starts: list[float]
) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """A whole H100 loop family of h200-openloop-matched.yaml: its re-derived checks fail exactly ``failed``, its 4
    records are one campaign on one board at one commit, 60 s windows, and the README quotes its engine starts.
    Returns the records, the checks and the README's text."""
    df, checks = _verdict(folder, "h200-openloop-matched.yaml")
    assert set(checks.filter(pl.col("status") == "fail")["check"]) == failed
    assert df.height == 4 and set(df["campaign_id"]) == {campaign}
    assert set(df["gpu_uuid"]) == {gpu} and set(df["git_commit"]) == {commit}
    assert set(df["window_s"].round(0)) == {60.0} and set(df["energy_counter_updates"]) <= {600, 601}
    assert sorted(_engine_starts(folder), reverse=True) == starts
    text = _readme_text(session)
    later = ", ".join(f"{x:.1f}" for x in starts[1:])
    assert f"4 cells on 4 engine starts: {starts[0]:.1f} s cold, then {later} s" in text
    return df, checks, text


def test_1206c_h100_matched_concurrency_family_is_whole_and_the_readme_table_is_the_records():
    df, checks, text = _h100_loop_family(OLM_1206C, SESSION_1206C_H100, {"steady_state"},
                                         "vllm-qwen3b-conc3-b256-random-s0-cg1", GPU_1206C,
                                         "c58bf69f04361a0b5f97568294c07d13fffa8854", [150.0, 125.1, 103.2, 98.1])
    assert set(df["workload_kind"]) == {"closed_loop"} and set(df["concurrency"]) == {3}
    assert set(df["energy_counter_updates"]) == {600}
    by = _loop_family_readme_table(df, checks, OLM_1206C, SESSION_1206C_H100,
                                   {"draft--mv1": "", "draft--mv6": " (`steady_state` failed)"})
    assert "**1 fail**" in text
    steady = [f"{q:.2f}" for q in by["draft--mv6"]["running_requests_segments"]]
    assert f"{', '.join(steady[:2])}, **{steady[2]}**, {steady[3]} against the 3 clients" in text


def test_1206c_the_vllm_round_beside_sglangs_is_both_sessions_rounds_tables():
    """The README's two-engine table: vLLM's whole-trace profile (this session) and SGLang's (2026-12-06b), the same
    cell of the same shape on two H100s; the verify pass's attention is most of what lies between them."""
    v = pl.read_parquet(SESSION_1206C_H100 / "rounds" / "rounds.parquet").row(0, named=True)
    s = pl.read_parquet(SESSION_1206B_H100 / "rounds" / "rounds.parquet").filter(
        pl.col("batch_size") == 32, pl.col("configured_L") == 3).row(0, named=True)
    assert (v["engine"], v["batch_size"], v["configured_L"], v["rounds_profiled"]) == ("vllm", 32, 3.0, 22)

    def verify_classes(folder: Path) -> dict[str, float]:
        k = pl.read_parquet(folder / "rounds" / "rounds_kernels.parquet").filter(
            pl.col("phase") == "verify", pl.col("batch_size") == 32, pl.col("acceptance_name") == "mv3")
        return dict(k.select("kernel_class", "kernel_ms_per_round").iter_rows())

    kv, ks = verify_classes(SESSION_1206C_H100), verify_classes(SESSION_1206B_H100)
    lines = (SESSION_1206C_H100 / "README.md").read_text().splitlines()
    assert f"| round, unprofiled | {v['round_ms_unprofiled']:.2f} ms | {s['round_ms_unprofiled']:.2f} ms |" in lines
    assert f"| GPU work a round | {v['gpu_ms_per_round']:.2f} ms | {s['gpu_ms_per_round']:.2f} ms |" in lines
    assert f"| draft | {v['draft_ms_per_round']:.2f} ms | {s['draft_ms_per_round']:.2f} ms |" in lines
    assert (f"| verify | {v['verify_ms_per_round']:.2f} ms: attention {kv['attention']:.2f}, MoE {kv['moe']:.2f}, "
            f"GEMM {kv['gemm']:.2f} | {s['verify_ms_per_round']:.2f} ms: attention {ks['attention']:.2f}, "
            f"MoE {ks['moe']:.2f}, GEMM {ks['gemm']:.2f} |") in lines
    gap = s["verify_ms_per_round"] - v["verify_ms_per_round"]
    assert ks["attention"] - kv["attention"] > 0.75 * gap
    assert f"{ks['attention'] - kv['attention']:.1f} of the {gap:.1f} ms between the verify passes" in _readme_text(
        SESSION_1206C_H100)
    adr = " ".join((ROOT / "docs" / "adr" / "0249-round-time-split-by-kernel-class.md").read_text().split())
    assert (f"a {s['verify_ms_per_round']:.2f} ms verify pass (attention {ks['attention']:.2f}, MoE {ks['moe']:.2f}, "
            f"GEMM {ks['gemm']:.2f} ms, whole trace). Of the {gap:.1f} ms between the two verify passes, attention is "
            f"{ks['attention'] - kv['attention']:.1f} ms ({ks['attention']:.2f} against {kv['attention']:.2f}") in adr
    trace = next((SESSION_1206C_H100 / "rounds").glob("*/*/trace/trace.json.gz"))
    assert not any(e.get("cat") == "python_function" for e in rounds_analysis.read_trace(trace)["traceEvents"])
    # "Triton's extend kernel against FLASH_ATTN": the backend each engine's own record names
    log = gzip.decompress(next((SESSION_1206C_H100 / "rounds").glob("*/*/engine.log.gz")).read_bytes()).decode()
    assert "Using FLASH_ATTN attention backend" in log
    sglang = json.loads(next((SESSION_1206B_H100 / "rounds").glob("*-b32-*/eagle3--mv3/profile.json")).read_text())
    assert sglang["engine_config"]["attention_backend"] == "triton"


def test_the_h100_index_lists_every_session_its_folders_configs_and_boards():
    """validation/h100-2026-12/README.md: one row per session folder; each folder it names exists, each config it names
    is a copy in that session, and the board is the one its records name."""
    root = ROOT / "validation" / "h100-2026-12"
    rows = [ln.split(" | ") for ln in (root / "README.md").read_text().splitlines() if ln.startswith("| `session-")]
    listed = [r[0].strip("| `") for r in rows]
    assert listed == sorted(p.name for p in root.glob("session-*"))
    for session, board, folders, configs, ran, *_ in rows:
        here = root / session.strip("| `")
        checks = list(here.glob("*/results/checks.md"))
        fails = sum(int(re.search(r"(\d+) fail,", md.read_text()).group(1)) for md in checks)
        if checks:
            assert int(re.search(r"(\d+) (?:checks )?failed", ran).group(1)) == fails, (session, ran)
        else:  # a session of profiles and benchmarks: no campaign, and the row says so
            assert "no checks" in ran and "failed" not in ran, (session, ran)
        names = re.findall(r"`([^`]+)/`", folders)
        assert names and all((here / n).is_dir() for n in names), (session, folders)
        for cfg in re.findall(r"`([^`]+\.yaml)`", configs):
            assert list(here.glob(f"*/{cfg}")), (session, cfg)
        uuids = {u for n in names if (here / n / "results" / "records.parquet").is_file()
                 for u in pl.read_parquet(here / n / "results" / "records.parquet")["gpu_uuid"]}
        if not checks:  # no records: the board is the one the profiles' NVML timelines name
            uuids = {u for t in here.glob("*/*/*/timeline.parquet") for u in pl.read_parquet(t)["gpu_uuid"]}
        # a second machine of the session that ran no campaign: the board its probe's JSON names (2026-12-07f)
        uuids |= {d["uuid"] for f in here.glob("*/nvml-busy-*.json") for d in json.loads(f.read_text())["devices"]}
        assert uuids and {u[:12] for u in uuids} == set(board.split(", ")), (session, uuids)


SESSION_1206D_H100 = ROOT / "validation" / "h100-2026-12" / "session-2026-12-06d"
OLP_1206D = SESSION_1206D_H100 / "openloop-matched-poisson3"
GPU_1206D = "GPU-6ae773d5-6017-d3d1-34a0-bed90cb74add"
SESSION_1206D = ROOT / "validation" / "h200-2026-12" / "session-2026-12-06d"


@pytest.mark.parametrize("folder", [OLM_1206C, OLP_1206D], ids=["1206c-conc3", "1206d-poisson3"])
def test_openloop_matched_configs_are_the_preregistered_one_and_the_analysis_copy_adds_only_the_allowance(folder):
    _assert_shipped_copy(folder, "h200-openloop-matched.yaml")
    registered = yaml.safe_load((folder / "h200-openloop-matched.yaml").read_text())
    analysed = yaml.safe_load((folder / "config-analysis.yaml").read_text())
    assert analysed["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in registered["checks"]
    assert analysed == registered


def test_1206d_h100_open_loop_family_is_whole_and_the_readme_table_is_the_records():
    df, checks, text = _h100_loop_family(OLP_1206D, SESSION_1206D_H100, {"batch_shape"},
                                         "vllm-qwen3b-poisson3-b256-random-s0-cg1", GPU_1206D,
                                         "33573709d418a1e78a4c9b0b903144a4d1915b08", [173.0, 163.6, 128.2, 117.5])
    assert set(df["workload_kind"]) == {"open_loop"} and set(df["request_rate"]) == {3.0}
    assert set(df["arrival_schedule"]) == {"scaled"} and len(set((df["realized_request_rate"] * df["window_s"]).round(0))) == 1
    failed = " (`batch_shape` failed)"
    by = _loop_family_readme_table(df, checks, OLP_1206D, SESSION_1206D_H100,
                                   {"draft--mv1": failed, "draft--mv6": failed})
    assert "**1 fail**" in text
    o = by["baseline--open"]
    running = {k: r["mean_running_requests"] for k, r in by.items()}
    bmean = (running["baseline--open"] + running["baseline--close"]) / 2
    assert (f"L = 1 ran {running['draft--mv1']:.2f} requests at once and L = 6 {running['draft--mv6']:.2f} against the "
            f"baseline's {bmean:.2f}") in text
    arrivals = round(o["realized_request_rate"] * o["window_s"])
    assert f"{arrivals} in 60 s, the same for every arm" in text


def test_1206d_the_sign_reading_names_both_h100_boards_and_their_baselines():
    text = _readme_text(SESSION_1206D_H100)
    conc = pl.read_parquet(OLM_1206C / "results" / "records.parquet")
    open_ = pl.read_parquet(OLP_1206D / "results" / "records.parquet")

    def base(df):
        b = df.filter(pl.col("cell_name").str.starts_with("baseline"))
        return float((b["energy_j"] / b["committed_tokens"]).mean() * 1000)

    here, there = base(open_), base(conc)
    assert f"({here:.1f} mJ/token here, {there:.1f} there, {100 * abs(there - here) / here:.1f} % apart)" in text
    assert GPU_1206C[:12] in text and set(conc["gpu_uuid"]) == {GPU_1206C} != set(open_["gpu_uuid"])
    assert "**the sign changes on one board class, across two boards.**" in text


def test_1206d_the_dspark_round_is_gpu_work_and_the_readme_table_is_the_rounds_tables():
    """The README's table: vLLM's DSpark round (whole trace, this session's H100) beside vLLM's DFlash round of the
    same target (2026-12-02c, an H200); both drafters one CUDA graph of 17 kernels a round."""
    d = pl.read_parquet(SESSION_1206D_H100 / "rounds" / "rounds.parquet").row(0, named=True)
    f = pl.read_parquet(SESSION_1202C / "rounds" / "rounds.parquet").filter(pl.col("cell_name") == "dflash--mv16").row(
        0, named=True)
    assert (d["engine"], d["scheme"], d["batch_size"], d["configured_L"], d["rounds_profiled"]) == ("vllm", "dspark", 1, 8.0, 24)
    lines = (SESSION_1206D_H100 / "README.md").read_text().splitlines()
    assert f"| round, unprofiled | {d['round_ms_unprofiled']:.2f} ms | {f['round_ms_unprofiled']:.2f} ms |" in lines
    assert f"| GPU work a round | {d['gpu_ms_per_round']:.2f} ms | {f['gpu_ms_per_round']:.2f} ms |" in lines
    k = dict(pl.read_parquet(SESSION_1206D_H100 / "rounds" / "rounds_kernels.parquet").filter(pl.col("phase") == "verify")
             .select("kernel_class", "kernel_ms_per_round").iter_rows())
    assert (f"| draft | {d['draft_ms_per_round']:.2f} ms ({100 * d['draft_ms_per_round'] / d['gpu_ms_per_round']:.0f} % of "
            f"the GPU work) | {f['draft_ms_per_round']:.2f} ms "
            f"({100 * f['draft_ms_per_round'] / f['gpu_ms_per_round']:.0f} %) |") in lines
    assert (f"| verify | {d['verify_ms_per_round']:.2f} ms ({100 * d['verify_ms_per_round'] / d['gpu_ms_per_round']:.0f} %): "
            f"GEMM {k['gemm']:.2f}, attention {k['attention']:.2f} | {f['verify_ms_per_round']:.2f} ms "
            f"({100 * f['verify_ms_per_round'] / f['gpu_ms_per_round']:.0f} %) |") in lines
    assert (d["draft_graph_launches_per_round"], d["draft_kernel_launches_per_round"]) == (
        f["draft_graph_launches_per_round"], f["draft_kernel_launches_per_round"]) == (1.0, 17.0)
    assert f"| NVML utilization, unprofiled | {d['nvml_util_unprofiled']:.2f} | {f['nvml_util_unprofiled']:.2f} |" in lines
    # "GPU work, not host time": the kernels fill the unprofiled round to within 2 %
    assert d["gpu_ms_per_round"] / d["round_ms_unprofiled"] > 0.98
    trace = next((SESSION_1206D_H100 / "rounds").glob("*/*/trace/trace.json.gz"))
    assert any(e.get("cat") == "python_function" for e in rounds_analysis.read_trace(trace)["traceEvents"])
    profile = json.loads(next((SESSION_1206D_H100 / "rounds").glob("*/*/profile.json")).read_text())
    assert profile["trace_files"] == ["trace/trace.json.gz"]


def _session_dirs(name: str) -> tuple[Path, Path]:
    """A device session's evidence folder on the H100 and its calls folder (plan, calls table, logs), which lives with
    the H200 sessions'."""
    return (ROOT / "validation" / "h100-2026-12" / f"session-{name}",
            ROOT / "validation" / "h200-2026-12" / f"session-{name}")


SESSION_1206E_H100, SESSION_1206E = _session_dirs("2026-12-06e")
GPU_1206E = "GPU-02cac770-5c36-a4cf-3e68-0a0931e0a480"
CONTROLS_1206E = {  # folder, config, model, kind key, forced runner, the records' commit
    "dense": ("capture-dense-v1", "h200-capture-bias-dense-v1.yaml", "qwen3_8b", "v1",
              "63f8cc0f81ab582b8b12703285dd803bc67c6eea"),
    "moe": ("capture-moe-v2", "h200-capture-bias-moe-v2.yaml", "qwen3_30b_a3b", "v2",
            "645cd5a7f1640834c1d479903f19c3131b8cbe05"),
}


def _bias_at(results: Path) -> dict[tuple[bool, float], dict]:
    from specjoule.report import figures as rf

    inputs = rf.FigureInputs(records=pl.read_parquet(results / "records.parquet"),
                             curves=pl.read_parquet(results / "curves.parquet"))
    return {(r["moe"], float(r["arm"][-1])): r for r in rf.capture_bias_table(inputs).iter_rows(named=True)}


@pytest.mark.parametrize("kind", sorted(CONTROLS_1206E))
def test_1206e_runner_control_is_whole_on_one_board_with_the_forced_runner_and_the_readme_table_is_the_records(kind):
    folder, config, model, runner, commit = CONTROLS_1206E[kind]
    here = SESSION_1206E_H100 / folder
    _assert_shipped_copy(here, config)
    df, checks = _verdict(here, config)
    assert checks.filter(pl.col("status") == "fail").height == 0
    assert df.height == 8 and set(df["model_pair"]) == {model} and set(df["cuda_graphs"]) == {True, False}
    assert set(df["gpu_uuid"]) == {GPU_1206E} and set(df["git_commit"]) == {commit}
    assert {json.loads(c)["model_runner"] for c in df["engine_config"]} == {runner}
    for mode in (True, False):  # each mode carries both of its baselines
        roles = df.filter(pl.col("cuda_graphs") == mode)["role"].to_list()
        assert sorted(roles) == ["closing_baseline", "opening_baseline", "point", "point"]
    records = pl.read_parquet(here / "results" / "records.parquet")
    ratio = {(r["cuda_graphs"], r["cell_name"]): r["energy_ratio"]
             for r in pl.read_parquet(here / "results" / "curves.parquet").iter_rows(named=True)}
    lines = (SESSION_1206E_H100 / "README.md").read_text().splitlines()
    start = lines.index(next(ln for ln in lines if ln.startswith(f"## `{folder}/`")))
    section = lines[start:start + 40]
    header = (here / "results" / "checks.md").read_text()
    n = {k: int(re.search(rf"(\d+) {k}", header).group(1)) for k in ("fail", "flag", "pass", "not_applicable")}
    said = " ".join(" ".join(section).split())
    assert n["fail"] == 0 and f"**0 fail**, {n['flag']} flag" in said
    assert f"{n['pass']} pass, {n['not_applicable']} not applicable" in said
    for r in records.iter_rows(named=True):
        rt = ratio.get((r["cuda_graphs"], r["cell_name"]))
        line = (f"| {'on' if r['cuda_graphs'] else 'off'} | {r['cell_name']} | {r['mj_per_committed_token']:.1f} | "
                f"{'—' if rt is None else f'{rt:.3f}'} | {r['round_time_ms']:.2f} ms | "
                f"{100 * r['gpu_busy_fraction']:.0f} % | {r['mean_power_w']:.1f} W | {r['engine_start_s']:.1f} s |")
        assert line in section, line


def test_1206e_the_verdict_follows_the_registered_rules_from_the_committed_biases():
    """Each control's bias at L = 4 (capture_bias_table over its records) is nearer its own kind's reference (the
    H200 pairs' committed biases) than the other kind's, and inside its kind's paper band: the model kind, not the
    runner. The README's table and the report's constant are those numbers."""
    from specjoule.report import figures as rf

    refs = _bias_at(CAPTURE_1204B / "results")  # dense on V2 and MoE on V1, H200s
    ref = {moe: refs[(moe, 4.0)]["bias_pp"] for moe in (False, True)}
    assert round(ref[False], 1) == -1.9 and round(ref[True], 1) == 31.3
    text = _readme_text(SESSION_1206E_H100)
    for kind, moe in (("dense", False), ("moe", True)):
        folder, *_ = CONTROLS_1206E[kind]
        bias = _bias_at(SESSION_1206E_H100 / folder / "results")
        b4 = bias[(moe, 4.0)]["bias_pp"]
        own, other = abs(b4 - ref[moe]), abs(b4 - ref[not moe])
        assert own < other, (kind, b4)
        lo, hi, _ = rf.PAPER_CAPTURE_BIAS_PP[moe]
        assert b4 < hi and (not moe or b4 > lo), (kind, b4)  # dense: under the band's top; MoE: inside it
        assert render.CAPTURE_RUNNER_CONTROLS[kind]["bias_pp"] == round(b4, 1)
        for L in (1.0, 4.0):
            r = bias[(moe, L)]
            assert f"| {L:.0f} | {r['saving_on']:.1f} | {r['saving_off']:.1f} | {r['bias_pp']:+.1f} |" in text, (kind, L)
        assert f"{own:.1f} pp from the" in text and f"{other:.1f}" in text
    assert "**The verdict: the runner does not explain the contrast; the model kind does.**" in text
    (caveat,) = render.capture_runner_caveats(pl.read_parquet(CAPTURE_1204B / "results" / "records.parquet"))
    assert "Qwen3-8B on V1 -0.4 pp, Qwen3-30B-A3B on V2 +22.9 pp" in caveat.text


def test_1206e_the_ngram_round_is_host_time_in_two_graph_regimes_and_the_readme_is_the_rounds_tables():
    rounds = SESSION_1206E_H100 / "rounds"
    r = pl.read_parquet(rounds / "rounds.parquet").row(0, named=True)
    assert (r["engine"], r["scheme"], r["batch_size"], r["configured_L"], r["rounds_profiled"]) == ("vllm", "ngram", 1, 6.0, 34)
    assert r["draft_ms_per_round"] == 0 and r["gpu_busy_fraction"] < 0.5 and r["host_ms_per_round"] > r["gpu_ms_per_round"]
    lines = (SESSION_1206E_H100 / "README.md").read_text().splitlines()
    assert f"| round, unprofiled | {r['round_ms_unprofiled']:.2f} ms |" in lines
    assert (f"| GPU work a round | {r['gpu_ms_per_round']:.2f} ms (verify {r['verify_ms_per_round']:.2f}, sample "
            f"{r['sample_ms_per_round']:.2f}, other {r['other_gpu_ms_per_round']:.2f}; no draft kernels) |") in lines
    assert (f"| host time a round, profiled | {r['host_ms_per_round']:.2f} ms (GPU busy {r['gpu_busy_fraction']:.2f}; "
            f"NVML utilization {r['nvml_util_unprofiled']:.2f} unprofiled) |") in lines
    detail = pl.read_parquet(rounds / "rounds_detail.parquet")
    full, piecewise = detail.filter(pl.col("scheduled_tokens") == 6), detail.filter(pl.col("scheduled_tokens") < 6)
    assert full.height + piecewise.height == detail.height == 34
    assert set(piecewise["scheduled_tokens"]) == {1, 3, 5}
    # the narrower steps are the ones off the full graph, and they are slower for the same GPU work
    assert set(full["graph_launches"]) == {1} and set(piecewise["graph_launches"]) == {37}
    assert piecewise["wall_ms"].min() > full["wall_ms"].max()
    assert abs(piecewise["busy_ms"].mean() / full["busy_ms"].mean() - 1) < 0.05
    assert (f"| drafted rounds (6 tokens scheduled, one full CUDA graph) | {full.height} rounds, "
            f"{full['wall_ms'].mean():.2f} ms wall, {full['busy_ms'].mean():.2f} ms GPU |") in lines
    assert (f"| undrafted steps (1, 3 or 5 tokens scheduled, the piecewise graphs: 37 launches) | "
            f"{piecewise.height} rounds, {piecewise['wall_ms'].mean():.2f} ms wall, "
            f"{piecewise['busy_ms'].mean():.2f} ms GPU |") in lines
    assert r["rounds_narrower_than_widest"] == piecewise.height
    assert r["widest_round_ms_profiled"] == pytest.approx(full["wall_ms"].mean())
    assert (f"| the widest rounds' host time, profiled | {r['widest_host_ms_per_round']:.2f} ms "
            f"(`widest_host_ms_per_round`; `rounds_narrower_than_widest` {piecewise.height}) |") in lines
    profile = json.loads(next(rounds.glob("*/*/profile.json")).read_text())
    assert profile["trace_files"] == ["trace/trace.json.gz"] and profile["git_commit"].startswith("63f8cc0")


SESSION_1206F_H100, SESSION_1206F = _session_dirs("2026-12-06f")
GPU_1206F = "GPU-2a7fed25-05e6-d08a-3613-d90701e44abf"
SESSION_1206G_H100, SESSION_1206G = _session_dirs("2026-12-06g")
GPU_1206G = "GPU-9ae71162-1dd3-a668-5bc5-8ac7b5f6b7a9"
NGRAM_1206G = SESSION_1206G_H100 / "ngram-sglang"
SESSION_1206H_H100, SESSION_1206H = _session_dirs("2026-12-06h")
GPU_1206H = "GPU-5ee93b2f-7df6-abd4-cf6d-13f421529ad0"
NGRAM_1206H = SESSION_1206H_H100 / "ngram-both"
SESSION_1206I_H100, SESSION_1206I = _session_dirs("2026-12-06i")
GPU_1206I = "GPU-d42e35a8-9446-3ad9-fb04-c4476ca644cc"
NGRAM_1206I = SESSION_1206I_H100 / "ngram-vllm"
SESSION_1207C_H100, SESSION_1207C = _session_dirs("2026-12-07c")
GPU_1207C = "GPU-48ba3737-20ed-288f-dd8b-6d552a50f91b"
NGRAM_1207C = SESSION_1207C_H100 / "ngram-l4"
SESSION_1207D_H100, SESSION_1207D = _session_dirs("2026-12-07d")
GPU_1207D = "GPU-5ed716a0-bc7a-48a4-b6b3-55413b4405a3"
SW_1207D = SESSION_1207D_H100 / "depth-sw-vllm"
SESSION_1207E_H100, SESSION_1207E = _session_dirs("2026-12-07e")
GPU_1207E = "GPU-530fb92d-4fb6-03d1-2b3b-a5f91a27e211"
MLA_1207E = SESSION_1207E_H100 / "depth-mla-sglang"
SESSION_1207F_H100, SESSION_1207F = _session_dirs("2026-12-07f")
GPU_1207F = "GPU-21203830-9155-8949-9981-ced27f6698e0"
MOE_1207F = SESSION_1207F_H100 / "depth-moe-sglang"
NGRAM_L4_1207F = SESSION_1207F_H100 / "ngram-l4-sglang"
SESSION_1207G_H100, SESSION_1207G = _session_dirs("2026-12-07g")
GPU_1207G = "GPU-ef2e942b-ec33-2897-6413-67160a3d0a75"
VLLM_MOE_1207G = SESSION_1207G_H100 / "depth-moe-vllm"
SESSION_1207H_H100, SESSION_1207H = _session_dirs("2026-12-07h")
GPU_1207H = "GPU-9c95d8c9-f06b-b946-3dcd-b02c6c16677f"
MOE_1207H = SESSION_1207H_H100 / "depth-moe-sglang"
SESSION_1207J_H100, SESSION_1207J = _session_dirs("2026-12-07j")
GPU_1207J = "GPU-b541d195-96fb-b91e-b0af-78613e0ddde8"
VLLM_MOE_1207J = SESSION_1207J_H100 / "depth-moe-vllm"
VLLM_MOE_1207J_RERUN = SESSION_1207J_H100 / "depth-moe-vllm-rerun"
SESSION_1208_H100, SESSION_1208 = _session_dirs("2026-12-08")
GPU_1208 = "GPU-35f2c884-52d6-c9a1-54aa-0d1585b1df1b"
NGRAM_L4_1208 = SESSION_1208_H100 / "ngram-l4-sglang"
NGRAM_L4_1208_RERUN = SESSION_1208_H100 / "ngram-l4-sglang-rerun"


@pytest.mark.parametrize(
    ("session", "gpu", "left"),
    [(SESSION_1206C, GPU_1206C, 194), (SESSION_1206D, GPU_1206D, 412), (SESSION_1206E, GPU_1206E, 74),
     (SESSION_1206F, GPU_1206F, 151), (SESSION_1206G, GPU_1206G, 491), (SESSION_1206H, GPU_1206H, 139),
     (SESSION_1206I, GPU_1206I, 195), (SESSION_1207C, GPU_1207C, 399), (SESSION_1207D, GPU_1207D, 365),
     (SESSION_1207E, GPU_1207E, 370), (SESSION_1207F, GPU_1207F, 231), (SESSION_1207G, GPU_1207G, 438),
     (SESSION_1207H, GPU_1207H, 585), (SESSION_1207J, GPU_1207J, 222), (SESSION_1208, GPU_1208, 177)],
    ids=["1206c", "1206d", "1206e", "1206f", "1206g", "1206h", "1206i", "1207c", "1207d", "1207e", "1207f", "1207g",
         "1207h", "1207j", "1208"],
)
def test_one_machine_sessions_device_time_adds_up(session, gpu, left):
    """The calls table's budgets start at 1,800 s, only fall and end at the last reply; the README's and the command
    log's totals are their difference; the machine is the one call 1 reported."""
    text = _readme_text(session)
    budgets = _budgets_left(text)
    assert budgets[0] == 1800 and budgets == sorted(budgets, reverse=True) and budgets[-1] == left
    assert f"Device time used: {1800 - left:,} of 1,800 s" in text
    assert f"**machine: {gpu}, NVIDIA H100 80GB HBM3" in text
    commands = (session / "device-logs" / "commands.txt").read_text()
    assert f"Device time used: {1800 - left:,} of 1,800 s." in commands


def test_1206f_sglang_rounds_beside_vllms_are_the_committed_tables_and_the_reading_follows():
    """The README's four-column table: SGLang's MTP and DSpark profiles (this session, whole traces) beside vLLM's
    profiles of the same cells (2026-12-02c on an H200, 2026-12-06d on an H100); the reading's numbers follow."""
    sglang = {r["scheme"]: r for r in pl.read_parquet(SESSION_1206F_H100 / "rounds" / "rounds.parquet").iter_rows(named=True)}
    vllm_mtp = pl.read_parquet(ROOT / "validation" / "h200-2026-12" / "session-2026-12-02c" / "rounds" / "rounds.parquet"
                               ).filter(pl.col("campaign_id").str.contains("mimo")).row(0, named=True)
    vllm_dspark = pl.read_parquet(SESSION_1206D_H100 / "rounds" / "rounds.parquet").row(0, named=True)
    columns = (sglang["mtp"], vllm_mtp, sglang["dspark"], vllm_dspark)
    assert [(c["engine"], c["scheme"], c["batch_size"], c["rounds_profiled"]) for c in columns] == [
        ("sglang", "mtp", 1, 24), ("vllm", "mtp", 1, 24), ("sglang", "dspark", 1, 24), ("vllm", "dspark", 1, 24)]
    lines = (SESSION_1206F_H100 / "README.md").read_text().splitlines()
    for label, key, fmt in (("round, unprofiled", "round_ms_unprofiled", "{:.2f}"), ("GPU work", "gpu_ms_per_round", "{:.2f}"),
                            ("draft", "draft_ms_per_round", "{:.2f}"), ("verify", "verify_ms_per_round", "{:.2f}"),
                            ("sample", "sample_ms_per_round", "{:.2f}"), ("other GPU", "other_gpu_ms_per_round", "{:.2f}"),
                            ("host, profiled", "host_ms_per_round", "{:.2f}")):
        assert f"| {label} | " + " | ".join(fmt.format(c[key]) for c in columns) + " |" in lines, label
    assert "| GPU busy, profiled | " + " | ".join(f"{100 * c['gpu_busy_fraction']:.0f} %" for c in columns) + " |" in lines
    assert "| NVML utilization, unprofiled | " + " | ".join(
        f"{100 * c['nvml_util_unprofiled']:.0f} %" for c in columns) + " |" in lines
    mtp, dspark = sglang["mtp"], sglang["dspark"]
    for r in (mtp, dspark):  # GPU work: busy above 90 %, host time a round under 0.6 ms, one draft graph a round
        assert r["gpu_busy_fraction"] > 0.9 and r["host_ms_per_round"] < 0.6 and r["draft_graph_launches_per_round"] == 1
    assert (mtp["draft_kernel_launches_per_round"], dspark["draft_kernel_launches_per_round"]) == (61, 8)
    text = _readme_text(SESSION_1206F_H100)
    verify_gap = dspark["verify_ms_per_round"] - vllm_dspark["verify_ms_per_round"]
    round_gap = dspark["round_ms_unprofiled"] - vllm_dspark["round_ms_unprofiled"]
    assert abs(dspark["draft_ms_per_round"] - vllm_dspark["draft_ms_per_round"]) < 0.02
    assert (f"0.82 ms longer ({dspark['verify_ms_per_round']:.2f} against {vllm_dspark['verify_ms_per_round']:.2f} ms"
            in text and f"{verify_gap:.2f}" == "0.82")
    assert f"vLLM spends {vllm_dspark['sample_ms_per_round']:.2f} ms in a separate sampling pass" in text
    assert f"the rounds differ by {round_gap:.2f} ms ({100 * round_gap / vllm_dspark['round_ms_unprofiled']:.0f} %)" in text
    ratio = mtp["verify_ms_per_round"] / vllm_mtp["verify_ms_per_round"]
    assert f"{ratio:.2f} × vLLM's on the H200" in text and abs(ratio / (4.8 / 3.35) - 1) < 0.02
    configs = {cell: _trimmed_profile(SESSION_1206F_H100 / "rounds" / cell, "cb478a2")["engine_config"]
               for cell in ("sglang-mimo_7b-closed-b1-random-s0-cg1/mtp--mv4",
                            "sglang-qwen3_8b-closed-b1-random-s0-cg1/dspark--mv8")}
    assert {c["attention_backend"] for c in configs.values()} == {"fa3"}
    assert configs["sglang-mimo_7b-closed-b1-random-s0-cg1/mtp--mv4"]["speculative_algorithm"] == "EAGLE"  # NEXTN's alias


def _trimmed_profile(cell: Path, commit: str) -> dict:
    """A committed round profile trimmed as the sessions since 2026-12-06b trim them: its one trace is
    ``trace/trace.json.gz``, 3 rounds read again, without Python frames; made at ``commit``. Returns profile.json."""
    profile = json.loads((cell / "profile.json").read_text())
    assert profile["trace_files"] == ["trace/trace.json.gz"] and profile["git_commit"].startswith(commit)
    trimmed, _ = _analyzed_profile(cell)
    assert trimmed["rounds_profiled"] == 3
    trace = rounds_analysis.read_trace(cell / "trace" / "trace.json.gz")
    assert not any(e.get("cat") == "python_function" for e in trace["traceEvents"])
    return profile


def _agreement_goal_met(row: dict) -> bool:
    """ADR 0113's goal, fixed before the run: throughputs within 1 %, mean TTFT and TPOT within 5 %, where the
    reference keeps up."""
    return (row["ref_keeps_up"] and all(abs(row[k] - 1) <= 0.01 for k in ("req_tput", "tok_tput"))
            and all(abs(row[k] - 1) <= 0.05 for k in ("ttft", "tpot")))


def test_1206f_agreement_table_is_the_benchmarks_json_and_the_goal_reads_as_registered():
    """The README's table is agreement-ids-form.json (ratios, each client's two runs), its goal column is ADR 0113's
    rule applied to the ratios, and the reading's numbers follow: met at 2 requests/s only."""
    folder = SESSION_1206F_H100 / "agreement"
    rows = json.loads((folder / "agreement-ids-form.json").read_text())["rows"]
    lines = (SESSION_1206F_H100 / "README.md").read_text().splitlines()

    def runs(r: dict, side: str, key: str, scale: float, fmt: str) -> str:
        return ", ".join(fmt.format(run[key] * scale) for run in r[f"{side}_runs"])

    verdicts = {}
    for r in rows:
        assert all(run["failed"] == 0 for run in r["project_runs"] + r["reference_runs"])
        verdicts[r["rate"]] = _agreement_goal_met(r)
        line = (f"| {r['rate']:g} | {r['order']} | {'yes' if r['ref_keeps_up'] else 'no'} | {r['req_tput']:.3f} | "
                f"{r['tok_tput']:.3f} | {r['ttft']:.3f} | {r['tpot']:.3f} | {runs(r, 'project', 'ttft_mean', 1e3, '{:.1f}')} | "
                f"{runs(r, 'reference', 'ttft_mean', 1e3, '{:.1f}')} | {runs(r, 'project', 'tpot_mean', 1e3, '{:.2f}')} | "
                f"{runs(r, 'reference', 'tpot_mean', 1e3, '{:.2f}')} | {'met' if verdicts[r['rate']] else 'not met'} |")
        assert line in lines, line
    assert verdicts == {2.0: True, 8.0: False, 32.0: False}
    by = {r["rate"]: r for r in rows}
    eight = by[8.0]  # both of the project's runs below both of the reference's
    assert max(x["ttft_mean"] for x in eight["project_runs"]) < min(x["ttft_mean"] for x in eight["reference_runs"])
    assert abs(eight["req_tput"] - 1) <= 0.01 and abs(eight["tpot"] - 1) <= 0.05
    top = by[32.0]
    spread = {side: max(x["ttft_mean"] for x in top[f"{side}_runs"]) / min(x["ttft_mean"] for x in top[f"{side}_runs"])
              for side in ("project", "reference")}
    text = _readme_text(SESSION_1206F_H100)
    assert f"({top['project']['mean_running']:.1f} requests running on average, of the 64 it admits)" in text
    assert f"differ by {spread['project']:.0f} × (project) and {spread['reference']:.1f} × (reference) in TTFT" in text
    cost = json.loads((folder / "agreement-ids-form.json").read_text())["poll_cost"]
    assert (f"costs {1e3 * cost['cpu_s_per_poll']:.1f} ms of the API server's CPU, "
            f"{100 * cost['cpu_share_at_sampler_rate']:.1f} % of one core") in text
    adr = " ".join((ROOT / "docs" / "adr" / "0113-agreement-with-vllm-bench-serve.md").read_text().split())
    assert (f"met at 2 requests/s** (request and token throughput {by[2.0]['req_tput']:.3f}, TTFT {by[2.0]['ttft']:.3f}, "
            f"TPOT {by[2.0]['tpot']:.3f})") in adr
    assert f"each client's own two runs differ {spread['project']:.0f} × and {spread['reference']:.1f} × in TTFT" in adr


def test_1206f_the_like_reference_run_sent_short_prompts_and_the_mended_form_does_not():
    """Order 7's text prompts: the GPU config's ids decoded by the project's 8,192-entry tokenizer re-encode to ~30
    tokens (so its TTFT ratios are quoted only as not read); the benchmark's text form now re-encodes to the prompt's
    own length for the counts ADR 0113 addendum 4 gives."""
    import statistics
    import sys

    from tokenizers import Tokenizer

    from specjoule import corpora

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import openloop_agreement as agreement

    tok = Tokenizer.from_file(str(agreement.TOKENIZER_DIR / "tokenizer.json"))
    gpu = agreement.cell_spec(2.0, 512, 256, 5.0, 20.0, 5.0, 0, 64, ROOT / "config" / "h200-openloop-matched.yaml", "qwen3b")
    demo = agreement.cell_spec(2.0, 512, 256, 5.0, 20.0, 5.0, 0, 64)
    gpu_pool, demo_pool = corpora.load_pool(gpu).token_ids, corpora.load_pool(demo).token_ids

    def encoded(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    plain = [encoded(tok.decode(list(p))) for p in gpu_pool]
    text = _readme_text(SESSION_1206F_H100)
    assert f"(the pool's {len(gpu_pool)} prompts: {statistics.fmean(plain):.1f} tokens on average after re-encoding)" in text
    assert max(plain) < 100
    demo_plain = [encoded(tok.decode(list(p))) for p in demo_pool]
    adr = " ".join((ROOT / "docs" / "adr" / "0113-agreement-with-vllm-bench-serve.md").read_text().split())
    assert f"had given {min(demo_plain)}–{max(demo_plain)} tokens, not 512" in adr
    ratios = [r["ttft"] for r in json.loads((SESSION_1206F_H100 / "agreement" / "agreement-text-form.json").read_text())["rows"]]
    assert "TTFT ratios (" + ", ".join(f"{x:.3f}" for x in ratios) + ")" in text
    mended = {name: [encoded(agreement.text_prompt(tok, list(p))[0]) for p in pool]
              for name, pool in (("gpu", gpu_pool), ("demo", demo_pool))}
    exact = {name: sum(n == 512 for n in lens) for name, lens in mended.items()}
    assert (f"{exact['gpu']} of the GPU config's {len(gpu_pool)} prompts and {exact['demo']} of the demo's re-encode to "
            f"exactly 512 tokens, the rest to 513–514") in adr
    assert all(512 <= n <= 514 for lens in mended.values() for n in lens)



def test_1206g_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(NGRAM_1206G, "h200-schemes-ngram-sglang.yaml")


def test_1206g_sglang_ngram_family_is_whole_and_the_readme_table_is_the_records():
    """ADR 0250 addendum 1: SGLang's half of the n-gram config, whole on one H100, its verdict re-derived, realized L
    exact, and the README's table the records (each ratio over the mean of its B's two baselines, as the curves)."""
    points = _h100_depth_family(NGRAM_1206G, SESSION_1206G_H100, "h200-schemes-ngram-sglang.yaml", GPU_1206G, "qwen3b",
                                summary="0 fail, 3 flag, 39 pass, 12 not_applicable", arm="n-gram", cells=8)
    # NGRAM proposes k = 5 tokens every round, accepted or not
    b1_l1 = points.filter(pl.col("batch_size") == 1, pl.col("configured_L") == 1).row(0, named=True)
    assert b1_l1["draft_tokens"] == 5 * 3570 and b1_l1["accepted_tokens"] == 0
    text = _readme_text(SESSION_1206G_H100)
    assert "(17,850 draft tokens in 3,570 rounds at B = 1, L = 1)" in text
    # beside what the helper reads from each table row: the row's power and throughput
    lines = (SESSION_1206G_H100 / "README.md").read_text().splitlines()
    for r in points.iter_rows(named=True):
        row = next(ln for ln in lines if ln.startswith(f"| {r['batch_size']} | n-gram L = {r['configured_L']:.0f} |"))
        assert f"| {r['mean_power_w']:.0f} |" in row and f"| {r['tokens_per_s']:,.0f} |" in row, row
    assert _engine_starts(NGRAM_1206G) == {40.0, 41.1, 47.3, 86.7}
    records = pl.read_parquet(NGRAM_1206G / "results" / "records.parquet")
    assert set(records.filter(pl.col("cell_name") == "baseline--open")["engine_start_s"].round(1)) == {86.7}  # cold
    assert "86.7 s cold, then 47.3, 41.1 and 40.0 s" in text
    # the reading: the zero-acceptance round against a decode step (the opening baseline's), from the records
    curves = pl.read_parquet(NGRAM_1206G / "results" / "curves.parquet")  # the helper holds them to the records
    ratios = {(b, L): r for b, L, r in curves.select("batch_size", "configured_L", "energy_ratio").iter_rows()}
    rounds = {(b, n): t for b, n, t in points.select("batch_size", "cell_name", "round_time_ms").iter_rows()}
    step1, step32 = (points.filter(pl.col("batch_size") == b)["opening_round_time_ms"].unique().item() for b in (1, 32))
    assert (f"round is {rounds[(1, 'ngram--mv1')] - step1:.2f} ms longer than a decode step at B = 1 "
            f"({rounds[(1, 'ngram--mv1')]:.2f} against {step1:.2f} ms) and {rounds[(32, 'ngram--mv1')] / step32:.1f} × one "
            f"at B = 32 ({rounds[(32, 'ngram--mv1')]:.2f} against {step32:.2f} ms") in text
    assert (f"costs {100 * (ratios[(1, 1.0)] - 1):.0f} % more per token than decoding alone at B = 1 when nothing is "
            f"accepted, {100 * (ratios[(32, 1.0)] - 1):.0f} % more at B = 32, and saves {100 * (1 - ratios[(1, 6.0)]):.0f} % "
            f"and {100 * (1 - ratios[(32, 6.0)]):.0f} % when every draft is accepted") in text


@pytest.fixture(scope="module")
def closed_1201_cells() -> pl.DataFrame:
    """2026-12-01's closed grid on an H200 (vLLM), its committed cell records aggregated: read beside the H100 n-gram
    runs of 2026-12-06g and 06h."""
    return _aggregated(packed.tree_files(CLOSED / "results" / "cells", "*/*.parquet"))


def test_1206g_vllm_side_of_the_reading_is_the_h200_runs_records_and_its_failed_l6_stays_failed(closed_1201_cells):
    """The README reads vLLM's n-gram arm of 2026-12-01 (an H200) beside this H100's SGLang arm, labelled: its L = 1
    ratios from that run's records, and its L = 6 points as failed in that run's committed checks."""
    ngram = closed_1201_cells.filter(pl.col("engine") == "vllm", (pl.col("method") == "ngram") | (pl.col("role") != "point"))
    ratios = _ratios_to_mean_baseline(ngram)
    text = _readme_text(SESSION_1206G_H100)
    assert f"vLLM on the H200 L = 1 **{ratios[(1, 1.0)]:.3f}×** at B = 1 and **{ratios[(32, 1.0)]:.3f}×** at B = 32" in text
    committed = (CLOSED / "results" / "checks.md").read_text()
    for b in (1, 32):
        assert f"| fail | acceptance_length | vllm-qwen3b-closed-b{b}-random-s0-cg1 | ngram--mv6 |" in committed
    l6 = ngram.filter(pl.col("cell_name") == "ngram--mv6")["realized_L"]
    assert f"realized L {l6.mean():.3f}" in text and (l6 < 6).all()


def test_1206g_sglang_ngram_round_beside_vllms_is_the_committed_tables_and_the_reading_follows():
    """The README's two-column table: SGLang's n-gram profile (this session, whole trace) beside vLLM's of the same
    cell (2026-12-06e, another H100); the reading's numbers follow; the trimmed trace is what ADR 0249 reads."""
    sglang = pl.read_parquet(SESSION_1206G_H100 / "rounds" / "rounds.parquet").row(0, named=True)
    vllm = pl.read_parquet(SESSION_1206E_H100 / "rounds" / "rounds.parquet").row(0, named=True)
    columns = (sglang, vllm)
    assert [(c["engine"], c["scheme"], c["batch_size"], c["configured_L"]) for c in columns] == [
        ("sglang", "ngram", 1, 6.0), ("vllm", "ngram", 1, 6.0)]
    lines = (SESSION_1206G_H100 / "README.md").read_text().splitlines()
    for label, key in (("round, unprofiled", "round_ms_unprofiled"), ("round, profiled", "round_ms_profiled"),
                       ("GPU work", "gpu_ms_per_round"), ("verify", "verify_ms_per_round"),
                       ("host, profiled", "host_ms_per_round")):
        assert f"| {label} | " + " | ".join(f"{c[key]:.2f}" for c in columns) + " |" in lines, label
    for label, key in (("GPU busy, profiled", "gpu_busy_fraction"), ("NVML utilization, unprofiled", "nvml_util_unprofiled")):
        assert f"| {label} | " + " | ".join(f"{100 * c[key]:.0f} %" for c in columns) + " |" in lines, label
    assert f"| CUDA graph launches | {sglang['graph_launches_per_round']:.0f} | {vllm['graph_launches_per_round']:.2f} |" in lines
    assert (f"| host syncs (wait, ms) | {sglang['syncs_per_round']:.0f} ({sglang['sync_wait_ms_per_round']:.2f}) | "
            f"{vllm['syncs_per_round']:.0f} ({vllm['sync_wait_ms_per_round']:.2f}) |") in lines
    # no draft kernels (the lookup is on the host), one verify graph a round, about half the round idle on the GPU
    assert sglang["draft_ms_per_round"] is None and sglang["verify_graph_launches_per_round"] == 1
    assert 0.4 < sglang["gpu_busy_fraction"] < 0.7 and sglang["rounds_profiled"] == 24
    text = _readme_text(SESSION_1206G_H100)
    gap = sglang["verify_ms_per_round"] - vllm["verify_ms_per_round"]
    assert f"SGLang's verify pass is {gap:.2f} ms longer" in text
    kernels = {name: dict(pl.read_parquet(folder / "rounds" / "rounds_kernels.parquet").filter(pl.col("phase") == "verify")
                          .select("kernel_class", "kernel_ms_per_round").iter_rows())
               for name, folder in (("sglang", SESSION_1206G_H100), ("vllm", SESSION_1206E_H100))}
    assert (f"attention {kernels['sglang']['attention']:.2f} against {kernels['vllm']['attention']:.2f} ms, "
            f"GEMM {kernels['sglang']['gemm']:.2f} against {kernels['vllm']['gemm']:.2f} ms") in text
    adr = " ".join((ROOT / "docs" / "adr" / "0249-round-time-split-by-kernel-class.md").read_text().split())
    assert f"a verify pass {gap:.2f} ms shorter on the same 6 tokens" in adr
    profile = _trimmed_profile(SESSION_1206G_H100 / "rounds" / "sglang-qwen3b-closed-b1-random-s0-cg1" / "ngram--mv6",
                               "8cc6e21")
    assert profile["engine_config"]["speculative_algorithm"] == "NGRAM"
    assert profile["engine_config"]["speculative_num_draft_tokens"] == 6


def _assert_preregistered_copy_and_marked_view(folder: Path, name: str) -> None:
    """The run's config is the shipped one, and its marked/ re-analysis differs only by allow_failed_checks and reads
    the run's own records, cells and timelines (links), not copies."""
    _assert_shipped_copy(folder, name)
    shipped = yaml.safe_load((ROOT / "config" / name).read_text())
    marked = yaml.safe_load((folder / "marked" / "config-marked.yaml").read_text())
    assert marked["checks"].pop("allow_failed_checks") is True and "allow_failed_checks" not in shipped["checks"]
    assert marked == shipped
    for table in ("records.parquet", "cells.parquet", "timelines.parquet"):
        link = folder / "marked" / "results" / table
        assert link.is_symlink() and link.resolve() == (folder / "results" / table).resolve()


def test_1206h_h100_config_is_the_preregistered_one_and_the_marked_copy_only_allows_failed_checks():
    _assert_preregistered_copy_and_marked_view(NGRAM_1206H, "h200-schemes-ngram-sglang.yaml")


@pytest.fixture(scope="module")
def ngram_1206h() -> tuple[pl.DataFrame, dict[str, dict[tuple[int, float], float]]]:
    """Both families' records and, per engine, each (B, L) ratio over the mean of that engine's two baselines."""
    df = _aggregated(packed.tree_files(NGRAM_1206H / "results" / "cells", "*/*.parquet"))
    return df, {e: _ratios_to_mean_baseline(df.filter(pl.col("engine") == e)) for e in ("sglang", "vllm")}


def test_1206h_both_ngram_families_ran_whole_on_one_board_and_vllms_l6_fails_as_registered(ngram_1206h,
                                                                                           closed_1201_cells):
    """ADR 0250 addendum 2: 16 cells on one H100, the verdict re-derived: only vLLM's L = 6 fails
    (acceptance_length, both B), by the short drafts of its proposer; SGLang's tree drafts k every round.
    Derive refuses the failed campaigns, so results/ has no curves; marked/ marks vLLM's rows only."""
    df, checks = _verdict(NGRAM_1206H, "h200-schemes-ngram-sglang.yaml")
    assert df.height == 16 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {GPU_1206H} and set(df["engine"]) == {"sglang", "vllm"}
    failed = checks.filter(pl.col("status") == "fail")
    assert sorted(zip(failed["check"], failed["campaign_id"])) == [
        ("acceptance_length", f"vllm-qwen3b-closed-b{b}-random-s0-cg1") for b in (1, 32)]
    assert set(checks.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched"}
    committed = pl.read_parquet(NGRAM_1206H / "results" / "checks.parquet")
    assert set(committed.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched", "model_residual"}
    assert "2 fail, 6 flag, 76 pass, 24 not_applicable" in (NGRAM_1206H / "results" / "checks.md").read_text()
    assert not (NGRAM_1206H / "results" / "curves.parquet").exists()
    points = df.filter(pl.col("role") == "point")
    sglang, vllm = (points.filter(pl.col("engine") == e) for e in ("sglang", "vllm"))
    assert (sglang["realized_L"] == sglang["configured_L"]).all() and (sglang["draft_tokens"] == 5 * sglang["drafts"]).all()
    l6 = vllm.filter(pl.col("configured_L") == 6)
    assert (l6["realized_L"] - (1 + l6["draft_tokens"] / l6["drafts"])).abs().max() < 1e-9  # every draft accepted
    assert ((6 - l6["realized_L"]) > 0.05).all()  # outside the registered tolerance: it fails
    assert (vllm.filter(pl.col("configured_L") == 1)["realized_L"] == 1).all()
    # the same realized L as on the H200 of 2026-12-01: the proposer's, not the board's
    h200_l6 = closed_1201_cells.filter(pl.col("engine") == "vllm", pl.col("cell_name") == "ngram--mv6")["realized_L"]
    assert (l6["realized_L"] - h200_l6.mean()).abs().max() < 1e-3
    text = _readme_text(SESSION_1206H_H100)
    assert f"Realized L is {l6['realized_L'].mean():.4f} here and was {h200_l6.mean():.3f} on the H200" in text
    b1_l6 = sglang.filter(pl.col("batch_size") == 1, pl.col("configured_L") == 6).row(0, named=True)
    assert (f"({b1_l6['draft_tokens']:,} draft tokens in {b1_l6['drafts']:,} rounds at B = 1, L = 6, exactly 5 a round)"
            in text)
    marked = pl.read_parquet(NGRAM_1206H / "marked" / "results" / "curves.parquet")
    _, ratios = ngram_1206h
    for r in marked.iter_rows(named=True):
        assert r["failed_checks"] == (["acceptance_length"] if r["engine"] == "vllm" else []), r
        assert r["energy_ratio"] == pytest.approx(ratios[r["engine"]][(r["batch_size"], r["configured_L"])], rel=1e-9)
    drift = dict(checks.filter(pl.col("check") == "baseline_drift").select("campaign_id", "value").iter_rows())
    d = {(e, b): 100 * drift[f"{e}-qwen3b-closed-b{b}-random-s0-cg1"] for e in ("sglang", "vllm") for b in (1, 32)}
    assert (f"SGLang {d[('sglang', 1)]:.2f} % apart at B = 1, {d[('sglang', 32)]:.2f} % at B = 32; vLLM "
            f"{d[('vllm', 1)]:.2f} % at B = 1, {d[('vllm', 32)]:.2f} % at B = 32") in text
    assert _engine_starts(NGRAM_1206H) == {102.8, 49.0, 45.7, 42.7, 90.7, 63.9, 51.6}
    assert "102.8 s cold, then 49.0, 45.7 and 42.7 s" in text and "90.7 s cold, then 63.9 and 51.6 s" in text
    calls = _readme_text(SESSION_1206H)
    budgets = _budgets_left(calls)  # calls 1-4 got no machine: the first eight budgets are their four "A → B" pairs
    lost = budgets[0] - budgets[7]
    assert f"Calls 1–4 got no machine ({lost} s)" in calls and f"of which {lost} s went to the four calls" in calls


def _ngram_one_board_rows(rec: dict, ratios: dict, high_l: int, vllm_high_cell) -> list[str]:
    """The rows an n-gram one-board README table must hold (2026-12-06h, 07c): per B the two engines' opening /
    closing baselines, then L = 1 and ``high_l`` (mJ, ratio over the engine's mean baseline, round, power,
    throughput); ``vllm_high_cell(ratio, record)`` writes vLLM's ratio cell at ``high_l``."""

    def mj(x: float, batch: int) -> str:
        return f"{x:,.1f}" if batch == 1 else f"{x:.2f}"

    expect = []
    for b in (1, 32):
        so, sc, vo, vc = (rec[(e, b, c)] for e in ("sglang", "vllm") for c in ("baseline--open", "baseline--close"))
        expect.append(f"| {b} | baseline (opening / closing) | {mj(so['mj_per_committed_token'], b)} / "
                      f"{mj(sc['mj_per_committed_token'], b)} | — | {mj(vo['mj_per_committed_token'], b)} / "
                      f"{mj(vc['mj_per_committed_token'], b)} | — | {so['round_time_ms']:.2f} / {vo['round_time_ms']:.2f} | "
                      f"{so['mean_power_w']:.0f} / {vo['mean_power_w']:.0f} | {so['tokens_per_s']:,.0f} / "
                      f"{vo['tokens_per_s']:,.0f} |")
        for L in (1, high_l):
            s, v = rec[("sglang", b, f"ngram--mv{L}")], rec[("vllm", b, f"ngram--mv{L}")]
            vr = ratios["vllm"][(b, float(L))]
            v_cell = f"**{vr:.3f}×**" if L == 1 else vllm_high_cell(vr, v)
            expect.append(f"| {b} | n-gram L = {L} | {mj(s['mj_per_committed_token'], b)} | "
                          f"**{ratios['sglang'][(b, float(L))]:.3f}×** | {mj(v['mj_per_committed_token'], b)} | {v_cell} | "
                          f"{s['round_time_ms']:.2f} / {v['round_time_ms']:.2f} | {s['mean_power_w']:.0f} / "
                          f"{v['mean_power_w']:.0f} | {s['tokens_per_s']:,.0f} / {v['tokens_per_s']:,.0f} |")
    return expect


def _assert_one_board_baselines_as_quoted(rec: dict, text: str) -> None:
    """Each engine's mean baseline per B and how far apart the two engines' are, as the README's reading quotes them."""
    base = {(e, b): np.mean([rec[(e, b, c)]["mj_per_committed_token"] for c in ("baseline--open", "baseline--close")])
            for e in ("sglang", "vllm") for b in (1, 32)}
    gap = {b: 100 * abs(base[("vllm", b)] / base[("sglang", b)] - 1) for b in (1, 32)}
    assert (f"B = 1 {base[('sglang', 1)]:,.1f} against {base[('vllm', 1)]:,.1f} mJ a token, {gap[1]:.1f} % apart; "
            f"B = 32 {base[('sglang', 32)]:.2f} against {base[('vllm', 32)]:.2f}, {gap[32]:.1f} %") in text


def test_1206h_readme_table_and_reading_are_the_records(ngram_1206h):
    """Every row of the README's one-board table built from the records (mJ, ratio over the engine's mean baseline,
    round, power, throughput; vLLM's L = 6 with its realized L and its fail), and the reading's numbers derived."""
    df, ratios = ngram_1206h
    rec = {(r["engine"], r["batch_size"], r["cell_name"]): r for r in df.iter_rows(named=True)}
    lines = (SESSION_1206H_H100 / "README.md").read_text().splitlines()
    for row in _ngram_one_board_rows(rec, ratios, 6, lambda vr, v: f"{vr:.3f}× (L {v['realized_L']:.3f}, fail)"):
        assert row in lines, row
    text = _readme_text(SESSION_1206H_H100)
    s, v = ratios["sglang"], ratios["vllm"]
    assert (f"SGLang's n-gram costs {100 * (s[(1, 1.0)] - 1):.0f} % more per token than decoding alone at B = 1 when "
            f"nothing is accepted and {100 * (s[(32, 1.0)] - 1):.0f} % more at B = 32, and saves "
            f"{100 * (1 - s[(1, 6.0)]):.0f} % and {100 * (1 - s[(32, 6.0)]):.0f} % when every draft is accepted") in text
    assert f"vLLM's (marked) costs {100 * (v[(1, 1.0)] - 1):.0f} % and {100 * (v[(32, 1.0)] - 1):.0f} % more at L = 1" in text
    _assert_one_board_baselines_as_quoted(rec, text)
    assert (f"**SGLang's ratio is {s[(1, 1.0)] / v[(1, 1.0)]:.3f} × vLLM's at B = 1 and "
            f"{s[(32, 1.0)] / v[(32, 1.0)]:.3f} × at B = 32**") in text
    r = {(e, b): rec[(e, b, "ngram--mv1")] for e in ("sglang", "vllm") for b in (1, 32)}
    assert (f"longer than vLLM's by {r[('sglang', 1)]['round_time_ms'] - r[('vllm', 1)]['round_time_ms']:.2f} ms at B = 1 "
            f"and {r[('sglang', 32)]['round_time_ms'] - r[('vllm', 32)]['round_time_ms']:.2f} ms at B = 32, while it "
            f"draws less power ({r[('sglang', 1)]['mean_power_w']:.0f} against {r[('vllm', 1)]['mean_power_w']:.0f} W, "
            f"{r[('sglang', 32)]['mean_power_w']:.0f} against {r[('vllm', 32)]['mean_power_w']:.0f} W)") in text
    assert all(r[("sglang", b)]["mean_power_w"] < r[("vllm", b)]["mean_power_w"] for b in (1, 32))
    windows = df["window_s"]
    assert f"one window ({windows.min():.1f}–{windows.max():.1f} s, {df['energy_counter_updates'].min()}–" \
           f"{df['energy_counter_updates'].max()} energy counter" in text


def test_1206h_sglang_family_on_a_second_board_shifts_within_compare_evidences_tolerance():
    """Issue 17 item 5: SGLang's four arms paired across the two H100s (2026-12-06g, 06h); the README's shifts are
    compare_evidence's, each reproducing on the tolerance alone (one unit a side, no interval); vLLM pairs nothing."""
    paired = compare_evidence.compare_sources(NGRAM_1206G / "results" / "cells", NGRAM_1206H / "results" / "cells")
    assert paired.height == 4 and set(paired["engine"]) == {"sglang"}
    assert paired["reproduces"].all() and paired["shift_ci_low"].is_null().all()
    text = _readme_text(SESSION_1206H_H100)
    shifts = {(b, L): x for b, L, x in paired.select("batch_size", "configured_L", "shift").iter_rows()}
    assert (f"shifts **{100 * shifts[(1, 1.0)]:+.1f} %** (B = 1, L = 1), **{100 * shifts[(1, 6.0)]:+.1f} %** (B = 1, L = 6), "
            f"**{100 * shifts[(32, 1.0)]:+.1f} %** (B = 32, L = 1) and **{100 * shifts[(32, 6.0)]:+.1f} %** (B = 32, L = 6)") in text
    base = dict(paired.select("batch_size", "baseline_shift").unique().iter_rows())
    assert f"baselines {100 * base[1]:.1f} % and {100 * base[32]:.1f} %".replace("-", "−") in text
    assert max(abs(x) for x in shifts.values()) < 0.05


def test_1206i_h100_config_is_the_preregistered_one_and_the_marked_copy_only_allows_failed_checks():
    _assert_preregistered_copy_and_marked_view(NGRAM_1206I, "h200-schemes-ngram-sglang.yaml")


@pytest.fixture(scope="module")
def ngram_vllm_two_boards(ngram_1206h) -> dict[str, object]:
    """vLLM's n-gram family on its two H100s: this session's records and ratios, 2026-12-06h's vLLM ratios, and
    compare_evidence's pairing of the two runs' cells (06h first)."""
    df = _aggregated(packed.tree_files(NGRAM_1206I / "results" / "cells", "*/*.parquet"))
    paired = compare_evidence.compare_sources(NGRAM_1206H / "results" / "cells", NGRAM_1206I / "results" / "cells")
    before_df, before = ngram_1206h
    return {"df": df, "ratios": _ratios_to_mean_baseline(df), "before": before["vllm"],
            "before_df": before_df.filter(pl.col("engine") == "vllm"), "paired": paired}


def test_1206i_vllm_ngram_family_ran_whole_and_fails_as_registered_again(ngram_vllm_two_boards):
    """ADR 0250 addendum 3: 8 cells on a second H100, the verdict re-derived (only acceptance_length at L = 6, both
    B); the realized L is 2026-12-06h's to four digits; derive stops, marked/ marks every row."""
    df, checks = _verdict(NGRAM_1206I, "h200-schemes-ngram-sglang.yaml")
    assert df.height == 8 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {GPU_1206I} and set(df["engine"]) == {"vllm"}
    failed = checks.filter(pl.col("status") == "fail")
    assert sorted(zip(failed["check"], failed["campaign_id"])) == [
        ("acceptance_length", f"vllm-qwen3b-closed-b{b}-random-s0-cg1") for b in (1, 32)]
    assert "2 fail, 3 flag, 37 pass, 12 not_applicable" in (NGRAM_1206I / "results" / "checks.md").read_text()
    assert not (NGRAM_1206I / "results" / "curves.parquet").exists()
    l6 = df.filter(pl.col("configured_L") == 6)
    before_l6 = ngram_vllm_two_boards["before_df"].filter(pl.col("configured_L") == 6)
    assert (l6["realized_L"] - before_l6["realized_L"].mean()).abs().max() < 1e-4 and ((6 - l6["realized_L"]) > 0.05).all()
    marked = pl.read_parquet(NGRAM_1206I / "marked" / "results" / "curves.parquet")
    assert marked.height == 4 and marked["failed_checks"].to_list() == [["acceptance_length"]] * 4
    for r in marked.iter_rows(named=True):
        assert r["energy_ratio"] == pytest.approx(ngram_vllm_two_boards["ratios"][(r["batch_size"], r["configured_L"])])
    drift = dict(checks.filter(pl.col("check") == "baseline_drift").select("campaign_id", "value").iter_rows())
    text = _readme_text(SESSION_1206I_H100)
    assert (f"{100 * drift['vllm-qwen3b-closed-b1-random-s0-cg1']:.2f} % apart at B = 1, "
            f"{100 * drift['vllm-qwen3b-closed-b32-random-s0-cg1']:.2f} % at B = 32") in text
    assert _engine_starts(NGRAM_1206I) == {80.9, 67.5, 55.0} and "80.9 s cold, then 67.5 and 55.0 s" in text
    windows = df["window_s"]
    assert (f"one window ({windows.min():.1f}–{windows.max():.1f} s, {df['energy_counter_updates'].min()}–"
            f"{df['energy_counter_updates'].max()} energy counter updates)") in text


def test_1206i_two_board_table_and_shifts_are_the_records_and_compare_evidence(ngram_vllm_two_boards):
    """Every row of the README's two-board table from the two runs' records, its shift column compare_evidence's
    (B = 1, L = 6 the one that does not reproduce), and the reading's round, busy and power numbers."""
    df, ratios, before = ngram_vllm_two_boards["df"], ngram_vllm_two_boards["ratios"], ngram_vllm_two_boards["before"]
    paired = ngram_vllm_two_boards["paired"]
    assert paired.height == 4 and paired["shift_ci_low"].is_null().all()
    shift = {(b, L): x for b, L, x in paired.select("batch_size", "configured_L", "shift").iter_rows()}
    base_shift = dict(paired.select("batch_size", "baseline_shift").unique().iter_rows())
    assert {k for k, ok in zip(shift, paired["reproduces"]) if not ok} == {(1, 6.0)}
    now = {(r["batch_size"], r["cell_name"]): r for r in df.iter_rows(named=True)}
    was = {(r["batch_size"], r["cell_name"]): r for r in ngram_vllm_two_boards["before_df"].iter_rows(named=True)}

    def mj(x: float, batch: int) -> str:
        return f"{x:,.1f}" if batch == 1 else f"{x:.2f}"

    def pct(x: float) -> str:
        return f"{100 * x:+.1f} %".replace("-", "−")

    lines = (SESSION_1206I_H100 / "README.md").read_text().splitlines()
    for b in (1, 32):
        o, c, wo = now[(b, "baseline--open")], now[(b, "baseline--close")], was[(b, "baseline--open")]
        expect = [f"| {b} | baseline (opening / closing) | {mj(o['mj_per_committed_token'], b)} / "
                  f"{mj(c['mj_per_committed_token'], b)} | — | — | {pct(base_shift[b])} | {o['round_time_ms']:.2f} / "
                  f"{wo['round_time_ms']:.2f} | {o['mean_power_w']:.0f} / {wo['mean_power_w']:.0f} | "
                  f"{o['gpu_busy_fraction']:.2f} / {wo['gpu_busy_fraction']:.2f} |"]
        for L in (1, 6):
            n, w = now[(b, f"ngram--mv{L}")], was[(b, f"ngram--mv{L}")]
            cell = f"**{ratios[(b, float(L))]:.3f}×**" if L == 1 else f"{ratios[(b, float(L))]:.3f}× (L {n['realized_L']:.3f}, fail)"
            expect.append(f"| {b} | n-gram L = {L} | {mj(n['mj_per_committed_token'], b)} | {cell} | "
                          f"{before[(b, float(L))]:.3f}× | **{pct(shift[(b, float(L))])}** | {n['round_time_ms']:.2f} / "
                          f"{w['round_time_ms']:.2f} | {n['mean_power_w']:.0f} / {w['mean_power_w']:.0f} | "
                          f"{n['gpu_busy_fraction']:.2f} / {w['gpu_busy_fraction']:.2f} |")
            assert shift[(b, float(L))] == pytest.approx(ratios[(b, float(L))] / before[(b, float(L))] - 1, rel=1e-6)
        for row in expect:
            assert row in lines, row
    text = _readme_text(SESSION_1206I_H100)
    grew = {L: now[(1, f"ngram--mv{L}")]["round_time_ms"] - was[(1, f"ngram--mv{L}")]["round_time_ms"] for L in (1, 6)}
    assert f"rounds {grew[1]:.2f} and {grew[6]:.2f} ms longer" in text and all(g > 0.4 for g in grew.values())
    # a host-side round: the board's step agrees (2 %), the round grew, the GPU idled more of it and drew less
    for b in (1, 32):
        assert abs(now[(b, "baseline--open")]["round_time_ms"] / was[(b, "baseline--open")]["round_time_ms"] - 1) < 0.025
    for L in (1, 6):
        n, w = now[(1, f"ngram--mv{L}")], was[(1, f"ngram--mv{L}")]
        assert n["gpu_busy_fraction"] < w["gpu_busy_fraction"] and n["mean_power_w"] < w["mean_power_w"]
    assert {n["host_cpu_model"] for n in now.values()} == {w["host_cpu_model"] for w in was.values()}
    adr = " ".join((ROOT / "docs" / "adr" / "0250-sglangs-ngram-beside-vllms-on-one-board.md").read_text().split())
    assert (f"arms **{pct(shift[(1, 1.0)])}** (B = 1, L = 1), **{pct(shift[(1, 6.0)])}** (B = 1, L = 6), "
            f"{pct(shift[(32, 1.0)])} and {pct(shift[(32, 6.0)])} (B = 32)") in adr


def test_1206i_agreement_table_is_the_benchmarks_json_and_the_goal_reads_as_registered():
    """The README's table is agreement-reference-arrivals.json (ratios, each client's TTFT runs, the reference's own
    spread); ADR 0113's goal gives met at 2 requests/s only, and at 8 the two clients' runs interleave where on
    2026-12-06f the project's lay below the reference's."""
    rows = json.loads((SESSION_1206I_H100 / "agreement" / "agreement-reference-arrivals.json").read_text())["rows"]
    lines = (SESSION_1206I_H100 / "README.md").read_text().splitlines()

    def runs(r: dict, side: str) -> str:
        return ", ".join(f"{run['ttft_mean'] * 1e3:,.1f}" for run in r[f"{side}_runs"])

    for r in rows:
        assert all(run["failed"] == 0 for run in r["project_runs"] + r["reference_runs"])
        assert abs(r["prompt_tokens"] - 1) < 0.001  # the same prompts, as the served tokenizer counts them
        line = (f"| {r['rate']:g} | {r['order']} | {r['req_tput']:.3f} | {r['tok_tput']:.3f} | {r['ttft']:.3f} | "
                f"{r['tpot']:.3f} | {runs(r, 'project')} | {runs(r, 'reference')} | {r['reference_repeat_ttft_mean']:.3f} | "
                f"{r['reference']['req_tput']:.2f} | {r['project']['mean_running']:.1f} |")
        assert line in lines, line
    by = {r["rate"]: r for r in rows}
    assert {rate: _agreement_goal_met(r) for rate, r in by.items()} == {2.0: True, 8.0: False, 32.0: False}
    eight = by[8.0]
    assert abs(eight["req_tput"] - 1) <= 0.01 and abs(eight["tpot"] - 1) <= 0.05 and 0.05 < 1 - eight["ttft"] < 0.055
    p, q = ([x["ttft_mean"] for x in eight[f"{side}_runs"]] for side in ("project", "reference"))
    assert min(q) < max(p) and min(p) < max(q)  # interleaved
    before = {r["rate"]: r for r in json.loads(
        (SESSION_1206F_H100 / "agreement" / "agreement-ids-form.json").read_text())["rows"]}[8.0]
    assert max(x["ttft_mean"] for x in before["project_runs"]) < min(x["ttft_mean"] for x in before["reference_runs"])
    text = _readme_text(SESSION_1206I_H100)
    assert f"(ratio {before['ttft']:.3f}, both of the project's runs below both of the reference's)" in text
    own = {"reference": 1 - eight["reference_repeat_ttft_mean"], "project": max(p) / min(p) - 1}
    assert (f"inside both clients' own run-to-run spread (the reference's {100 * own['reference']:.1f} %, the project's "
            f"{100 * own['project']:.0f} %)") in text and 1 - eight["ttft"] < min(own.values())
    adr = " ".join((ROOT / "docs" / "adr" / "0113-agreement-with-vllm-bench-serve.md").read_text().split())
    assert f"misses it by 0.2 points ({eight['ttft']:.3f})" in adr


def test_1206i_calls_without_a_machine_are_the_calls_table():
    calls = _readme_text(SESSION_1206I)
    budgets = _budgets_left(calls)  # calls 1-5 got no machine: the first ten budgets are their five "A → B" pairs
    lost = budgets[0] - budgets[9]
    assert lost == 376 and f"Calls 1–5 got no machine ({lost} s)" in calls
    assert f"of which {lost} s went to the five calls that got no machine" in calls


# ------------------------------------------------------------------------------------------------
# session 2026-12-07: twelve calls, no machine

SESSION_1207 = ROOT / "validation" / "h200-2026-12" / "session-2026-12-07"


def _unlent_calls_table(session: Path, calls: int, used: int) -> list[tuple[list[str], int]]:
    """A session whose calls all got no machine: each call's cost is the step between two replies' budget_left_s,
    the totals the README states are the sums, and a call that met a pause cost 15 s. Its (row, cost) pairs."""
    text = (session / "README.md").read_text()
    rows = [ln.strip("|").split("|") for ln in text.splitlines() if re.match(r"\| \d+ \|", ln)]
    assert [int(r[0]) for r in rows] == list(range(1, calls + 1))
    costs = [int(r[4]) for r in rows]
    left = [int(r[5].replace(",", "")) for r in rows]
    before = [1800, *left[:-1]]
    assert [b - c for b, c in zip(before, costs)] == left
    assert all("no machine" in r[3] or "not asked" in r[3] for r in rows)  # none was lent
    assert {c for r, c in zip(rows, costs) if "not asked" in r[3]} == {15}
    assert 1800 - left[-1] == sum(costs) == used
    assert f"Device time used: {used:,} of 1,800 s" in text and f"{left[-1]} s were left unused" in text
    return list(zip(rows, costs))


def test_1207_calls_table_chains_from_the_budget_and_adds_up_to_the_readmes_totals():
    calls = _unlent_calls_table(SESSION_1207, 12, 1046)
    # a refused call naming nvidia-h200 or no kind cost twice one naming nvidia-h100-x1
    refused = {(("h100" in r[2]), c) for r, c in calls if "no machine" in r[3]}
    assert {c for h100, c in refused if not h100} == {180, 181} and {c for h100, c in refused if h100} == {85, 90}


def test_1207_addenda_were_committed_before_the_calls_they_govern():
    """The PLAN's three addenda exist, in order, and each names the call it was written before; the README names the
    commits (their header times are approximate, the README says so)."""
    plan = (SESSION_1207 / "PLAN.md").read_text()
    heads = re.findall(r"^## Addendum (\d), [\d:]+ UTC \(no machine held; written before call (\d+)\)", plan, re.M)
    assert heads == [("1", "5"), ("2", "7"), ("3", "12")]
    readme = (SESSION_1207 / "README.md").read_text()
    for sha in ("98e1399", "24ad45a", "d3bc46e"):
        assert f"({sha})" in readme
    assert "850 s floor" in plan and "it is the last, whatever" in plan


# ------------------------------------------------------------------------------------------------
# session 2026-12-07b: fifteen calls, no machine

SESSION_1207B = ROOT / "validation" / "h200-2026-12" / "session-2026-12-07b"


def test_1207b_calls_table_chains_from_the_budget_and_the_floor_stopped_the_calls():
    calls = _unlent_calls_table(SESSION_1207B, 15, 991)
    refused = [(r, c) for r, c in calls if "no machine" in r[3]]
    no_kind = [r[2].strip().startswith("none") for r, _ in refused]
    assert [c for (r, c), n in zip(refused, no_kind) if n] == [181]  # call 1 alone named no kind
    assert {c for (r, c), n in zip(refused, no_kind) if not n} == {90}  # the others named nvidia-h100-x1
    plan = (SESSION_1207B / "PLAN.md").read_text()
    floor = int(re.search(r"No call is made once fewer than (\d+) s are left", plan)[1])
    left = [int(r[5].replace(",", "")) for r, _ in calls]
    assert all(b >= floor for b in left[:-1]) and left[-1] < floor  # every call was made above the floor, none after


def test_1207b_the_addendum_was_committed_before_the_call_it_governs():
    plan = (SESSION_1207B / "PLAN.md").read_text()
    heads = re.findall(r"^## Addendum (\d), [\d:]+ UTC \(no machine held; written before call (\d+)\)", plan, re.M)
    assert heads == [("1", "9")]
    readme = (SESSION_1207B / "README.md").read_text()
    assert "(9d336d9)" in readme and "(2406345" not in readme and "2406345" in readme


# ------------------------------------------------------------------------------------------------
# session 2026-12-07i: ten calls, no machine

SESSION_1207I = ROOT / "validation" / "h200-2026-12" / "session-2026-12-07i"


def test_1207i_calls_table_chains_from_the_budget_and_each_call_was_made_above_its_floor():
    """Every refusal cost 90-91 s whichever kind was named; no call naming a kind was made below the floor in force
    (the PLAN's 1,330 s, then addendum 1's 1,260 s for either kind and 1,117 s for nvidia-h200 alone), and the
    last call left less than the lowest floor."""
    calls = _unlent_calls_table(SESSION_1207I, 10, 751)
    assert {c for r, c in calls if "no machine" in r[3]} == {90, 91}
    plan = (SESSION_1207I / "PLAN.md").read_text()
    first = int(re.search(r"with less than ([\d,]+) s left \(the H100 floor below", plan)[1].replace(",", ""))
    either, h200_only = (
        int(x.replace(",", "")) for x in re.search(r"H100 floor is\n?.*?\*\*([\d,]+) s\*\*.*?order 3's \(719 s\) ([\d,]+) s", plan, re.S).groups()
    )
    assert (first, either, h200_only) == (1330, 1260, 1117)
    before = [1800] + [int(r[5].replace(",", "")) for r, _ in calls][:-1]
    addendum_from = 8  # addendum 1 governs call 8 on
    for n, ((row, _), left) in enumerate(zip(calls, before), start=1):
        if n < addendum_from:
            assert left >= first
        else:
            assert left >= (either if "h100" in row[2] else h200_only)
    assert int(calls[-1][0][5].replace(",", "")) < h200_only


def test_1207i_the_addenda_were_committed_before_the_calls_they_govern():
    plan = (SESSION_1207I / "PLAN.md").read_text()
    heads = re.findall(r"^## Addendum (\d) \([\d:]+ UTC, before call (\d+)\)", plan, re.M)
    assert heads == [("1", "8"), ("2", "11")]
    readme = (SESSION_1207I / "README.md").read_text()
    assert "(0efa740)" in readme and "(5275c17" not in readme and "5275c17" in readme
    # addendum 2's call was never made: lending paused, so the table ends at call 10
    assert "addendum 2 (1159e2d)" in readme and "call 11 was not made" in readme
    assert "No gate, order, reading or row changes." in plan


# ------------------------------------------------------------------------------------------------
# session 2026-12-07c: an H100 at the third call; config/h200-schemes-ngram-l4.yaml, both families, one board


def test_1207c_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(NGRAM_1207C, "h200-schemes-ngram-l4.yaml")


@pytest.fixture(scope="module")
def ngram_l4() -> tuple[pl.DataFrame, dict[str, dict[tuple[int, float], float]], dict]:
    """Both families' records, per engine each (B, L) ratio over the mean of that engine's two baselines, and the
    records keyed (engine, B, cell name)."""
    df = _aggregated(packed.tree_files(NGRAM_1207C / "results" / "cells", "*/*.parquet"))
    ratios = {e: _ratios_to_mean_baseline(df.filter(pl.col("engine") == e)) for e in ("sglang", "vllm")}
    rec = {(r["engine"], r["batch_size"], r["cell_name"]): r for r in df.iter_rows(named=True)}
    return df, ratios, rec


def test_1207c_both_l4_families_ran_whole_on_one_board_and_every_check_passes(ngram_l4):
    """ADR 0250 addendum 5: 16 cells on one H100, the verdict re-derived with no fail; vLLM's L = 4 realizes 3.984
    (inside the registered 0.05), SGLang's exactly 4; the curves are the records' ratios; the README's counts and
    engine starts are the records'."""
    df, checks = _verdict(NGRAM_1207C, "h200-schemes-ngram-l4.yaml")
    assert df.height == 16 and (df["status"] == "measured").all() and (df["energy_j"] > 0).all()
    assert set(df["gpu_uuid"]) == {GPU_1207C} and set(df["engine"]) == {"sglang", "vllm"}
    assert checks.filter(pl.col("status") == "fail").height == 0
    committed = pl.read_parquet(NGRAM_1207C / "results" / "checks.parquet")
    assert set(committed["status"]) == {"pass", "flag", "not_applicable"}
    assert set(committed.filter(pl.col("status") == "flag")["check"]) == {"engine_config_matched", "model_residual"}
    assert "0 fail, 6 flag, 78 pass, 24 not_applicable" in (NGRAM_1207C / "results" / "checks.md").read_text()
    points = df.filter(pl.col("role") == "point")
    sglang, vllm = (points.filter(pl.col("engine") == e) for e in ("sglang", "vllm"))
    assert (sglang["realized_L"] == sglang["configured_L"]).all()
    l4 = vllm.filter(pl.col("configured_L") == 4)
    assert ((4 - l4["realized_L"]) < 0.05).all() and (l4["realized_L"] < 4).all()
    text = _readme_text(SESSION_1207C_H100)
    assert f"realized L {l4['realized_L'].mean():.4f} against 4.0" in text
    _, ratios, _ = ngram_l4
    curves = pl.read_parquet(NGRAM_1207C / "results" / "curves.parquet")
    assert curves.height == 8 and curves["failed_checks"].list.len().max() == 0
    for r in curves.iter_rows(named=True):
        assert r["energy_ratio"] == pytest.approx(ratios[r["engine"]][(r["batch_size"], r["configured_L"])], rel=1e-9)
    drift = dict(checks.filter(pl.col("check") == "baseline_drift").select("campaign_id", "value").iter_rows())
    d = {(e, b): 100 * drift[f"{e}-qwen3b-closed-b{b}-random-s0-cg1"] for e in ("sglang", "vllm") for b in (1, 32)}
    assert (f"SGLang {d[('sglang', 1)]:.2f} % apart at B = 1, {d[('sglang', 32)]:.2f} % at B = 32; vLLM "
            f"{d[('vllm', 1)]:.2f} % at B = 1, {d[('vllm', 32)]:.2f} % at B = 32") in text
    assert max(d.values()) < 2.0
    assert _engine_starts(NGRAM_1207C) == {94.0, 55.7, 44.5, 48.2, 82.9, 73.7, 60.7}
    assert "94.0 s cold, then 55.7, 44.5 and 48.2 s" in text and "82.9 s cold, then 73.7 and 60.7 s" in text
    windows = df["window_s"]
    assert (f"one window ({windows.min():.1f}–{windows.max():.1f} s, {df['energy_counter_updates'].min()}–"
            f"{df['energy_counter_updates'].max()} energy counter") in text


def test_1207c_readme_table_and_reading_are_the_records(ngram_l4):
    """Every row of the README's one-board table from the records, and the reading's numbers derived: per-engine
    costs and savings, the baselines' agreement, SGLang's ratio over vLLM's at each (B, L)."""
    df, ratios, rec = ngram_l4
    lines = (SESSION_1207C_H100 / "README.md").read_text().splitlines()
    for row in _ngram_one_board_rows(rec, ratios, 4, lambda vr, v: f"**{vr:.3f}×** (L {v['realized_L']:.3f})"):
        assert row in lines, row
    text = _readme_text(SESSION_1207C_H100)
    s, v = ratios["sglang"], ratios["vllm"]
    assert (f"SGLang's n-gram costs {100 * (s[(1, 1.0)] - 1):.0f} % more per token than decoding alone at B = 1 when "
            f"nothing is accepted and {100 * (s[(32, 1.0)] - 1):.0f} % more at B = 32, and saves "
            f"{100 * (1 - s[(1, 4.0)]):.0f} % and {100 * (1 - s[(32, 4.0)]):.0f} % when") in text
    assert (f"vLLM's costs {100 * (v[(1, 1.0)] - 1):.0f} % and {100 * (v[(32, 1.0)] - 1):.0f} % more at L = 1 and saves "
            f"{100 * (1 - v[(1, 4.0)]):.0f} % and {100 * (1 - v[(32, 4.0)]):.0f} % at L = 4") in text
    _assert_one_board_baselines_as_quoted(rec, text)
    x = {(b, L): s[(b, L)] / v[(b, L)] for b in (1, 32) for L in (1.0, 4.0)}
    assert (f"**SGLang's ratio is {x[(1, 1.0)]:.3f} × vLLM's at B = 1, L = 1 and {x[(32, 1.0)]:.3f} × at B = 32, L = 1; "
            f"{x[(1, 4.0)]:.3f} × at B = 1, L = 4 and {x[(32, 4.0)]:.3f} × at B = 32, L = 4**") in text
    r1 = {(e, b): rec[(e, b, "ngram--mv1")] for e in ("sglang", "vllm") for b in (1, 32)}
    assert (f"longer than vLLM's by {r1[('sglang', 1)]['round_time_ms'] - r1[('vllm', 1)]['round_time_ms']:.2f} ms at "
            f"B = 1 and {r1[('sglang', 32)]['round_time_ms'] - r1[('vllm', 32)]['round_time_ms']:.2f} ms at B = 32 while "
            f"it draws less power ({r1[('sglang', 1)]['mean_power_w']:.0f} against {r1[('vllm', 1)]['mean_power_w']:.0f} W, "
            f"{r1[('sglang', 32)]['mean_power_w']:.0f} against {r1[('vllm', 32)]['mean_power_w']:.0f} W)") in text
    assert all(r1[("sglang", b)]["mean_power_w"] < r1[("vllm", b)]["mean_power_w"] for b in (1, 32))


def test_1207c_vllms_undrafted_steps_are_the_records_counters_and_explain_the_b1_l4_gap(ngram_l4):
    """The share of request-steps vLLM drafted in, 1 − undrafted = drafts / (committed − accepted), and the tokens a
    step commits, from the records' own counters; SGLang's tree drafts every step at L = 4; the per-step energies are
    within 1 % at B = 1, L = 4, so the tokens a step commits carry the gap; the ADR says the same numbers."""
    _, _, rec = ngram_l4

    def steps(r: dict) -> int:
        return r["committed_tokens"] - r["accepted_tokens"]

    drafted = {(e, b, L): rec[(e, b, f"ngram--mv{L}")]["drafts"] / steps(rec[(e, b, f"ngram--mv{L}")])
               for e in ("sglang", "vllm") for b in (1, 32) for L in (1, 4)}
    assert drafted[("sglang", 1, 4)] == drafted[("sglang", 32, 4)] == 1.0
    assert drafted[("vllm", 1, 4)] == pytest.approx(drafted[("vllm", 32, 4)], abs=1e-3) and drafted[("vllm", 1, 4)] < 0.95
    text = _readme_text(SESSION_1207C_H100)
    s4, v4 = rec[("sglang", 1, "ngram--mv4")], rec[("vllm", 1, "ngram--mv4")]
    assert (f"**vLLM's proposer drafted in {100 * drafted[('vllm', 1, 4)]:.1f} % of its request-steps at L = 4 "
            f"({100 * drafted[('vllm', 1, 1)]:.1f} % at L = 1)**") in text
    assert f"({s4['drafts']:,} drafts in {steps(s4):,} steps at B = 1)" in text
    per_step = {e: r["committed_tokens"] / steps(r) for e, r in (("sglang", s4), ("vllm", v4))}
    assert f"vLLM commits {per_step['vllm']:.3f} tokens a step against SGLang's {per_step['sglang']:.3f}" in text
    step_mj = {e: r["mj_per_committed_token"] * per_step[e] for e, r in (("sglang", s4), ("vllm", v4))}
    assert abs(step_mj["vllm"] / step_mj["sglang"] - 1) < 0.01
    assert f"({step_mj['vllm']:,.0f} against {step_mj['sglang']:,.0f} mJ, {step_mj['vllm'] / step_mj['sglang']:.3f} ×)" in text
    gap = v4["mj_per_committed_token"] / s4["mj_per_committed_token"]
    assert f"({per_step['sglang'] / per_step['vllm']:.3f} ×) are nearly all of the {gap:.3f} ×" in text
    assert f"The same share of undrafted steps holds at B = 32 ({100 * drafted[('vllm', 32, 4)]:.1f} %)" in text
    adr = " ".join((ROOT / "docs" / "adr" / "0250-sglangs-ngram-beside-vllms-on-one-board.md").read_text().split())
    assert (f"vLLM drafted in {100 * drafted[('vllm', 1, 4)]:.1f} % of its request-steps" in adr
            and f"vLLM commits {per_step['vllm']:.3f} tokens a step against {per_step['sglang']:.3f}" in adr)
    # the drafts' length moves with the arm: L = 1, 4 here and L = 6 on 2026-12-06h, all from the records
    lengths = {L: rec[("vllm", 1, f"ngram--mv{L}")]["draft_tokens"] / rec[("vllm", 1, f"ngram--mv{L}")]["drafts"]
               for L in (1, 4)}
    l6 = _aggregated(packed.tree_files(NGRAM_1206H / "results" / "cells", "*/*.parquet")).filter(
        pl.col("engine") == "vllm", pl.col("batch_size") == 1, pl.col("configured_L") == 6).row(0, named=True)
    assert ("4.936 tokens a draft against 4.906" in text and round(lengths[4], 3) == 4.936
            and round(l6["draft_tokens"] / l6["drafts"], 3) == 4.906 and round(lengths[1], 3) == 4.968)
    short = 1 - v4["accepted_per_position"][2] / v4["drafts"]
    assert f"{100 * short:.2f} % of drafts shorter than 3 tokens" in text


def test_1207c_curves_derived_again_carry_the_drafted_share_of_steps_and_what_a_step_commits(ngram_l4):
    """ADR 0256: derive, run as the pipeline runs it on the committed records and checks, gives every point its share
    of request-steps that drafted and the tokens a step commits: vLLM's L = 4 drafted in 91.8 % of its steps at both
    batches and commits 3.740 tokens a step against a realized L of 3.984; SGLang's tree drafted in every step, 4 a
    step. A step never commits more than a verification realizes."""
    df, _, _ = ngram_l4
    curves = derive.derive(df, pl.read_parquet(NGRAM_1207C / "results" / "checks.parquet"))
    assert curves.height == 8 and curves["committed_per_step"].null_count() == 0
    l4 = {(r["engine"], r["batch_size"]): r for r in curves.filter(pl.col("configured_L") == 4).iter_rows(named=True)}
    assert set(l4) == {(e, b) for e in ("sglang", "vllm") for b in (1, 32)}
    for b in (1, 32):
        vllm, sglang = l4[("vllm", b)], l4[("sglang", b)]
        assert round(vllm["drafted_step_share"], 3) == 0.918, b
        assert vllm["committed_per_step"] == pytest.approx(3.740, abs=1e-3) and round(vllm["realized_L"], 3) == 3.984
        assert sglang["drafted_step_share"] == 1.0 and sglang["committed_per_step"] == 4.0, b
    assert round(l4[("vllm", 1)]["committed_per_step"], 3) == 3.740  # the README's B = 1 figure
    assert (curves["committed_per_step"] <= curves["realized_L"]).all()
    # the committed curves were analysed again after ADR 0256 (the README says so): they carry the same values
    keys = ["engine", "batch_size", "configured_L"]
    committed = pl.read_parquet(NGRAM_1207C / "results" / "curves.parquet").sort(keys)
    for col in ("drafted_step_share", "committed_per_step"):
        assert committed[col].to_list() == pytest.approx(curves.sort(keys)[col].to_list(), rel=1e-12), col


def test_1207c_a_requests_two_ends_are_not_steps_like_the_others(ngram_l4):
    """ADR 0256 addendum 1, from the records' counters: SGLang's undrafted L = 1 steps are its completed requests (one
    first token each); its simulated L = 4 and L = 6 requests end with accepted tokens past their last, which cancel
    the first token at L = 4 (committed = 4 × drafts) and leave two steps fewer than drafts at L = 6 (2026-12-06g/h);
    vLLM's decode steps at L = 4 lie between the counted ones and three more a request; every bound the addendum
    quotes is derived here."""
    _, _, rec = ngram_l4

    def undrafted(r: dict) -> int:
        return r["committed_tokens"] - r["accepted_tokens"] - r["drafts"]

    for b in (1, 32):
        s1, s4 = rec[("sglang", b, "ngram--mv1")], rec[("sglang", b, "ngram--mv4")]
        assert undrafted(s1) == s1["requests_completed"] > 0, b
        assert s4["committed_tokens"] == 4 * s4["drafts"] == s4["requests_completed"] * s4["output_len"], b
        # 1 + 63 × 4 tokens a request, then a last draft that accepts one token past the 256th
        assert s4["drafts"] == s4["requests_completed"] * (1 + (s4["output_len"] - 1 - 3) // 4), b
    seen: list[str] = []
    for session, counts in ((NGRAM_1206G, ((1, -150, 75), (32, -2240, 1120))),
                            (NGRAM_1206H, ((1, -152, 76), (32, -2048, 1024)))):
        six = _aggregated(packed.tree_files(session / "results" / "cells", "*/*.parquet")).filter(
            pl.col("engine") == "sglang", pl.col("configured_L") == 6)
        got = sorted((r["batch_size"], undrafted(r), r["requests_completed"]) for r in six.iter_rows(named=True))
        assert got == sorted(counts) and all(u == -2 * n for _, u, n in got), session
        seen.extend(f"{u:,} for {n:,}".replace("-", "−") for _, u, n in sorted(got))
        if session == NGRAM_1206G:  # ADR 0029's addendum: the round time this undercount lengthens
            r = six.filter(pl.col("batch_size") == 1).row(0, named=True)
            steps = r["committed_tokens"] - r["accepted_tokens"]
            adr29 = " ".join((ROOT / "docs" / "adr" / "0029-engine-config-per-arm.md").read_text().split())
            assert (f"its round time there is {100 * (r['drafts'] / steps - 1):.1f} % long ({r['drafts']:,} drafts "
                    f"against {steps:,} request-steps at B = 1)") in adr29
            assert r["round_time_ms"] == pytest.approx(1000 * r["window_s"] / steps, rel=1e-9)
    adr = " ".join((ROOT / "docs" / "adr" /
                    "0256-curves-carry-the-drafted-share-of-request-steps-and-the-tokens-a-step-commits.md").read_text().split())
    quoted = "−150 for 75 requests, −2,240 for 1,120, −152 for 76, −2,048 for 1,024"
    assert f"(2026-12-06g and 06h: {quoted})" in adr and quoted.replace(" requests", "").split(", ") == seen

    def decode_steps(r: dict, surplus_max: int) -> tuple[int, int]:  # first tokens out; 0 .. surplus_max past the end
        low = r["committed_tokens"] - r["requests_completed"] - r["accepted_tokens"]
        return low, low + surplus_max * r["requests_completed"]

    v = {b: rec[("vllm", b, "ngram--mv4")] for b in (1, 32)}
    steps = {b: decode_steps(v[b], 3) for b in (1, 32)}  # the L = 4 rates accept at most three tokens
    assert v[1]["acceptance_rates"][:4] == [1.0, 1.0, 1.0, 0.0]
    assert f"between {steps[1][0]:,} and {steps[1][1]:,} at B = 1 ({v[1]['requests_completed']} requests)" in adr
    assert f"between {steps[32][0]:,} and {steps[32][1]:,} at B = 32 ({v[32]['requests_completed']})" in adr
    shares = [v[b]["drafts"] / n for b in (1, 32) for n in steps[b]]
    assert {round(100 * x, 1) for x in shares[1::2]} == {89.2} and {round(100 * x, 1) for x in shares[::2]} == {93.2}
    exact_l1 = [rec[("vllm", b, "ngram--mv1")] for b in (1, 32)]
    assert all(r["accepted_tokens"] == 0 for r in exact_l1)
    l1 = [100 * r["drafts"] / decode_steps(r, 0)[0] for r in exact_l1]
    assert (f"drafted in 89.2–93.2 % of its decode steps (both B; {l1[0]:.1f} % and {l1[1]:.1f} % at L = 1" in adr)
    tokens = [(v[1]["committed_tokens"] - v[1]["requests_completed"]) / n for n in reversed(steps[1])]
    assert f"committed {tokens[0]:.3f}–{tokens[1]:.3f} tokens each" in adr
    s4 = rec[("sglang", 1, "ngram--mv4")]
    s_tokens = (s4["committed_tokens"] - s4["requests_completed"]) / s4["drafts"]
    assert (f"commit {s_tokens:.3f} tokens each ({s4['committed_tokens'] - s4['requests_completed']:,} in "
            f"{s4['drafts']:,})") in adr
    gap = v[1]["mj_per_committed_token"] / s4["mj_per_committed_token"]
    assert f"account for {s_tokens / tokens[1]:.3f}–{s_tokens / tokens[0]:.3f} × against the {gap:.3f} ×" in adr
    assert f"costs vLLM {gap * tokens[0] / s_tokens:.3f}–{gap * tokens[1] / s_tokens:.3f} × SGLang's energy" in adr
    # the curve columns carry these bounds (addendum 2): derive over the committed records gives the shares above
    bounded = {(r["engine"], r["batch_size"], r["cell_name"]): r for r in ngram_l4[0].with_columns(
        derive.decode_step_columns()).iter_rows(named=True)}
    for b in (1, 32):
        low, high = (bounded[("vllm", b, "ngram--mv4")][f"drafted_decode_share_{e}"] for e in ("low", "high"))
        assert (low, high) == pytest.approx((v[b]["drafts"] / steps[b][1], v[b]["drafts"] / steps[b][0]), rel=1e-12)
        exact = bounded[("vllm", b, "ngram--mv1")]
        assert exact["drafted_decode_share_low"] == exact["drafted_decode_share_high"] == pytest.approx(
            exact["drafts"] / decode_steps(exact, 0)[0], rel=1e-12)
        assert bounded[("sglang", b, "ngram--mv1")]["drafted_decode_share_low"] == 1.0  # drafted every decode step
        assert bounded[("sglang", b, "ngram--mv4")]["drafted_decode_share_high"] == 1.0
    # the request-step figures of ADR 0250 addendum 5 lie inside the bounds
    per_request_step = v[1]["committed_tokens"] / (v[1]["committed_tokens"] - v[1]["accepted_tokens"])
    assert tokens[0] < per_request_step < tokens[1] and min(shares) < v[1]["drafts"] / (
        v[1]["committed_tokens"] - v[1]["accepted_tokens"]) < max(shares)
    s1 = rec[("sglang", 1, "ngram--mv1")]  # the most a share can be when every decode step drafts
    curve_max = 1 - s1["requests_completed"] / (s1["committed_tokens"] - s1["accepted_tokens"])
    assert f"({curve_max:.3f} for SGLang's L = 1 points)" in adr


def test_1207c_each_engines_l1_arm_on_a_third_board_is_compare_evidences_shift():
    """Issue 17 item 5: the L = 1 arms paired with each earlier H100 board's (SGLang: 2026-12-06g, 06h; vLLM:
    06h, 06i); every shift the README quotes is compare_evidence's, each reproducing on the tolerance alone; the
    three-board ranges are the three sources' ratios."""
    text = _readme_text(SESSION_1207C_H100)
    here = NGRAM_1207C / "results" / "cells"
    ranges = {}
    for engine, sources in (("sglang", (NGRAM_1206G, NGRAM_1206H)), ("vllm", (NGRAM_1206H, NGRAM_1206I))):
        for src in sources:
            paired = compare_evidence.compare_sources(src / "results" / "cells", here).filter(pl.col("engine") == engine)
            assert paired.height == 2 and set(paired["configured_L"]) == {1.0}
            assert paired["reproduces"].all() and paired["shift_ci_low"].is_null().all()
            sh = dict(paired.select("batch_size", "shift").iter_rows())
            assert f"**{100 * sh[1]:+.1f} %** and **{100 * sh[32]:+.1f} %**".replace("-", "−") in text, (engine, src)
            for b, ra, rb in paired.select("batch_size", "energy_ratio_a", "energy_ratio_b").iter_rows():
                ranges.setdefault((engine, b), set()).update({round(ra, 3), round(rb, 3)})
    for engine, label in (("sglang", "SGLang"), ("vllm", "vLLM")):
        lo1, hi1 = min(ranges[(engine, 1)]), max(ranges[(engine, 1)])
        lo32, hi32 = min(ranges[(engine, 32)]), max(ranges[(engine, 32)])
        assert len(ranges[(engine, 1)]) == len(ranges[(engine, 32)]) == 3
        assert f"{lo1:.3f}–{hi1:.3f}" in text and f"{lo32:.3f}–{hi32:.3f}" in text, label


def test_1207c_calls_table_and_addendum_came_before_the_calls_they_govern():
    """Calls 1–2 got no machine (the README's 181 s), addendum 1 names call 3 and its commit, and call 3 named
    nvidia-h200 and got the H100 the records name."""
    calls = _readme_text(SESSION_1207C)
    budgets = _budgets_left(calls)
    lost = budgets[0] - budgets[3]
    assert lost == 181 and f"Calls 1 and 2 got no machine ({lost} s)" in calls
    assert f"of which {lost} s went to the two calls that got no machine" in calls
    assert f"| 3 | 06:33 | `nvidia-h200` | the same | **machine: {GPU_1207C}, NVIDIA H100 80GB HBM3" in calls
    plan = (SESSION_1207C / "PLAN.md").read_text()
    heads = re.findall(r"^## Addendum (\d), [\d:]+ UTC \(no machine held; written before call (\d+)\)", plan, re.M)
    assert heads == [("1", "3")] and "(a02e1b7, 06:31, before call 3)" in calls and "committed at 3b3edfb" in calls


def test_1207d_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(SW_1207D, "h200-schemes-depth-sw.yaml")


def test_1207d_sliding_window_family_on_a_second_h100_is_whole_and_the_readme_table_is_the_records():
    """2026-12-06i's order 6, run as 2026-12-07d's order 4: the family whole on a board that is not 2026-12-05g's,
    the same verdict, the README's table, windows, starts and below-the-floor cells from the records."""
    points = _h100_depth_family(SW_1207D, SESSION_1207D_H100, "h200-schemes-depth-sw.yaml", GPU_1207D,
                                "gemma4_26b_a4b", engine="vllm", summary="0 fail, 4 flag, 38 pass, 12 not_applicable")
    assert GPU_1207D != GPU_1205G and set(points["git_commit"]) == {"ab31e37e3f14d2d4f1787acada2e89c31b1afc27"}
    df = _aggregated(packed.tree_files(SW_1207D / "results" / "cells", "*/*.parquet"))
    text = _readme_text(SESSION_1207D_H100)
    assert _windows_quoted(df) in text
    assert sorted(_engine_starts(SW_1207D)) == [101.9, 160.6, 182.4]
    assert "160.6 s cold, 182.4 s for the EAGLE3 engine, 101.9 s" in text
    roof = pl.read_parquet(SW_1207D / "results" / "roofline.parquet")
    below = {(int(c.split("-closed-b")[1].split("-")[0]), n)
             for c, n in roof.filter(pl.col("below_expert_floor")).select("campaign_id", "cell_name").iter_rows()}
    assert below == {(32, "baseline--open"), (32, "baseline--close"), (32, "eagle3--mv1")}  # as on 2026-12-05g
    floors = sorted({round(f, 2) for f in roof.filter(pl.col("campaign_id").str.contains("-b32-"))["expert_floor_ms"]})
    assert floors == [12.73, 14.58] and "against 12.73 ms" in text and "14.16 against 14.58 ms" in text
    # every table row's other columns (the round and ratio columns are _h100_depth_family's)
    lines = (SESSION_1207D_H100 / "README.md").read_text().splitlines()
    for r in df.filter(pl.col("role") == "point").iter_rows(named=True):
        row = next(ln for ln in lines if ln.startswith(f"| {r['batch_size']} | EAGLE3 L = {r['configured_L']:.0f} |"))
        assert f"| {r['mean_power_w']:.0f} | {r['tokens_per_s']:,.0f} |" in row, row


def test_1207d_the_second_board_reproduces_the_first_within_tolerance_and_the_readme_quotes_the_shifts():
    """compare-evidence against 2026-12-05g: six configurations, each shift the README quotes, every verdict
    "reproduces" on the tolerance alone (one window a board); the rounds and powers the reading quotes."""
    table = compare_evidence.compare_sources(SW_1207D / "results" / "cells", SW_1205G / "results" / "cells")
    assert table.height == 6 and table["reproduces"].all() and table["shift_ci_low"].null_count() == 6
    text = _readme_text(SESSION_1207D_H100)
    shift = {(r["batch_size"], r["configured_L"]): r["shift"] for r in table.iter_rows(named=True)}
    assert all(v == pytest.approx(r["energy_ratio_b"] / r["energy_ratio_a"] - 1, rel=1e-9)
               for v, r in zip(shift.values(), table.iter_rows(named=True)))

    def pct(x: float) -> str:
        return f"{100 * x:+.1f}".replace("-", "−")

    assert (f"B/A − 1: {pct(shift[(1, 1.0)])}, {pct(shift[(1, 3.0)])}, {pct(shift[(1, 4.0)])} % at B = 1; "
            f"{pct(shift[(32, 1.0)])}, {pct(shift[(32, 3.0)])}, {pct(shift[(32, 4.0)])} % at B = 32") in text
    assert f"shift by {pct(min(shift.values()))} to {pct(max(shift.values()))} %" in text
    a = _aggregated(packed.tree_files(SW_1207D / "results" / "cells", "*/*.parquet"))
    b = _aggregated(packed.tree_files(SW_1205G / "results" / "cells", "*/*.parquet"))
    j = a.join(b, on=["batch_size", "cell_name"], suffix="_b").with_columns(
        (100 * (pl.col("round_time_ms") / pl.col("round_time_ms_b") - 1)).alias("round"),
        (100 * (1 - pl.col("mean_power_w") / pl.col("mean_power_w_b"))).alias("power"))
    pts, bases = j.filter(pl.col("role") == "point"), j.filter(pl.col("role") != "point")
    assert (f"the EAGLE3 rounds were {pts['round'].min():.1f}–{pts['round'].max():.1f} % longer" in text
            and f"at {pts['power'].min():.1f}–{pts['power'].max():.1f} % less power" in text)
    assert (f"the baselines' steps within {bases['round'].abs().max():.1f} % at {bases['power'].min():.1f}–"
            f"{bases['power'].max():.1f} % less power") in text
    # compare-evidence's own time and power columns say the same, per configuration (B/A − 1: 2026-12-05g over this run)
    by_point = {(r["batch_size"], r["configured_L"]): r for r in pts.iter_rows(named=True)}
    for r in table.iter_rows(named=True):
        p = by_point[(r["batch_size"], r["configured_L"])]
        assert r["round_shift"] == pytest.approx(p["round_time_ms_b"] / p["round_time_ms"] - 1, rel=1e-9)
        assert r["power_shift"] == pytest.approx(p["mean_power_w_b"] / p["mean_power_w"] - 1, rel=1e-9)
        assert r["round_shift"] < 0 < r["power_shift"] and r["host_speed_ratio"] is None  # 05g predates the probe
    text_out = compare_evidence.to_text(table, "A", "B")
    first = table.sort("batch_size", "configured_L").row(0, named=True)
    assert (f"round {first['round_time_ms_a']:.2f} → {first['round_time_ms_b']:.2f} ms ({first['round_shift']:+.1%}), "
            f"power {first['mean_power_w_a']:.0f} → {first['mean_power_w_b']:.0f} W ({first['power_shift']:+.1%})") in text_out
    l3 = {r["batch_size"]: r["round"] for r in pts.filter(pl.col("cell_name") == "eagle3--mv3").iter_rows(named=True)}
    assert f"L = 3: {l3[1]:.1f} % at B = 1, {l3[32]:.1f} % at B = 32" in text
    base = {bb: [x.filter(pl.col("batch_size") == bb, pl.col("role") != "point")["mj_per_committed_token"].mean()
                 for x in (a, b)] for bb in (1, 32)}
    assert (f"the mean baselines differ by {100 * (base[1][1] / base[1][0] - 1):.1f} % (B = 1) and "
            f"{100 * (base[32][1] / base[32][0] - 1):.1f} % (B = 32)") in text


def _board_budget(*folders: Path, engine: str | None = None) -> tuple[dict, dict, dict, dict]:
    """The variance budget over committed runs of one family (one board each; ``engine``: that engine's family where
    a folder holds both engines'): its rows by (metric, component), and the energy ratio's board row, mJ per committed
    token's board and engine-restart rows."""
    budget = variance.budget_of_sources([f / "results" / "cells" for f in folders])
    if engine is not None:
        budget = budget.filter(pl.col("family").str.starts_with(f"{engine}-"))
    rows = {(r["metric"], r["component"]): r for r in budget.iter_rows(named=True)}
    return (rows, rows[("energy_ratio", "board")], rows[("mj_per_committed_token", "board")],
            rows[("mj_per_committed_token", "engine_restart")])


def _mj_split(board: dict, restart: dict, restart_label: str = "engine restart") -> str:
    """How a README splits mJ per committed token's budget into its board and engine-restart rows."""
    return (f"mJ per committed token splits into {board['cv_percent']:.2f} % (board) and {restart['cv_percent']:.2f} % "
            f"({restart_label}) on {board['df']} and {restart['df']} df")


def test_1207d_the_two_boards_variance_budget_is_the_one_the_readme_quotes():
    """The budget of the two H100 runs of the family: the energy ratio's variance sits at the board level (holding
    every finer level, one of each a board), mJ per committed token's at board and engine restart."""
    rows, ratio, mj_board, mj_restart = _board_budget(SW_1205G, SW_1207D)
    assert ratio["includes"] == list(variance.COMPONENTS) and rows[("energy_ratio", "total")]["share"] == 1.0
    text = _readme_text(SESSION_1207D_H100)
    assert f"has a CV of {ratio['cv_percent']:.2f} % on {ratio['df']} df" in text
    assert _mj_split(mj_board, mj_restart, "engine restart: the opening against the closing baselines") in text


def test_1207e_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(MLA_1207E, "h200-schemes-depth-mla.yaml")


def test_1207e_mla_family_on_a_second_h100_is_whole_and_the_readme_table_is_the_records():
    """2026-12-07e's order 4: the SGLang MLA family whole on a board that is not 2026-12-05d's, the same verdict, the
    README's table, windows and starts from the records, every B = 32 cell below its routed-expert floor (ADR 0242)."""
    _second_h100_board(MLA_1207E, SESSION_1207E_H100, "h200-schemes-depth-mla.yaml", GPU_1207E, "glm47_flash",
                       "9ddaba7d8877b589e90a9caaf6850818b005d2b0")
    assert GPU_1207E != GPU_1205D
    text = _readme_text(SESSION_1207E_H100)
    assert sorted(_engine_starts(MLA_1207E)) == [62.2, 67.7, 69.4, 107.2, 159.8]
    assert "159.8 s cold, then 107.2, 69.4, 67.7 and 62.2 s" in text
    assert sorted(_engine_starts(MLA_1205D)) == [63.1, 64.2, 68.2, 95.4, 124.0]
    below = _below_floor(MLA_1207E)
    assert {k for k, v in below.items() if v} == {k for k in below if k[1] == 32} and len(below) == 10


def _windows_quoted(df: pl.DataFrame) -> str:
    """How a README quotes a run's windows: their length and NVML counter updates, from its records."""
    return (f"One window each ({df['window_s'].min():.1f}–{df['window_s'].max():.1f} s, "
            f"{df['energy_counter_updates'].min()}–{df['energy_counter_updates'].max()} energy counter updates)")


def _same_board_rerun(first: Path, rerun: Path, gpu: str, configurations: int) -> pl.DataFrame:
    """compare-evidence of a family's rerun against its first run on one board (B, L order): every configuration
    paired, one window each (no interval), every verdict "reproduces", both sides on that board."""
    t = _compared(first, rerun).sort("batch_size", "configured_L")
    assert t.height == configurations and t["reproduces"].all() and t["shift_ci_low"].null_count() == configurations
    assert set(t["gpus_a"].explode()) == set(t["gpus_b"].explode()) == {gpu}
    return t


def _second_h100_board(evidence_dir: Path, session: Path, config_name: str, gpu_uuid: str, pair: str,
                       commit: str, **family) -> None:
    """A depth family's run on a second H100: _h100_depth_family's checks (``family``: its engine, verdict and flags
    where not SGLang's defaults), the records' commit, and the README's windows and every point row's power and
    tokens per second the records'."""
    _h100_depth_family(evidence_dir, session, config_name, gpu_uuid, pair, **family)
    df = _aggregated(packed.tree_files(evidence_dir / "results" / "cells", "*/*.parquet"))
    assert set(df["git_commit"]) == {commit}
    assert _windows_quoted(df) in _readme_text(session)
    lines = (session / "README.md").read_text().splitlines()
    for r in df.filter(pl.col("role") == "point").iter_rows(named=True):
        row = next(ln for ln in lines if ln.startswith(f"| {r['batch_size']} | EAGLE3 L = {r['configured_L']:.0f} |"))
        assert f"| {r['mean_power_w']:.0f} | {r['tokens_per_s']:,.0f} |" in row, row


def test_1207e_the_second_board_reproduces_the_first_and_its_shifts_sit_in_power_not_time():
    """compare-evidence against 2026-12-05d: six configurations, each shift the README quotes, every verdict
    "reproduces" on the tolerance alone; the rounds within 1.9 %, the power higher on this board, the baselines'
    difference the README quotes."""
    table = compare_evidence.compare_sources(MLA_1207E / "results" / "cells", MLA_1205D / "results" / "cells")
    assert table.height == 6 and table["reproduces"].all() and table["shift_ci_low"].null_count() == 6
    text = _readme_text(SESSION_1207E_H100)
    shift = {(r["batch_size"], r["configured_L"]): r["shift"] for r in table.iter_rows(named=True)}

    def pct(x: float) -> str:
        return f"{100 * x:+.1f}".replace("-", "−")

    assert (f"B/A − 1: {pct(shift[(1, 1.0)])}, {pct(shift[(1, 3.0)])}, {pct(shift[(1, 4.0)])} % at B = 1; "
            f"{pct(shift[(32, 1.0)])}, {pct(shift[(32, 3.0)])}, {pct(shift[(32, 4.0)])} % at B = 32") in text
    assert f"shift by {pct(min(shift.values()))} to {pct(max(shift.values()))} %" in text
    assert max(abs(v) for v in shift.values()) < 0.02
    # the time and power shifts, this board over the first (compare-evidence's round_shift and power_shift are B/A − 1)
    rounds = [-r["round_shift"] / (1 + r["round_shift"]) for r in table.iter_rows(named=True)]
    powers = [-r["power_shift"] / (1 + r["power_shift"]) for r in table.iter_rows(named=True)]
    assert (f"EAGLE3 rounds were {pct(min(rounds)).replace('+', '')} to {pct(max(rounds))} % of the first board's at "
            f"{100 * min(powers):.1f}–{100 * max(powers):.1f} % more power") in text
    assert max(abs(x) for x in rounds) < 0.02 and min(powers) > 0.02
    a = _aggregated(packed.tree_files(MLA_1207E / "results" / "cells", "*/*.parquet"))
    b = _aggregated(packed.tree_files(MLA_1205D / "results" / "cells", "*/*.parquet"))
    bases = a.filter(pl.col("role") != "point").join(b, on=["batch_size", "cell_name"], suffix="_b").with_columns(
        (100 * (pl.col("round_time_ms") / pl.col("round_time_ms_b") - 1)).alias("round"),
        (100 * (pl.col("mean_power_w") / pl.col("mean_power_w_b") - 1)).alias("power"))
    assert (f"the baselines' steps within {bases['round'].abs().max():.1f} % at {bases['power'].min():.1f}–"
            f"{bases['power'].max():.1f} % more power") in text
    base = {bb: [x.filter(pl.col("batch_size") == bb, pl.col("role") != "point")["mj_per_committed_token"].mean()
                 for x in (a, b)] for bb in (1, 32)}
    assert (f"the mean baselines differ by {pct(base[1][1] / base[1][0] - 1)} % (B = 1) and "
            f"{pct(base[32][1] / base[32][0] - 1)} % (B = 32)") in text


def test_1207e_both_engines_two_board_variance_budgets_are_the_ones_the_readme_quotes():
    """The SGLang pair's budget beside the vLLM pair's: the energy ratio's board CV the same to 0.01 point on both
    engines (6 df each), mJ per committed token's board CV larger on SGLang's pair; the committed n-gram pairs' board
    CV more than twice theirs (4 df each); every figure as the README, ADR 0241 addendum 4 and the H100 index's
    board table quote it."""
    rows, ratio, mj_board, mj_restart = _board_budget(MLA_1205D, MLA_1207E)
    sw_rows = _board_budget(SW_1205G, SW_1207D)[0]
    assert ratio["includes"] == list(variance.COMPONENTS) and rows[("energy_ratio", "total")]["share"] == 1.0
    assert abs(ratio["cv_percent"] - sw_rows[("energy_ratio", "board")]["cv_percent"]) < 0.01
    assert mj_board["cv_percent"] > 2 * sw_rows[("mj_per_committed_token", "board")]["cv_percent"]
    text = _readme_text(SESSION_1207E_H100)
    assert (f"has a CV of {ratio['cv_percent']:.2f} % on {ratio['df']} df (the vLLM sliding-window pair's: "
            f"{sw_rows[('energy_ratio', 'board')]['cv_percent']:.2f} %, 2026-12-07d)") in text
    assert _mj_split(mj_board, mj_restart, "engine restart: the opening against the closing baselines") in text
    # the n-gram pairs committed before: the same component higher (host-side drafting), 4 df each
    ngram = {}
    for engine, (a, b) in (("sglang", (NGRAM_1206G, SESSION_1206H_H100 / "ngram-both")),
                           ("vllm", (SESSION_1206H_H100 / "ngram-both", NGRAM_1206I))):
        t = variance.budget_of_sources([a / "results" / "cells", b / "results" / "cells"])
        (row,) = t.filter(pl.col("family").str.starts_with(engine), pl.col("metric") == "energy_ratio",
                          pl.col("component") == "board").iter_rows(named=True)
        assert row["estimable"] and row["df"] == 4 and row["cv_percent"] > 2 * ratio["cv_percent"], engine
        ngram[engine] = row["cv_percent"]
    assert (f"at {ngram['sglang']:.2f} % (SGLang, 2026-12-06g against 06h) and {ngram['vllm']:.2f} % (vLLM, "
            "2026-12-06h against 06i), 4 df each") in text
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"{ngram['sglang']:.2f} % (SGLang, 2026-12-06g against 06h) and {ngram['vllm']:.2f} % (vLLM, 2026-12-06h "
            "against 06i), 4 df each") in adr
    assert f"is {ratio['cv_percent']:.2f} % CV on {ratio['df']} df for both pairs" in adr
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    sw_ratio = sw_rows[("energy_ratio", "board")]
    for label, cv, dof in (("| vLLM | 2026-12-05g, 2026-12-07d |", sw_ratio["cv_percent"], sw_ratio["df"]),
                           ("| SGLang | 2026-12-05d, 2026-12-07e |", ratio["cv_percent"], ratio["df"]),
                           ("| SGLang | 2026-12-06g, 2026-12-06h |", ngram["sglang"], 4),
                           ("| vLLM | 2026-12-06h, 2026-12-06i |", ngram["vllm"], 4)):
        assert f"{label} {cv:.2f} % ({dof} df) |" in index, label


def test_1207f_h100_configs_are_the_preregistered_ones():
    _assert_shipped_copy(MOE_1207F, "h200-schemes-depth-moe.yaml")
    _assert_shipped_copy(NGRAM_L4_1207F, "h200-schemes-ngram-l4.yaml")


ADR_0241 = ROOT / "docs" / "adr" / "0241-an-h100-is-a-preregistered-fallback-board-the-seeds-own-class.md"
ADR_0258 = ROOT / "docs" / "adr" / "0258-a-rounds-board-shift-is-split-into-the-gpus-busy-part-and-its-wait.md"


def _pct(x: float) -> str:
    """A relative shift as the READMEs print it: one decimal, a sign, the minus a typographic one."""
    return f"{100 * x:+.1f}".replace("-", "−")


def test_1207f_moe_family_on_a_second_h100_is_whole_and_the_readme_table_is_the_records():
    """PLAN order 4: the SGLang MoE family whole on a board that is neither 2026-12-05e's nor another's, the same
    verdict, the README's table, windows and starts from the records; B = 32, L = 1 alone below its routed-expert
    floor, as on the first board (ADR 0242)."""
    _second_h100_board(MOE_1207F, SESSION_1207F_H100, "h200-schemes-depth-moe.yaml", GPU_1207F, "qwen3_30b_a3b",
                       "d983e37bf846d843a221b265d30e9c800d8be331")
    assert GPU_1207F not in {GPU_1207E, GPU_1205D, "GPU-86cacde5-519a-5750-1e49-851f70a81f90"}
    assert sorted(_engine_starts(MOE_1207F)) == [45.7, 46.2, 46.8, 58.9, 103.0]
    text = _readme_text(SESSION_1207F_H100)
    assert "103.0 s cold, then 58.9, 46.8, 46.2 and 45.7 s" in text
    calls = _readme_text(SESSION_1207F)
    assert f"its five engine starts took {sum(_engine_starts(MOE_1207F)):.0f} s" in calls
    assert f"against {sum(_engine_starts(MOE_1205E)):.0f} s there" in calls
    below = _below_floor(MOE_1207F)
    assert [k for k, v in below.items() if v] == [("qwen3_30b_a3b", 32, "eagle3--mv1")] and len(below) == 10


def test_1207f_ngram_l4_sglang_family_on_a_second_h100_is_whole_and_the_readme_table_is_the_records():
    """Addendum 1's order 5: SGLang's n-gram L = 1 and 4 whole on this board, its verdict and table the records."""
    points = _h100_depth_family(NGRAM_L4_1207F, SESSION_1207F_H100, "h200-schemes-ngram-l4.yaml", GPU_1207F, "qwen3b",
                                summary="0 fail, 3 flag, 39 pass, 12 not_applicable", arm="n-gram", cells=8)
    assert sorted(set(points["configured_L"])) == [1.0, 4.0] and set(points["method"]) == {"ngram"}
    assert sorted(_engine_starts(NGRAM_L4_1207F)) == [46.7, 47.7, 48.3, 49.2]


def test_1207f_moe_shifts_from_the_first_board_two_past_the_tolerance_and_the_wait_carries_the_round():
    """compare-evidence against 2026-12-05e: the six shifts the README quotes, B = 1's L = 3 and 4 "does NOT
    reproduce" on the tolerance alone, the rest reproduce; the round split (ADR 0258): the GPU's part within 4.3 %,
    the waiting part the README's ranges; the rounds, powers and baselines the README quotes."""
    table = compare_evidence.compare_sources(MOE_1207F / "results" / "cells", MOE_1205E / "results" / "cells")
    assert table.height == 6 and table["shift_ci_low"].null_count() == 6
    shift = {(r["batch_size"], r["configured_L"]): r["shift"] for r in table.iter_rows(named=True)}
    failed = {(r["batch_size"], r["configured_L"]) for r in table.iter_rows(named=True) if r["reproduces"] is False}
    assert failed == {(1, 3.0), (1, 4.0)} and table["reproduces"].null_count() == 0
    text = _readme_text(SESSION_1207F_H100)
    assert (f"B/A − 1: {_pct(shift[(1, 1.0)])}, {_pct(shift[(1, 3.0)])}, {_pct(shift[(1, 4.0)])} % at B = 1; "
            f"{_pct(shift[(32, 1.0)])}, {_pct(shift[(32, 3.0)])}, {_pct(shift[(32, 4.0)])} % at B = 32") in text
    assert f"shift by {_pct(min(shift.values()))} to {_pct(max(shift.values()))} %" in text
    assert (f"({_pct(shift[(1, 3.0)])} and {_pct(shift[(1, 4.0)])} % against the 5 % "
            "tolerance)") in text
    busy = table["busy_shift"]
    assert f"agrees within {_pct(busy.min())} to {_pct(busy.max())} % on all six configurations" in text
    assert (f"the waiting part was {table['idle_ms_a'].min():.2f}–{table['idle_ms_a'].max():.2f} ms here against "
            f"{table['idle_ms_b'].min():.2f}–{table['idle_ms_b'].max():.2f} ms on the first board") in text
    l4 = table.filter(pl.col("batch_size") == 1, pl.col("configured_L") == 4.0).row(0, named=True)
    assert (f"(B = 1, L = 4: {l4['idle_ms_a']:.2f} against {l4['idle_ms_b']:.2f} ms of a {l4['round_time_ms_a']:.2f} "
            f"against {l4['round_time_ms_b']:.2f} ms round)") in text
    assert max(abs(x) for x in busy) < 0.05 < table["round_shift"].max()
    b1 = table.filter(pl.col("batch_size") == 1)
    shorter = [1 - 1 / (1 + x) for x in b1["round_shift"]]
    more_power = [1 / (1 + x) - 1 for x in b1["power_shift"]]
    assert (f"B = 1 EAGLE3 rounds were {100 * min(shorter):.1f}–{100 * max(shorter):.1f} % shorter than the first "
            f"board's (the first board's {100 * b1['round_shift'].min():.1f}–{100 * b1['round_shift'].max():.1f} % "
            f"longer) at {100 * min(more_power):.1f}–{100 * max(more_power):.1f} % more power") in text
    a = _aggregated(packed.tree_files(MOE_1207F / "results" / "cells", "*/*.parquet"))
    b = _aggregated(packed.tree_files(MOE_1205E / "results" / "cells", "*/*.parquet"))
    base = {bb: [x.filter(pl.col("batch_size") == bb, pl.col("role") != "point") for x in (a, b)] for bb in (1, 32)}
    mj = {bb: [x["mj_per_committed_token"].mean() for x in v] for bb, v in base.items()}
    assert (f"The mean baselines cost {100 * (mj[1][1] / mj[1][0] - 1):.1f} % (B = 1) and "
            f"{100 * (mj[32][1] / mj[32][0] - 1):.1f} % (B = 32) more a token on the first board") in text
    steps = [x["round_time_ms"].mean() for x in base[1]]
    assert f"the baselines' steps {100 * (1 - steps[0] / steps[1]):.1f} % shorter" in text
    starts = [float(np.median(sorted(_engine_starts(f)))) for f in (MOE_1207F, MOE_1205E)]
    assert f"(median {starts[0]:.1f} against {starts[1]:.1f} s)" in text


def test_1207f_ngram_l4_reproduces_on_a_second_board_and_both_parts_of_its_round_agree():
    """compare-evidence against 2026-12-07c's SGLang cells: four shifts, all reproduce; the GPU's part of a round
    within 0.6 %, the waiting part within 0.4 ms; the baselines' and the probe's ranges the README quotes."""
    table = compare_evidence.compare_sources(NGRAM_L4_1207F / "results" / "cells", NGRAM_1207C / "results" / "cells")
    assert table.height == 4 and set(table["engine"]) == {"sglang"} and table["reproduces"].all()
    shift = {(r["batch_size"], r["configured_L"]): r["shift"] for r in table.iter_rows(named=True)}
    text = _readme_text(SESSION_1207F_H100)
    assert (f"B/A − 1: {_pct(shift[(1, 1.0)])}, {_pct(shift[(1, 4.0)])} % at B = 1; {_pct(shift[(32, 1.0)])}, "
            f"{_pct(shift[(32, 4.0)])} % at B = 32") in text
    assert f"shift by {_pct(min(shift.values()))} to {_pct(max(shift.values()))} %" in text
    assert table["busy_shift"].abs().max() < 0.006 and (table["idle_ms_b"] - table["idle_ms_a"]).abs().max() < 0.4
    assert f"The rounds agree within {100 * table['round_shift'].abs().max():.1f} %" in text
    assert f"the GPU's part within {100 * table['busy_shift'].abs().max():.1f} %" in text
    idle = pl.concat([table["idle_ms_a"], table["idle_ms_b"]])
    assert f"{table['idle_ms_a'].min():.2f}–{table['idle_ms_a'].max():.2f} ms a round" in text and idle.max() < 3.6
    bs = {r["batch_size"]: r["baseline_shift"] for r in table.iter_rows(named=True)}
    assert f"cost {100 * bs[1]:.1f} % (B = 1) and {100 * bs[32]:.1f} % (B = 32) more a token" in text
    here = _aggregated(packed.tree_files(NGRAM_L4_1207F / "results" / "cells", "*/*.parquet"))["host_speed_mops"]
    there = _aggregated(packed.tree_files(NGRAM_1207C / "results" / "cells", "*/*.parquet")).filter(
        pl.col("engine") == "sglang")["host_speed_mops"]
    assert (f"The host probe read {here.min():.1f}–{here.max():.1f} M iterations/s here and {there.min():.1f}–"
            f"{there.max():.1f} on the first board's host") in text


def test_1207f_two_board_budgets_are_the_ones_the_readme_the_adr_and_the_index_quote():
    """The MoE pair's energy-ratio board CV (6 df) above the two earlier EAGLE3 pairs' and below vLLM's n-gram pair's;
    the n-gram L = 4 pair's (4 df); each as the README, ADR 0241 addendum 5 and the index's board table quote it."""
    _, ratio, mj_board, mj_restart = _board_budget(MOE_1205E, MOE_1207F)
    assert ratio["includes"] == list(variance.COMPONENTS) and ratio["df"] == 6
    ng = _board_budget(NGRAM_1207C, NGRAM_L4_1207F, engine="sglang")[1]
    assert ng["estimable"] and ng["df"] == 4
    assert 0.91 < ratio["cv_percent"] < 2.95  # between the committed EAGLE3 pairs and the vLLM n-gram pair
    text = _readme_text(SESSION_1207F_H100)
    assert f"has a CV of {ratio['cv_percent']:.2f} % on {ratio['df']} df" in text
    assert _mj_split(mj_board, mj_restart) in text
    assert f"The energy ratio's board CV over the pair: {ng['cv_percent']:.2f} % on {ng['df']} df" in text
    adr = " ".join(ADR_0241.read_text().split())
    assert f"the energy ratio's board component is {ratio['cv_percent']:.2f} % CV on 6 df" in adr
    assert f"The n-gram L = 4 pair sits at {ng['cv_percent']:.2f} % on 4 df" in adr
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    assert f"| SGLang | 2026-12-05e, 2026-12-07f | {ratio['cv_percent']:.2f} % (6 df) |" in index
    assert f"| SGLang | 2026-12-07c, 2026-12-07f | {ng['cv_percent']:.2f} % (4 df) |" in index


# The six H100 pairs of one family on two boards (A the later run, as each README compared them).
TWO_BOARD_PAIRS = (
    ("sliding-window EAGLE3 (vLLM)", SW_1207D, SW_1205G),
    ("MLA EAGLE3 (SGLang)", MLA_1207E, MLA_1205D),
    ("MoE EAGLE3 (SGLang)", MOE_1207F, MOE_1205E),
    ("n-gram L = 1, 4 (SGLang)", NGRAM_L4_1207F, NGRAM_1207C),
    ("n-gram L = 1, 6 (SGLang)", SESSION_1206H_H100 / "ngram-both", NGRAM_1206G),
    ("n-gram L = 1, 6 (vLLM)", NGRAM_1206I, SESSION_1206H_H100 / "ngram-both"),
)
# With 2026-12-07g's vLLM MoE pair: the seven that ADR 0258 addendum 2 and ADR 0083 addendum 3 read.
SEVEN_BOARD_PAIRS = (*TWO_BOARD_PAIRS, ("MoE EAGLE3 (vLLM)", VLLM_MOE_1207G, VLLM_MOE_1205F))


@functools.cache
def _compared(a: Path, b: Path) -> pl.DataFrame:
    """compare-evidence of two committed runs' records, computed once for the tests that read the same pair."""
    return compare_evidence.compare_sources(a / "results" / "cells", b / "results" / "cells")


def _round_split_cells(t: pl.DataFrame) -> str:
    """A compare-evidence table's row in ADR 0258's round-split tables: round shift, busy-part shift (each as a
    range) and the waiting part, A → B."""
    return (f"| {_pct(t['round_shift'].min())} … {_pct(t['round_shift'].max())} % | "
            f"{_pct(t['busy_shift'].min())} … {_pct(t['busy_shift'].max())} % | "
            f"{t['idle_ms_a'].min():.2f}–{t['idle_ms_a'].max():.2f} → {t['idle_ms_b'].min():.2f}–"
            f"{t['idle_ms_b'].max():.2f} |")


def test_adr_0258_round_split_table_is_compare_evidences_on_the_six_pairs():
    """ADR 0258's table: per pair the round shift, the busy part's shift and both sides' waiting parts, as
    compare-evidence gives them; the GPU's part within 4.7 % everywhere while rounds move up to 16.6 %; ADR 0241
    addendum 5's count of ratios past 2.5 % and the least wait shift beside them."""
    adr = ADR_0258.read_text()

    tables = []
    for label, a, b in TWO_BOARD_PAIRS:
        t = _compared(a, b)
        assert t.height in (4, 6) and t["busy_shift"].null_count() == 0, label
        tables.append(t)
        row = next(ln for ln in adr.splitlines() if ln.startswith(f"| {label} |"))
        assert _round_split_cells(t) in row, row
    every = pl.concat(tables)
    assert every.height == 30
    assert every["busy_shift"].abs().max() < 0.048 and every["round_shift"].abs().max() > 0.16
    flat = " ".join(adr.split())
    assert (f"moved by at most {100 * every['busy_shift'].abs().max():.1f} % between boards; the rounds moved by up to "
            f"{100 * every['round_shift'].abs().max():.1f} %") in flat
    moved = every.filter(pl.col("shift").abs() > 0.025)
    wait = (moved["idle_ms_b"] - moved["idle_ms_a"]).abs()
    addendum = " ".join(ADR_0241.read_text().split())
    assert moved.height == 9 and wait.min() > 0.25
    assert (f"every ratio that moved by more than 2.5 % (nine of them) came with a waiting part that moved by "
            f"more than a quarter of a millisecond a round ({wait.min():.2f}–{wait.max():.2f} ms)") in addendum


def test_adr_0258_nvml_busy_against_the_committed_round_profiles():
    """The check ADR 0258 quotes: in every committed round profile, the profiler's GPU time per round over the
    unprofiled round (capped at 1) against the unprofiled NVML utilization of the same batches."""
    files = sorted(ROOT.glob("validation/*/session-*/**/rounds.parquet"))
    frame = pl.concat([pl.read_parquet(f).select("round_ms_unprofiled", "gpu_ms_per_round", "nvml_util_unprofiled")
                       for f in files])
    frame = frame.with_columns((pl.col("gpu_ms_per_round") / pl.col("round_ms_unprofiled")).clip(upper_bound=1.0).alias("busy"))
    diff = frame["nvml_util_unprofiled"] - frame["busy"]
    r = frame.select(pl.corr("nvml_util_unprofiled", "busy")).item()
    adr = " ".join(ADR_0258.read_text().split())
    assert (f"in the {frame.height} committed round profiles ({len(files)} `rounds.parquet`, H100 and H200, both "
            "engines)") in adr
    assert (f"Pearson r {r:.2f}, the difference's median {diff.median():.3f} and median absolute "
            f"{diff.abs().median():.3f}, its range {diff.min():.2f} to +{diff.max():.2f}").replace("-", "−") in adr
    assert r > 0.9



NVML_BUSY_1207F = SESSION_1207F_H100 / "nvml-busy"


def test_1207f_nvml_reads_a_known_duty_cycle_within_the_preregistered_bound_once_the_window_opens_loaded():
    """ADR 0258 addendum 1, plan addenda 2-3: both runs on one board, the probe's grid in order; each row's idle parts
    its own busy fractions; the warm run's NVML busy fraction the record's formula over its kept samples; the
    pre-registered reading (7.5 ms kernels, gaps >= 0.25 ms: idle parts within 0.1 ms) met warm and missed cold, by the
    ranges the README and the ADR quote; the README's table the JSON's rows."""
    from tools.device import nvml_busy_probe as probe

    runs = {k: json.loads((NVML_BUSY_1207F / f"nvml-busy-{k}.json").read_text()) for k in ("cold", "warm")}
    for name, run in runs.items():
        assert [d["uuid"] for d in run["devices"]] == ["GPU-1ee32266-d02d-5fc9-41cb-c880f4debdc9"], name
        assert [(r["kernel_ms"], r["gap_ms"]) for r in run["rows"]] == list(probe.GRID), name
        for r in run["rows"]:
            assert r["event_idle_ms"] == pytest.approx(r["period_ms"] * (1 - r["event_busy"]), rel=1e-9)
            assert r["nvml_idle_ms"] == pytest.approx(r["period_ms"] * (1 - r["nvml_busy"]), abs=1e-12)
            assert r["period_ms"] == pytest.approx(1e3 * r["window_s"] / r["kernels"], rel=1e-9)
    assert runs["warm"]["warmup_s"] == 1.0 and "warmup_s" not in runs["cold"]
    for r in runs["warm"]["rows"]:
        n = len(r["util_samples"])
        timeline = pa.table({"gpu_util_pct": pa.array(r["util_samples"], pa.float64()),
                             "in_window": pa.array([True] * n)})
        assert n >= 29 and sj_records.window_gpu_busy_fraction(timeline) == pytest.approx(r["nvml_busy"], rel=1e-12)

    def off(run: str, rows=lambda r: r["kernel_ms"] == 7.5 and r["gap_ms"] >= 0.25) -> list[float]:
        return [r["nvml_idle_ms"] - r["event_idle_ms"] for r in runs[run]["rows"] if rows(r)]

    warm, cold = [abs(x) for x in off("warm")], off("cold")
    assert max(warm) <= 0.1 < min(cold)  # the pre-registered bound: met warm, missed cold
    every_warm = [abs(x) for x in off("warm", lambda r: True)]
    half = {k: [r["nvml_busy"] - r["event_busy"] for r in runs[k]["rows"] if r["kernel_ms"] == r["gap_ms"]]
            for k in runs}
    readme = _readme_text(SESSION_1207F_H100)
    adr = " ".join(ADR_0258.read_text().split())
    for text in (readme, adr):
        assert f"within 0.1 ms of the events'; here within {min(warm):.3f}–{max(warm):.3f} ms" in readme
        assert f"{min(cold):.2f}–{max(cold):.2f} ms above" in text
    assert f"every row's NVML idle part within {max(every_warm):.3f} ms of the events'" in adr
    assert f"(7.5 ms kernels, gaps 0.25–4 ms: within {min(warm):.3f}–{max(warm):.3f} ms)" in adr
    assert f"within {max(abs(x) for x in half['warm']):.3f} at half duty" in adr
    assert f"({-max(half['cold']):.3f}–{-min(half['cold']):.3f} below them cold" in readme
    first = runs["cold"]["rows"][0]
    assert f"NVML read low everywhere ({first['nvml_busy']:.3f} busy where the events timed {first['event_busy']:.3f})" in adr
    lines = (SESSION_1207F_H100 / "README.md").read_text().splitlines()
    for c, w in zip(runs["cold"]["rows"], runs["warm"]["rows"]):
        assert (f"| {w['kernel_ms']:g} | {w['gap_ms']:g} | {w['period_ms']:.3f} | {w['event_busy']:.3f} | "
                f"{c['nvml_busy']:.3f} | {w['nvml_busy']:.3f} | {w['event_idle_ms']:.3f} | {c['nvml_idle_ms']:.3f} | "
                f"{w['nvml_idle_ms']:.3f} |") in lines


def test_adr_0258_the_committed_h100_cells_all_open_their_windows_after_a_warm_up():
    """ADR 0258 addenda 1 and 2's proviso: every committed H100 cell ran a warm-up of its workload before its window;
    addendum 1 counted the sessions through 2026-12-07f, addendum 2 through 2026-12-07g, addendum 3 through 2026-12-07h,
    addendum 4 through 2026-12-07j, addendum 5 every one since."""
    files = sorted((ROOT / "validation" / "h100-2026-12").glob("session-*/*/results/cells.parquet"))
    every = pl.concat([pl.read_parquet(f, columns=["warmup_skipped", "warmup_s"]) for f in files])
    assert len(files) >= 21
    assert not every["warmup_skipped"].fill_null(False).any() and every["warmup_s"].null_count() == 0
    by_07f = pl.concat([pl.read_parquet(f, columns=["warmup_s"]) for f in files
                        if f.parts[-4] <= "session-2026-12-07f"])
    assert 0 < by_07f.height < every.height
    adr = " ".join(ADR_0258.read_text().split())
    assert (f"the {by_07f.height} committed H100 cells warmed up for {by_07f['warmup_s'].min():.1f}–"
            f"{by_07f['warmup_s'].max():.0f} s, none skipped") in adr
    by_07g = pl.concat([pl.read_parquet(f, columns=["warmup_s"]) for f in files
                        if f.parts[-4] <= "session-2026-12-07g"])
    by_07h = pl.concat([pl.read_parquet(f, columns=["warmup_s"]) for f in files
                        if f.parts[-4] <= "session-2026-12-07h"])
    by_07j = pl.concat([pl.read_parquet(f, columns=["warmup_s"]) for f in files
                        if f.parts[-4] <= "session-2026-12-07j"])
    assert by_07f.height < by_07g.height < by_07h.height < by_07j.height < every.height
    for counted, addendum in ((by_07g, "Addendum 2"), (by_07h, "Addendum 3"), (by_07j, "Addendum 4"),
                              (every, "Addendum 5")):
        text = adr[adr.index(f"**{addendum} "):]
        assert (f"the committed H100 cells are {counted.height}, all warmed up ({counted['warmup_s'].min():.1f}–"
                f"{counted['warmup_s'].max():.0f} s, none skipped)") in text, addendum


def test_adr_0258_the_wait_in_the_moe_records_comes_in_episodes():
    """ADR 0258 addendum 1's last paragraph: the share of in-window NVML samples at 100 % in the MoE family's B = 1
    L = 3 and L = 4 windows on both boards, from the committed timelines; the ADR quotes them."""
    share = {}
    for board, folder in (("05e", MOE_1205E), ("07f", MOE_1207F)):
        t = pl.read_parquet(folder / "results" / "timelines.parquet").filter(pl.col("in_window"))
        for name in ("eagle3--mv3", "eagle3--mv4"):
            u = t.filter(pl.col("packed_file").str.ends_with(f"-b1-random-s0-cg1/{name}.parquet"))["gpu_util_pct"]
            assert u.len() > 150
            share[(board, name)] = round(100 * (u == 100).mean())
    adr = " ".join(ADR_0258.read_text().split())
    assert share[("07f", "eagle3--mv3")] == share[("07f", "eagle3--mv4")]
    assert (f"read 100 % in {share[('05e', 'eagle3--mv3')]} and {share[('05e', 'eagle3--mv4')]} % of their in-window "
            f"samples on 2026-12-05e's board and in {share[('07f', 'eagle3--mv3')]} % of both on 2026-12-07f's") in adr


# 2026-12-07g: vLLM's MoE depth family on a second H100, and the NVML probe on that board


def test_1207g_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(VLLM_MOE_1207G, "h200-schemes-depth-moe.yaml")


def test_1207g_vllm_moe_family_on_a_second_h100_is_whole_and_the_readme_table_is_the_records():
    """PLAN order 4: vLLM's MoE family whole on a board that is not 2026-12-05f's, the first board's verdict, the
    README's table, windows and starts from the records; no cell below its routed-expert floor, as on the first board."""
    _second_h100_board(VLLM_MOE_1207G, SESSION_1207G_H100, "h200-schemes-depth-moe.yaml", GPU_1207G, "qwen3_30b_a3b",
                       "da83e391ba745425626196d74efda6eb15209d40", engine="vllm",
                       summary="0 fail, 2 flag, 40 pass, 12 not_applicable",
                       committed_flags=frozenset({"engine_config_matched"}))
    assert GPU_1207G not in {GPU_1205F, GPU_1207F, GPU_1207E}
    assert sorted(_engine_starts(VLLM_MOE_1207G)) == [85.1, 152.4, 199.6]
    assert sorted(_engine_starts(VLLM_MOE_1205F)) == [88.0, 148.7, 188.6]
    text, calls = _readme_text(SESSION_1207G_H100), _readme_text(SESSION_1207G)
    assert "152.4 s cold, 199.6 s for the EAGLE3 engine, 85.1 s for the closing baselines" in text
    assert (f"its three engine starts took {sum(_engine_starts(VLLM_MOE_1207G)):.0f} s" in calls
            and f"against {sum(_engine_starts(VLLM_MOE_1205F)):.0f} s there" in calls)
    below = _below_floor(VLLM_MOE_1207G)
    assert len(below) == 10 and not any(below.values())


def _vllm_moe_pair() -> tuple[pl.DataFrame, dict[int, dict[str, float]]]:
    """compare-evidence of this run (A) against 2026-12-05f (B), and per B the first board's baselines over this
    board's (B/A − 1 of the mean power and the mean step), from the two records folders."""
    table = _compared(VLLM_MOE_1207G, VLLM_MOE_1205F)
    a, b = (_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet")) for f in (VLLM_MOE_1207G, VLLM_MOE_1205F))
    base = {}
    for bb in (1, 32):
        ra, rb = (x.filter(pl.col("batch_size") == bb, pl.col("role") != "point") for x in (a, b))
        base[bb] = {k: rb[k].mean() / ra[k].mean() - 1 for k in ("mean_power_w", "round_time_ms")}
    return table, base


def _ratio_factors(compared: pl.DataFrame, baseline_shift: dict[str, float]) -> tuple[list[float], list[float]]:
    """A ratio's shift between boards split into its power and time factors: each arm's power and round shift over
    its baselines' (``baseline_shift``: B/A − 1 of their mean power and mean step). Same L on both sides, so the
    ratio is power × time, up to the baselines' mean of products against the product of their means (two a B)."""
    power = [(1 + p) / (1 + baseline_shift["mean_power_w"]) - 1 for p in compared["power_shift"]]
    time_ = [(1 + r) / (1 + baseline_shift["round_time_ms"]) - 1 for r in compared["round_shift"]]
    for p, t, s_ in zip(power, time_, compared["shift"]):
        assert (1 + p) * (1 + t) - 1 == pytest.approx(s_, abs=1e-3)
    return power, time_


def _other_boards_power_and_rounds(compared: pl.DataFrame, baseline_shift: dict[str, float]) -> tuple[str, str]:
    """How a README says the other board's drafted arms differ at one B (compare-evidence rows, L = 1, 3, 4):
    their power against its baselines', and their rounds against its baseline steps'."""
    power, step = baseline_shift["mean_power_w"], baseline_shift["round_time_ms"]
    rounds = compared["round_shift"]
    return (f"drew {100 * compared['power_shift'].min():.1f}–{100 * compared['power_shift'].max():.1f} % more power "
            f"than this board's where its baselines drew {100 * abs(power):.1f} % {'more' if power > 0 else 'less'}",
            f"rounds were {', '.join(_pct(x) for x in rounds[:2])} and {_pct(rounds[2])} % (L = 1, 3, 4) against its "
            f"baseline steps' {_pct(step)} %")


def test_1207g_vllm_moe_b1_reproduces_and_b32_moves_past_the_tolerance_with_the_boards_power():
    """compare-evidence against 2026-12-05f: the six shifts the README quotes; B = 32's L = 1 and 4 "does NOT
    reproduce" on the tolerance alone; B = 1 within 0.9 %; at B = 32 the ratio's shift is the product of a power factor
    and a time factor (each arm's over its baselines'), both as the README quotes them, and the GPU's part of a round
    within the 4.7 % of the earlier pairs."""
    table, base = _vllm_moe_pair()
    assert table.height == 6 and table["shift_ci_low"].null_count() == 6 and table["reproduces"].null_count() == 0
    shift = {(r["batch_size"], r["configured_L"]): r["shift"] for r in table.iter_rows(named=True)}
    failed = {(r["batch_size"], r["configured_L"]) for r in table.iter_rows(named=True) if not r["reproduces"]}
    assert failed == {(32, 1.0), (32, 4.0)}
    assert max(abs(shift[(1, L)]) for L in (1.0, 3.0, 4.0)) < 0.01 < min(shift[(32, L)] for L in (1.0, 3.0, 4.0))
    text = _readme_text(SESSION_1207G_H100)
    assert (f"B/A − 1: {_pct(shift[(1, 1.0)])}, {_pct(shift[(1, 3.0)])}, {_pct(shift[(1, 4.0)])} % at B = 1; "
            f"{_pct(shift[(32, 1.0)])}, {_pct(shift[(32, 3.0)])}, {_pct(shift[(32, 4.0)])} % at B = 32") in text
    assert f"shift by {_pct(min(shift.values()))} to {_pct(max(shift.values()))} %" in text
    assert f"({_pct(shift[(32, 1.0)])} and {_pct(shift[(32, 4.0)])} % against the 5 % tolerance)" in text
    bs = {r["batch_size"]: r["baseline_shift"] for r in table.iter_rows(named=True)}
    assert f"cost {100 * bs[1]:.1f} % (B = 1) and {100 * bs[32]:.1f} % (B = 32) more a token on the first board" in text
    b32 = table.filter(pl.col("batch_size") == 32).sort("configured_L")
    power, time_ = _ratio_factors(b32, base[32])
    assert f"power {', '.join(_pct(x) for x in power)} % and time {', '.join(_pct(x) for x in time_)} %" in text
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"the ratio's power factor moved {_pct(min(power))} to {_pct(max(power))} % and its time factor "
            f"{_pct(min(time_))} to {_pct(max(time_))} %") in adr
    power_said, rounds_said = _other_boards_power_and_rounds(b32, base[32])
    assert power_said in text and f"its {rounds_said}" in text
    busy = {bb: table.filter(pl.col("batch_size") == bb)["busy_shift"] for bb in (1, 32)}
    assert (f"moved {_pct(busy[32].min())} to {_pct(busy[32].max())} % at B = 32 ({_pct(busy[1].min())} to "
            f"{_pct(busy[1].max())} % at B = 1)") in text
    assert table["busy_shift"].abs().max() < 0.047
    assert (f"the waiting part {table['idle_ms_a'].min():.2f}–{table['idle_ms_a'].max():.2f} ms here against "
            f"{table['idle_ms_b'].min():.2f}–{table['idle_ms_b'].max():.2f} ms on the first board") in text
    l4 = table.filter(pl.col("batch_size") == 1, pl.col("configured_L") == 4.0).row(0, named=True)
    assert (f"waited {l4['idle_ms_a']:.2f} ms against {l4['idle_ms_b']:.2f} ms there (compare-evidence's round split, "
            f"ADR 0258), at {100 * (1 - 1 / (1 + l4['power_shift'])):.1f} % less power") in text
    assert f"baseline steps were {100 * base[1]['round_time_ms']:.1f} % longer" in text


def test_1207g_two_board_budget_is_the_one_the_readme_the_adr_and_the_index_quote():
    """The vLLM MoE pair's energy-ratio board CV (6 df), the largest of the four EAGLE3 pairs; mJ per token's board
    and engine-restart rows; each as the README, ADR 0241 addendum 6 and the index's board table quote it."""
    _, ratio, mj_board, mj_restart = _board_budget(VLLM_MOE_1205F, VLLM_MOE_1207G)
    assert ratio["includes"] == list(variance.COMPONENTS) and ratio["df"] == 6
    earlier = []
    for a, b in ((SW_1205G, SW_1207D), (MLA_1205D, MLA_1207E), (MOE_1205E, MOE_1207F)):
        t = variance.budget_of_sources([a / "results" / "cells", b / "results" / "cells"])
        (row,) = t.filter(pl.col("metric") == "energy_ratio", pl.col("component") == "board").iter_rows(named=True)
        earlier.append(row["cv_percent"])
    assert ratio["cv_percent"] > max(earlier)
    text = _readme_text(SESSION_1207G_H100)
    assert (f"has a CV of {ratio['cv_percent']:.2f} % on {ratio['df']} df, the largest of the four EAGLE3 pairs "
            f"({', '.join(f'{x:.2f}' for x in sorted(earlier))} %)") in text
    assert _mj_split(mj_board, mj_restart) in text
    adr = " ".join(ADR_0241.read_text().split())
    assert f"The energy ratio's board component is {ratio['cv_percent']:.2f} % CV on 6 df, the largest" in adr
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    assert f"| vLLM | 2026-12-05f, 2026-12-07g | {ratio['cv_percent']:.2f} % (6 df) |" in index


def test_adr_0258_addendum_2_the_seventh_pair_and_the_counts_over_seven():
    """ADR 0258 addendum 2's row for the vLLM MoE pair; over the seven pairs the GPU's part within 4.7 % and the
    rounds' largest shift, as it says; ADR 0241 addendum 6's count of ratios past 2.5 % and the waits beside them."""
    table = _compared(VLLM_MOE_1207G, VLLM_MOE_1205F)
    adr = ADR_0258.read_text()
    row = next(ln for ln in adr.splitlines() if ln.startswith("| MoE EAGLE3 (vLLM) | 2026-12-07g, 05f |"))
    assert _round_split_cells(table) in row, row
    every = pl.concat([_compared(a, b) for _, a, b in SEVEN_BOARD_PAIRS], how="diagonal_relaxed")
    assert every.height == 36
    flat = " ".join(adr.split())
    assert (f"Over the seven pairs ({every.height} configurations) the part of a round the GPU ran still moved by at "
            f"most {100 * every['busy_shift'].abs().max():.1f} %, the rounds by up to "
            f"{100 * every['round_shift'].abs().max():.1f} %") in flat
    moved = every.filter(pl.col("shift").abs() > 0.025)
    wait = (moved["idle_ms_b"] - moved["idle_ms_a"]).abs()
    assert wait.min() > 0.25
    addendum = " ".join(ADR_0241.read_text().split())
    assert (f"each of the {moved.height} ratios that moved by more than 2.5 % came with a waiting part that moved by "
            f"more than a quarter of a millisecond a round ({wait.min():.2f}–{wait.max():.2f} ms)") in addendum


def _warm_probe(session_h100: Path, gpu: str) -> tuple[dict, list[float], dict, dict[float, float]]:
    """A session's warm NVML probe run on one board (PLAN.md's probe after the campaign): the probe's grid, each row's
    idle parts its busy fractions and its busy fraction the records' own of its samples, the README's table the JSON's
    rows; the pre-registered reading (7.5 ms kernels, gaps >= 0.25 ms: idle parts within 0.1 ms) met. Returns the run,
    those rows' idle-part differences, the 20 ms / 1 ms row and the half-duty rows' busy differences (events − NVML)."""
    from tools.device import nvml_busy_probe as probe

    run = json.loads((session_h100 / "nvml-busy" / "nvml-busy-warm.json").read_text())
    assert [d["uuid"] for d in run["devices"]] == [gpu] and run["warmup_s"] == 1.0
    assert [(r["kernel_ms"], r["gap_ms"]) for r in run["rows"]] == list(probe.GRID)
    lines = (session_h100 / "README.md").read_text().splitlines()
    for r in run["rows"]:
        assert r["event_idle_ms"] == pytest.approx(r["period_ms"] * (1 - r["event_busy"]), rel=1e-9)
        assert r["nvml_idle_ms"] == pytest.approx(r["period_ms"] * (1 - r["nvml_busy"]), abs=1e-12)
        timeline = pa.table({"gpu_util_pct": pa.array(r["util_samples"], pa.float64()),
                             "in_window": pa.array([True] * len(r["util_samples"]))})
        assert sj_records.window_gpu_busy_fraction(timeline) == pytest.approx(r["nvml_busy"], rel=1e-12)
        assert (f"| {r['kernel_ms']:g} | {r['gap_ms']:g} | {r['period_ms']:.3f} | {r['event_busy']:.3f} | "
                f"{r['nvml_busy']:.3f} | {r['event_idle_ms']:.3f} | {r['nvml_idle_ms']:.3f} |") in lines
    off = [abs(r["nvml_idle_ms"] - r["event_idle_ms"]) for r in run["rows"] if r["kernel_ms"] == 7.5 and r["gap_ms"] >= 0.25]
    assert max(off) <= 0.1
    (long,) = [r for r in run["rows"] if (r["kernel_ms"], r["gap_ms"]) == (20.0, 1.0)]
    half = {r["kernel_ms"]: r["event_busy"] - r["nvml_busy"] for r in run["rows"] if r["kernel_ms"] == r["gap_ms"]}
    return run, off, long, half


def test_1207g_nvml_probe_on_a_second_board_meets_the_preregistered_reading():
    """PLAN.md's probe after the campaign on this session's board (_warm_probe), by the range the README and ADR 0258
    addendum 2 quote."""
    run, off, long, half = _warm_probe(SESSION_1207G_H100, GPU_1207G)
    readme = _readme_text(SESSION_1207G_H100)
    adr = " ".join(ADR_0258.read_text().split())
    assert f"is met on this board too: within {min(off):.3f}–{max(off):.3f} ms" in readme
    assert f"within {min(off):.3f}–{max(off):.3f} ms of the events'" in adr
    for text in (readme, adr):
        assert f"the 20 ms kernel with a 1 ms gap read{'s' if text is readme else ''} " \
               f"{long['nvml_idle_ms'] - long['event_idle_ms']:.3f} ms above" in text
    assert (f"lies {half[0.05]:.3f} below the events' at the 0.05 ms grain ({half[0.2]:.3f} and {half[1.0]:.3f} at "
            "0.2 and 1 ms)") in readme
    first_07f = json.loads((NVML_BUSY_1207F / "nvml-busy-warm.json").read_text())["rows"][0]
    assert (f"{run['rows'][0]['event_idle_ms']:.3f} ms of a 7.5 ms kernel's period at no gap, against "
            f"{first_07f['event_idle_ms']:.3f} ms on 2026-12-07f's probe board") in readme


def test_1207g_the_first_boards_drafted_windows_ran_hotter_at_the_same_clock():
    """The README's and ADR 0241 addendum 6's reading of the timelines: per window, the in-window means of temperature,
    SM clock, SM activity and power on both boards; the hotter windows are the ones the README names, at the same clock."""
    def windows(folder: Path) -> pl.DataFrame:
        t = pl.read_parquet(folder / "results" / "timelines.parquet").filter(pl.col("in_window"))
        return t.with_columns(pl.col("packed_file").str.extract(r"-b(\d+)-random").cast(pl.Int64).alias("batch_size"),
                              pl.col("packed_file").str.extract(r"/([^/]+)\.parquet$").alias("cell_name")).group_by(
            "batch_size", "cell_name").agg(pl.col("temperature_c").mean(), pl.col("sm_clock_mhz").mean(),
                                           pl.col("sm_active_pct").mean(), pl.col("power_w").mean())

    here, first = windows(VLLM_MOE_1207G), windows(VLLM_MOE_1205F)
    both = here.join(first, on=["batch_size", "cell_name"], suffix="_b").with_columns(
        (pl.col("temperature_c_b") - pl.col("temperature_c")).alias("hotter"),
        (pl.col("sm_active_pct_b") - pl.col("sm_active_pct")).abs().alias("activity"),
        (pl.col("power_w_b") / pl.col("power_w") - 1).alias("power"))
    assert both.height == 10
    named = (pl.col("cell_name").is_in(["eagle3--mv3", "eagle3--mv4"])
             | ((pl.col("batch_size") == 32) & (pl.col("cell_name") == "eagle3--mv1")))
    hot, rest = both.filter(named), both.filter(~named)
    assert hot.height == 5 and hot["hotter"].min() > 5 > rest["hotter"].abs().max()
    clocks = pl.concat([both["sm_clock_mhz"], both["sm_clock_mhz_b"]])
    assert clocks.max() - clocks.min() < 20  # "the same SM clock": within 1 % on both boards
    text = _readme_text(SESSION_1207G_H100)
    assert f"(window means {clocks.min():,.0f}–{clocks.max():,.0f} MHz on both boards)" in text
    assert (f"ran {hot['hotter'].min():.1f}–{hot['hotter'].max():.1f} °C hotter than this board's and drew "
            f"{100 * hot['power'].min():.1f}–{100 * hot['power'].max():.1f} % more (timeline means), with SM activity "
            f"within {hot['activity'].max():.1f} points") in text
    assert f"ran {_pct(rest['hotter'].min() / 100)} to {_pct(rest['hotter'].max() / 100)} °C from this board's" in text
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"drafted windows ran {hot['hotter'].min():.1f}–{hot['hotter'].max():.1f} °C hotter (its baselines within "
            f"{rest.filter(pl.col('cell_name').str.starts_with('baseline'))['hotter'].abs().max():.1f} °C") in adr


def test_adr_0083_addendum_3_temperature_goes_with_power_over_the_seven_pairs():
    """ADR 0083 addendum 3's correlations over the seven two-board H100 pairs, from compare-evidence's temperature
    columns: the points' temperature shift against their power shift, and their shift over their baselines' against
    the ratio's shift; the sliding-window pair's range as quoted."""
    tables = [_compared(a, b) for _, a, b in SEVEN_BOARD_PAIRS]
    every = pl.concat(tables, how="diagonal_relaxed").with_columns(
        (pl.col("max_temperature_c_b") - pl.col("max_temperature_c_a")).alias("hotter"),
        (pl.col("baseline_max_temperature_c_b") - pl.col("baseline_max_temperature_c_a")).alias("base_hotter"))
    assert every.height == 36 and every["hotter"].null_count() == 0 and every["base_hotter"].null_count() == 0
    power = every.select(pl.corr("hotter", "power_shift")).item()
    apart = every.select(pl.corr(pl.col("hotter") - pl.col("base_hotter"), "shift")).item()
    assert 0.3 < power < 0.8 and 0.3 < apart < 0.8
    adr = " ".join(next((ROOT / "docs" / "adr").glob("0083-*.md")).read_text().split())
    assert (f"the points' temperature shift goes with their power shift at Pearson r {power:.2f}, and the points' shift "
            f"over their baselines' with the ratio's shift at r {apart:.2f}") in adr
    sw = tables[0]
    hot = sw["max_temperature_c_b"] - sw["max_temperature_c_a"]
    assert (f"arms ran {hot.min():.0f}–{hot.max():.0f} °C hotter on one board with ratios within "
            f"{100 * sw['shift'].abs().max():.1f} %") in adr and sw["round_shift"].max() < 0


# 2026-12-07h: SGLang's MoE depth family on a third H100, and the NVML probe on that board


def test_1207h_h100_config_is_the_preregistered_one():
    _assert_shipped_copy(MOE_1207H, "h200-schemes-depth-moe.yaml")


def test_1207h_moe_family_on_a_third_h100_is_whole_and_the_readme_table_is_the_records():
    """PLAN order 4: the SGLang MoE family whole on a board that is neither earlier one, their verdict, the README's
    table, windows and starts from the records; B = 32, L = 1 alone below its routed-expert floor, as on both."""
    _second_h100_board(MOE_1207H, SESSION_1207H_H100, "h200-schemes-depth-moe.yaml", GPU_1207H, "qwen3_30b_a3b",
                       "d933148dbbba3cc0a92dfbf5113b73734cb879a1")
    assert GPU_1207H not in {GPU_1207F, GPU_1207G, "GPU-86cacde5-519a-5750-1e49-851f70a81f90"}
    starts = sorted(_engine_starts(MOE_1207H))
    assert starts == [66.7, 71.9, 74.8, 98.6, 155.8]
    text, calls = _readme_text(SESSION_1207H_H100), _readme_text(SESSION_1207H)
    assert "155.8 s cold, then 98.6, 74.8, 71.9 and 66.7 s" in text
    assert (f"its five engine starts took {sum(starts):.0f} s (155.8 s cold) against "
            f"{sum(_engine_starts(MOE_1207F)):.0f} s and {sum(_engine_starts(MOE_1205E)):.0f} s there") in calls
    below = _below_floor(MOE_1207H)
    assert [k for k, v in below.items() if v] == [("qwen3_30b_a3b", 32, "eagle3--mv1")] and len(below) == 10


def test_1207h_the_third_board_sides_with_the_second_and_the_first_is_the_b1_outlier():
    """compare-evidence against each earlier board: the README's table of ratios, shifts and the nearer board; all
    twelve verdicts reproduce on the tolerance alone; within 2.5 % of 2026-12-07f's on all six, of 2026-12-05e's on
    the three the README names; the round split and the waits the README and ADR 0241 addendum 7 quote."""
    second, first = _compared(MOE_1207H, MOE_1207F), _compared(MOE_1207H, MOE_1205E)
    for t in (second, first):
        assert t.height == 6 and t["reproduces"].all() and t["shift_ci_low"].null_count() == 6
    key = ["batch_size", "configured_L"]
    both = second.select(*key, "energy_ratio_a", pl.col("energy_ratio_b").alias("r07f"), pl.col("shift").alias("s07f")
                         ).join(first.select(*key, pl.col("energy_ratio_b").alias("r05e"), pl.col("shift").alias("s05e")),
                                on=key).sort(key)
    lines = (SESSION_1207H_H100 / "README.md").read_text().splitlines()
    for r in both.iter_rows(named=True):
        nearer = "2026-12-07f" if abs(r["r07f"] - r["energy_ratio_a"]) < abs(r["r05e"] - r["energy_ratio_a"]) else "2026-12-05e"
        assert (f"| {r['batch_size']} | {r['configured_L']:.0f} | {r['energy_ratio_a']:.3f}× | {r['r07f']:.3f}× | "
                f"{_pct(r['s07f'])} % | {r['r05e']:.3f}× | {_pct(r['s05e'])} % | {nearer} |") in lines, r
    assert both["s07f"].abs().max() < 0.025 and both.filter(pl.col("batch_size") == 1)["s07f"].abs().max() < 0.012
    within = both.filter(pl.col("s05e").abs() < 0.025).select(key).rows()
    assert within == [(1, 1.0), (32, 3.0), (32, 4.0)]
    text = _readme_text(SESSION_1207H_H100)
    assert f"(largest {100 * both['s07f'].abs().max():.1f} %)" in text
    assert f"B = 1, L = 3 against 2026-12-05e by {100 * both['s05e'].max():.2f} %, just inside" in text
    b1 = both.filter(pl.col("batch_size") == 1)
    assert min(b1["s05e"]) > 0.015 and max(b1["s05e"]) < 0.05
    assert (f"agrees within {_pct(second['busy_shift'].min())} to {_pct(second['busy_shift'].max())} % with "
            f"2026-12-07f's and {_pct(first['busy_shift'].min())} to {_pct(first['busy_shift'].max())} % with "
            "2026-12-05e's on all six configurations") in text
    assert (f"the waiting part was {second['idle_ms_a'].min():.2f}–{second['idle_ms_a'].max():.2f} ms here, "
            f"{second['idle_ms_b'].min():.2f}–{second['idle_ms_b'].max():.2f} ms on 2026-12-07f's board and "
            f"{first['idle_ms_b'].min():.2f}–{first['idle_ms_b'].max():.2f} ms on 2026-12-05e's") in text
    base = {bb: second.filter(pl.col("batch_size") == bb).row(0, named=True) for bb in (1, 32)}
    assert f"({base[1]['baseline_idle_ms_a']:.2f} against {base[1]['baseline_idle_ms_b']:.2f} ms a step" in text
    adr = " ".join(ADR_0241.read_text().split())
    b1_07h = second.filter(pl.col("batch_size") == 1)
    assert (f"its B = 1 rounds waited {b1_07h['idle_ms_a'].min():.2f}–{b1_07h['idle_ms_a'].max():.2f} ms where "
            f"2026-12-07f's waited {b1_07h['idle_ms_b'].min():.2f}–{b1_07h['idle_ms_b'].max():.2f} ms") in adr
    assert (f"lie within {100 * both['s07f'].abs().max():.1f} % of 2026-12-07f's (all six inside the plan's 2.5 %) and "
            f"{100 * b1['s05e'].min():.1f}–{100 * b1['s05e'].max():.1f} % from 2026-12-05e's at B = 1") in adr
    # B = 32, L = 1: the first board's baselines, not its point, and a wait under a quarter millisecond
    l1 = first.filter(pl.col("batch_size") == 32, pl.col("configured_L") == 1.0).row(0, named=True)
    assert abs(l1["idle_ms_b"] - l1["idle_ms_a"]) < 0.25 and abs(l1["shift"]) > 0.025
    assert (f"its L = 1 point cost {l1['mj_per_committed_token_b']:.1f} against {l1['mj_per_committed_token_a']:.1f} "
            f"mJ a token here, its B = 32 baselines {100 * l1['baseline_shift']:.1f} % more") in text
    a, b = (_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet")) for f in (MOE_1207H, MOE_1205E))
    power = [x.filter(pl.col("batch_size") == 32, pl.col("role") != "point")["mean_power_w"].mean() for x in (b, a)]
    assert f"({power[0]:.1f} against {power[1]:.1f} W at the same 22.2 ms step" in text
    assert f"there its baselines drew {100 * (power[0] / power[1] - 1):.1f} % more power at the same step" in adr


def test_1207h_three_board_budget_is_the_one_the_readme_the_adr_and_the_index_quote():
    """The variance budget over the three boards: the energy ratio's board CV on 12 df (three boards, six
    configurations) below the first pair's; mJ per token's board and engine-restart rows; as quoted."""
    _, ratio, mj_board, mj_restart = _board_budget(MOE_1205E, MOE_1207F, MOE_1207H)
    first_pair = _board_budget(MOE_1205E, MOE_1207F)[1]
    assert ratio["includes"] == list(variance.COMPONENTS) and ratio["df"] == 12 and first_pair["df"] == 6
    assert ratio["cv_percent"] < first_pair["cv_percent"]
    text = _readme_text(SESSION_1207H_H100)
    assert (f"has a CV of {ratio['cv_percent']:.2f} % on {ratio['df']} df, against {first_pair['cv_percent']:.2f} % on "
            f"6 df from the first two boards alone") in text
    assert _mj_split(mj_board, mj_restart, "engine restart: the opening against the closing baselines") in text
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"the energy ratio's board component is {ratio['cv_percent']:.2f} % CV on 12 df "
            f"({first_pair['cv_percent']:.2f} % on 6 df from the first two)") in adr
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    assert f"| SGLang | 2026-12-05e, 2026-12-07f, 2026-12-07h | {ratio['cv_percent']:.2f} % (12 df) |" in index


def test_adr_0258_addendum_3_the_third_boards_two_pairs():
    """ADR 0258 addendum 3's rows for the third board against each earlier one, from compare-evidence; the GPU's part
    within 2.9 % of both, as it says."""
    adr = ADR_0258.read_text()
    busy = []
    for other, label in ((MOE_1207F, "07f"), (MOE_1205E, "05e")):
        t = _compared(MOE_1207H, other)
        row = next(ln for ln in adr.splitlines() if ln.startswith(f"| MoE EAGLE3 (SGLang) | 2026-12-07h, {label} |"))
        assert _round_split_cells(t) in row, row
        busy.append(t["busy_shift"].abs().max())
    assert f"the GPU's part of a round within {100 * max(busy):.1f} % of both" in " ".join(adr.split())
    assert max(busy) < 0.047  # inside the 4.7 % of every earlier pair (addendum 2)


def _probe_as_quoted(session_h100: Path, session: Path, gpu: str, board: str, adr_addendum: str) -> tuple[dict, str]:
    """A session's warm probe (_warm_probe) by the range its README, its calls table and ADR 0258's addendum quote.
    Returns the run and the README; the events' idle part at no gap is each session's own comparison."""
    run, off, long, half = _warm_probe(session_h100, gpu)
    readme, calls = _readme_text(session_h100), _readme_text(session)
    adr = " ".join(ADR_0258.read_text().split())
    adr = adr[adr.index(f"**{adr_addendum} "):]
    assert f"is met on a {board} board: within {min(off):.3f}–{max(off):.3f} ms" in readme
    assert f"NVML's idle part within {min(off):.3f}–{max(off):.3f} ms of the events'" in adr
    assert f"within {max(off):.3f} ms of the events' idle part" in calls
    below = long["event_idle_ms"] - long["nvml_idle_ms"]
    assert below > 0 and f"1 ms gap reads {below:.3f} ms below" in readme and f"1 ms gap read {below:.3f} ms below" in adr
    assert (f"lies {half[0.05]:.3f} below the events' at the 0.05 ms grain ({half[0.2]:.3f} and {half[1.0]:.3f} at "
            "0.2 and 1 ms)") in readme
    return run, readme


def test_1207h_nvml_probe_on_a_third_board_meets_the_preregistered_reading():
    """PLAN.md's probe after the campaign on this session's board, as quoted (ADR 0258 addendum 3)."""
    run, readme = _probe_as_quoted(SESSION_1207H_H100, SESSION_1207H, GPU_1207H, "third", "Addendum 3")
    first_07f = json.loads((NVML_BUSY_1207F / "nvml-busy-warm.json").read_text())["rows"][0]
    assert (f"at no gap is {run['rows'][0]['event_idle_ms']:.3f} ms here (launch overhead on this host), against "
            f"{first_07f['event_idle_ms']:.3f} ms on 2026-12-07f's probe board") in readme


# 2026-12-07j: vLLM's MoE depth family on a third H100, again on that board (PLAN addendum 1), and the NVML probe



def test_1207j_the_machine_came_at_call_1_and_the_addendum_came_before_the_rerun():
    """The machine from call 1, no refusal (the budget chain itself: test_one_machine_sessions_device_time_adds_up);
    PLAN.md's one addendum governs call 17, and the rerun's records carry the addendum's commit, the first run's the
    plan's."""
    assert _budgets_left(_readme_text(SESSION_1207J))[:2] == [1800, 1711]  # the first call got the machine
    plan = (SESSION_1207J / "PLAN.md").read_text()
    assert re.findall(r"^## Addendum (\d) \([\d:]+ UTC, before call (\d+)\)", plan, re.M) == [("1", "17")]
    commits = [set(_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet"))["git_commit"])
               for f in (VLLM_MOE_1207J, VLLM_MOE_1207J_RERUN)]
    assert commits == [{"454e1f8e92e23423f7a57b0ccce2d920759cb5ee"}, {"e7ddff3c5d78eddbb22cdf6a3316964fe3b2f3ed"}]
    readme = _readme_text(SESSION_1207J)
    assert "(committed at 454e1f8," in readme and "**addendum 1** (e7ddff3, committed before call 17)" in readme
    commands = (SESSION_1207J / "device-logs" / "commands.txt").read_text()
    assert "SPECJOULE_GIT_COMMIT=e7ddff3c5d78eddbb22cdf6a3316964fe3b2f3ed" in commands
    assert "gated_families.sh $DL 'config/h200-schemes-depth-moe.yaml vllm-qwen3_30b_a3b-closed-cg1 679'" in commands


def test_1207j_h100_configs_are_the_preregistered_one():
    for folder in (VLLM_MOE_1207J, VLLM_MOE_1207J_RERUN):
        _assert_shipped_copy(folder, "h200-schemes-depth-moe.yaml")


def test_1207j_vllm_moe_family_on_a_third_h100_is_whole_and_the_readme_table_is_the_records():
    """PLAN order 4: vLLM's MoE family whole on a board neither earlier run used, their verdict, the README's table,
    windows and starts from the records; no cell below its routed-expert floor, as on both."""
    _second_h100_board(VLLM_MOE_1207J, SESSION_1207J_H100, "h200-schemes-depth-moe.yaml", GPU_1207J, "qwen3_30b_a3b",
                       "454e1f8e92e23423f7a57b0ccce2d920759cb5ee", engine="vllm",
                       summary="0 fail, 2 flag, 40 pass, 12 not_applicable",
                       committed_flags=frozenset({"engine_config_matched"}))
    assert GPU_1207J not in {GPU_1205F, GPU_1207G}
    starts = sorted(_engine_starts(VLLM_MOE_1207J))
    assert starts == [62.4, 104.3, 111.9]
    text, calls = _readme_text(SESSION_1207J_H100), _readme_text(SESSION_1207J)
    assert "104.3 s cold, 111.9 s for the EAGLE3 engine, 62.4 s for the closing baselines" in text
    assert (f"its three engine starts took {sum(starts):.0f} s (104.3 s cold) against "
            f"{sum(_engine_starts(VLLM_MOE_1207G)):.0f} s and {sum(_engine_starts(VLLM_MOE_1205F)):.0f} s there") in calls
    below = _below_floor(VLLM_MOE_1207J)
    assert len(below) == 10 and not any(below.values())


def test_1207j_rerun_on_the_same_board_reproduces_every_ratio_within_the_readme_range():
    """PLAN addendum 1: the same family again on the same board, whole, the same verdict and table form; against the
    first run every ratio within 0.61 % and the GPU's part of a round within 0.3 %, as the README quotes them."""
    _h100_depth_family(VLLM_MOE_1207J_RERUN, SESSION_1207J_H100, "h200-schemes-depth-moe.yaml", GPU_1207J,
                       "qwen3_30b_a3b", engine="vllm", summary="0 fail, 2 flag, 40 pass, 12 not_applicable",
                       committed_flags=frozenset({"engine_config_matched"}), arm="rerun EAGLE3")
    starts = sorted(_engine_starts(VLLM_MOE_1207J_RERUN))
    assert starts == [56.4, 110.6, 133.1]
    text = _readme_text(SESSION_1207J_H100)
    assert "110.6 s cold, 133.1 s for the EAGLE3 engine, 56.4 s for the closing baselines" in text
    assert f"The rerun's starts took {sum(starts):.0f} s (110.6 s cold" in _readme_text(SESSION_1207J)
    df = _aggregated(packed.tree_files(VLLM_MOE_1207J_RERUN / "results" / "cells", "*/*.parquet"))
    assert _windows_quoted(df) in text
    t = _same_board_rerun(VLLM_MOE_1207J, VLLM_MOE_1207J_RERUN, GPU_1207J, 6)
    s = t["shift"].to_list()
    assert (f"shift by {', '.join(_pct(x) for x in s[:3])} % at B = 1 and {', '.join(_pct(x) for x in s[3:])} % at "
            f"B = 32 (largest {100 * t['shift'].abs().max():.2f} %)") in text
    assert t["shift"].abs().max() < 0.0062
    assert f"the GPU ran within {100 * t['busy_shift'].abs().max():.1f} % on every configuration" in text


def test_1207j_the_third_board_sides_with_07g_and_05f_is_the_b32_outlier():
    """PLAN order 4's reading: compare-evidence against each earlier board, the README's table with the nearer board;
    within 2.5 % of 2026-12-07g's on all six, of 2026-12-05f's on B = 1, L = 1 alone; B = 32 against 2026-12-05f
    "does NOT reproduce" on the tolerance; the ratio's power and time factors, the GPU's part, the waits and the
    temperatures the README and ADR 0241 addendum 8 quote."""
    g, f = (_compared(VLLM_MOE_1207J, x).sort("batch_size", "configured_L") for x in (VLLM_MOE_1207G, VLLM_MOE_1205F))
    lines = _readme_text(SESSION_1207J_H100)
    table_lines = (SESSION_1207J_H100 / "README.md").read_text().splitlines()
    for rg, rf in zip(g.iter_rows(named=True), f.iter_rows(named=True)):
        a = rg["energy_ratio_a"]
        nearer = "2026-12-07g" if abs(rg["energy_ratio_b"] - a) < abs(rf["energy_ratio_b"] - a) else "2026-12-05f"
        assert (f"| {rg['batch_size']} | {rg['configured_L']:.0f} | {a:.3f}× | {rg['energy_ratio_b']:.3f}× | "
                f"{_pct(rg['shift'])} % | {rf['energy_ratio_b']:.3f}× | {_pct(rf['shift'])} % | {nearer} |") in table_lines
    assert g["reproduces"].all() and g["shift"].abs().max() < 0.025
    assert f"lie within the plan's 2.5 % of 2026-12-07g's (largest {100 * g['shift'].abs().max():.1f} %)" in lines
    key = ["batch_size", "configured_L"]
    assert f.filter(pl.col("shift").abs() < 0.025).select(key).rows() == [(1, 1.0)]
    assert f.filter(~pl.col("reproduces")).select(key).rows() == [(32, 1.0), (32, 3.0), (32, 4.0)]
    l3 = f.filter(pl.col("batch_size") == 1, pl.col("configured_L") == 3.0)["shift"][0]
    assert f"(B = 1, L = 3 misses it by {100 * l3:.2f} %)" in lines
    b32g, b32f = (x.filter(pl.col("batch_size") == 32) for x in (g, f))
    assert f"two boards agree within {100 * b32g['shift'].abs().max():.1f} % at B = 32" in lines
    assert (f"the third sits {100 * b32f['shift'].min():.1f}–{100 * b32f['shift'].max():.1f} % above both"
            .replace("the third sits", "and the third sits")) in lines
    # the ratio's two factors at B = 32 against 2026-12-05f: each arm's power and round over its own baselines'
    a_rec, f_rec = (_aggregated(packed.tree_files(x / "results" / "cells", "*/*.parquet"))
                    for x in (VLLM_MOE_1207J, VLLM_MOE_1205F))
    base = {k: f_rec.filter(pl.col("batch_size") == 32, pl.col("role") != "point")[k].mean()
            / a_rec.filter(pl.col("batch_size") == 32, pl.col("role") != "point")[k].mean() - 1
            for k in ("mean_power_w", "round_time_ms")}
    power, time_ = _ratio_factors(b32f, base)
    assert min(power) > max(time_) - 0.01  # power first
    assert f"power {', '.join(_pct(x) for x in power)} % and time {', '.join(_pct(x) for x in time_)} %" in lines
    power_said, rounds_said = _other_boards_power_and_rounds(b32f, base)
    assert power_said in lines and rounds_said in lines
    assert (f"moved {_pct(b32f['busy_shift'].min())} to {_pct(b32f['busy_shift'].max())} % at B = 32 against "
            f"2026-12-05f ({_pct(g['busy_shift'].min())} to {_pct(g['busy_shift'].max())} % against 2026-12-07g") in lines
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"the power factor moved {_pct(min(power))} to {_pct(max(power))} % and the time factor "
            f"{_pct(min(time_))} to {_pct(max(time_))} %") in adr
    # temperature: this board's drafted B = 32 windows as hot as 2026-12-05f's, its ratios with 2026-12-07g's
    hot = [int(x) for x in b32f["max_temperature_c_a"]]
    assert (f"reached {hot[0]}, {hot[1]} and {hot[2]} °C against 2026-12-05f's "
            f"{', '.join(str(int(x)) for x in b32f['max_temperature_c_b'][:2])} and {int(b32f['max_temperature_c_b'][2])} °C"
            ) in lines
    assert abs(max(b32f["max_temperature_c_a"]) - max(b32f["max_temperature_c_b"])) <= 2
    cooler = [a - b for a, b in zip(b32g["max_temperature_c_a"], b32g["max_temperature_c_b"])]
    assert f"whose windows ran {min(cooler):.0f}–{max(cooler):.0f} °C cooler" in adr
    # B = 1: the wait
    b1 = {n: x.filter(pl.col("batch_size") == 1) for n, x in (("g", g), ("f", f))}
    assert (f"rounds were {', '.join(f'{100 * x:.1f}' for x in b1['g']['round_shift'][:2])} and "
            f"{100 * b1['g']['round_shift'][2]:.1f} % longer") in lines
    assert (f"the waiting part was {b1['g']['idle_ms_a'].min():.2f}–{b1['g']['idle_ms_a'].max():.2f} ms here, "
            f"{b1['g']['idle_ms_b'].min():.2f}–{b1['g']['idle_ms_b'].max():.2f} ms on 2026-12-07g's board and "
            f"{b1['f']['idle_ms_b'].min():.2f}–{b1['f']['idle_ms_b'].max():.2f} ms on 2026-12-05f's") in lines
    less = [-x for x in b1["g"]["power_shift"]]
    assert f"at {100 * min(less):.1f}–{100 * max(less):.1f} % less power there" in lines
    # addendum 6's count: B = 32, L = 1 moved past 2.5 % with a wait under a quarter millisecond apart
    l1 = b32f.filter(pl.col("configured_L") == 1.0).row(0, named=True)
    assert abs(l1["idle_ms_b"] - l1["idle_ms_a"]) < 0.25 and l1["shift"] > 0.025
    assert f"B = 32, L = 1 moved {_pct(l1['shift'])} % from 2026-12-05f with a wait {l1['idle_ms_b'] - l1['idle_ms_a']:.2f} ms apart" in adr


def test_1207j_budget_separates_run_from_board_as_the_readme_the_adr_and_the_index_quote():
    """The variance budget over the three boards (board CV on 12 df) and with the rerun as a fourth folder (board and
    run rows of their own, run far below board); each as quoted."""
    _, ratio3, mj_board3, mj_restart3 = _board_budget(VLLM_MOE_1205F, VLLM_MOE_1207G, VLLM_MOE_1207J)
    first_pair = _board_budget(VLLM_MOE_1205F, VLLM_MOE_1207G)[1]
    assert ratio3["df"] == 12 and ratio3["includes"] == list(variance.COMPONENTS) and first_pair["df"] == 6
    rows4, board4, mj_board4, mj_restart4 = _board_budget(VLLM_MOE_1205F, VLLM_MOE_1207G, VLLM_MOE_1207J,
                                                          VLLM_MOE_1207J_RERUN)
    run4 = rows4[("energy_ratio", "run")]
    assert board4["includes"] == ["board"] and run4["includes"] == ["run", "engine_restart", "seed", "window"]
    assert run4["df"] == 6 and run4["cv_percent"] * 5 < board4["cv_percent"]
    assert board4["share"] > 0.95
    mj_run4 = rows4[("mj_per_committed_token", "run")]
    text = _readme_text(SESSION_1207J_H100)
    assert (f"has a CV of {ratio3['cv_percent']:.2f} % on 12 df, against {first_pair['cv_percent']:.2f} % on 6 df "
            "from the first two boards alone") in text
    assert _mj_split(mj_board3, mj_restart3, "engine restart: the opening against the closing baselines") in text
    assert (f"**board {board4['cv_percent']:.2f} % CV on {board4['df']} df and run {run4['cv_percent']:.2f} % on "
            f"{run4['df']} df**") in text
    assert mj_run4["cv_percent"] == 0 and mj_run4["variance_raw"] < 0
    assert (f"board {mj_board4['cv_percent']:.2f} % on {mj_board4['df']} df, run 0 (a negative estimate, counted as 0) "
            f"on {mj_run4['df']} and engine restart {mj_restart4['cv_percent']:.2f} % on {mj_restart4['df']} df") in text
    assert f"the board is {100 * board4['share']:.0f} % of an energy ratio's variance" in text
    adr = " ".join(ADR_0241.read_text().split())
    assert (f"the energy ratio's board component is {board4['cv_percent']:.2f} % CV on 12 df and its run component "
            f"(engine restart, seed and window inside it) {run4['cv_percent']:.2f} % on 6 df") in adr
    assert (f"over the three boards alone the board component is {ratio3['cv_percent']:.2f} % CV on 12 df "
            f"({first_pair['cv_percent']:.2f} % on 6 df from the first two)") in adr
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    assert f"| vLLM | 2026-12-05f, 2026-12-07g, 2026-12-07j | {ratio3['cv_percent']:.2f} % (12 df) |" in index
    flat = " ".join(index.split())
    assert (f"the energy ratio's board component is {board4['cv_percent']:.2f} % CV (12 df) and its run component "
            f"{run4['cv_percent']:.2f} % (6 df;") in flat


def test_adr_0258_addendum_4_the_third_boards_pairs_and_the_rerun():
    """ADR 0258 addendum 4's rows, from compare-evidence: the GPU's part inside the 4.7 % of every earlier pair against
    either board, and within 0.3 % on a rerun of one."""
    adr = ADR_0258.read_text()
    busy = {}
    for other, label in ((VLLM_MOE_1207G, "07g"), (VLLM_MOE_1205F, "05f"), (VLLM_MOE_1207J_RERUN, "07j rerun")):
        t = _compared(VLLM_MOE_1207J, other)
        row = next(ln for ln in adr.splitlines() if ln.startswith(f"| MoE EAGLE3 (vLLM) | 2026-12-07j, {label} |"))
        assert _round_split_cells(t) in row, row
        busy[label] = t["busy_shift"].abs().max()
    assert max(busy.values()) < 0.047 and busy["07j rerun"] < 0.0035 < busy["05f"]
    flat = " ".join(adr.split())
    assert f"the GPU's part within {100 * busy['07g']:.1f} %" in flat
    assert f"moved up to {100 * busy['05f']:.1f} % at B = 32" in flat
    assert f"moves the GPU's part by {100 * busy['07j rerun']:.1f} % at most" in flat


def test_1207j_nvml_probe_on_a_fourth_board_meets_the_preregistered_reading():
    """PLAN.md's probe after the campaign on this session's board, as quoted (ADR 0258 addendum 4)."""
    run, readme = _probe_as_quoted(SESSION_1207J_H100, SESSION_1207J, GPU_1207J, "fourth", "Addendum 4")
    _no_gap_idle_as_quoted(run, readme, "2026-12-07g")


def _no_gap_idle_as_quoted(run: dict, readme: str, second: str) -> None:
    """A warm probe's events' idle part at no gap (the host's launch overhead) against 2026-12-07f's probe board and
    a second earlier session's, as its README compares them."""
    first_07f = json.loads((NVML_BUSY_1207F / "nvml-busy-warm.json").read_text())["rows"][0]
    other = json.loads((ROOT / "validation" / "h100-2026-12" / f"session-{second}" / "nvml-busy" /
                        "nvml-busy-warm.json").read_text())["rows"][0]
    assert (f"at no gap is {run['rows'][0]['event_idle_ms']:.3f} ms here (launch overhead on this host), against "
            f"{first_07f['event_idle_ms']:.3f} ms on 2026-12-07f's probe board and {other['event_idle_ms']:.3f} ms on "
            f"{second}'s") in readme


# 2026-12-08: SGLang's n-gram L = 4 family on a third board for it, the same
# family again on that board (PLAN order 5, planned in advance), and the NVML probe



def test_1208_five_calls_found_no_machine_and_the_plan_named_the_rerun_before_call_1():
    """Calls 1–5 cost the budget without a machine (four refused starts, one inside a pause), call 6 got it; the
    plan, committed before call 1, names order 5 (the rerun) with its gate, and no addendum was needed; both runs'
    records carry the plan's commit; the command log starts order 5 from the poll as the plan says."""
    text = _readme_text(SESSION_1208)
    assert _budgets_left(text)[:12:2] == [1800, 1709, 1619, 1529, 1514, 1424]
    lines = (SESSION_1208 / "README.md").read_text().splitlines()
    for call in range(1, 6):
        row = next(ln for ln in lines if ln.startswith(f"| {call} |"))
        assert "refused" in row or "no device machine was asked for" in row or "could be started" in row, row
    plan = (SESSION_1208 / "PLAN.md").read_text()
    assert "## Addendum" not in plan
    flat_plan = " ".join(plan.split())
    assert ("| 5 | the same family again on the same board: a fresh copy (`/tmp/work/eng2`), a fresh results folder, "
            "every engine restarted | — | 565 s, the same `DL` |") in flat_plan
    assert "(committed at 9d5bb9b, 00:35 UTC, before call 1)" in text
    for folder in (NGRAM_L4_1208, NGRAM_L4_1208_RERUN):
        df = _aggregated(packed.tree_files(folder / "results" / "cells", "*/*.parquet"))
        assert set(df["git_commit"]) == {"9d5bb9b811fe7db0e9ce1d3ded4a0aa4f28fd9d9"}
    commands = (SESSION_1208 / "device-logs" / "commands.txt").read_text()
    assert commands.count("gated_families.sh $DL 'config/h200-schemes-ngram-l4.yaml sglang-qwen3b-closed-cg1 565'") == 1
    assert "FAM=\"'config/h200-schemes-ngram-l4.yaml sglang-qwen3b-closed-cg1 565'\"" in commands


def test_1208_h100_configs_are_the_preregistered_one():
    for folder in (NGRAM_L4_1208, NGRAM_L4_1208_RERUN):
        _assert_shipped_copy(folder, "h200-schemes-ngram-l4.yaml")


def _ngram_l4_run_on_1208(folder: Path, summary: str, arm: str) -> pl.DataFrame:
    """One of this board's two runs: whole, its verdict and README table the records' (_h100_depth_family), every
    point row's power and tokens per second, its windows as quoted."""
    points = _h100_depth_family(folder, SESSION_1208_H100, "h200-schemes-ngram-l4.yaml", GPU_1208, "qwen3b",
                                summary=summary, arm=arm, cells=8)
    assert sorted(set(points["configured_L"])) == [1.0, 4.0] and set(points["method"]) == {"ngram"}
    lines = (SESSION_1208_H100 / "README.md").read_text().splitlines()
    for r in points.iter_rows(named=True):
        row = next(ln for ln in lines if ln.startswith(f"| {r['batch_size']} | {arm} L = {r['configured_L']:.0f} |"))
        assert f"| {r['mean_power_w']:.0f} | {r['tokens_per_s']:,.0f} |" in row, row
    return _aggregated(packed.tree_files(folder / "results" / "cells", "*/*.parquet"))


def test_1208_ngram_l4_sglang_family_on_a_third_board_is_whole_and_the_readme_table_is_the_records():
    """PLAN order 4: whole on a board neither earlier run used, 0 fail; the roofline's model_residual flags the two
    cells the README names; its starts and windows as quoted."""
    df = _ngram_l4_run_on_1208(NGRAM_L4_1208, "0 fail, 4 flag, 38 pass, 12 not_applicable", "n-gram")
    assert GPU_1208 not in {GPU_1207C, GPU_1207F}
    committed = pl.read_parquet(NGRAM_L4_1208 / "results" / "checks.parquet")
    residual = committed.filter(pl.col("check") == "model_residual", pl.col("status") == "flag")
    assert sorted(residual["campaign_id"]) == ["sglang-qwen3b-closed-b1-random-s0-cg1",
                                               "sglang-qwen3b-closed-b32-random-s0-cg1"]
    b1 = residual.filter(pl.col("campaign_id").str.contains("-b1-"))["value"][0]
    assert 0.25 < b1 < 0.26 and f"({100 * b1:.1f} % against the 25 % threshold;" in _readme_text(SESSION_1208_H100)
    starts = sorted(_engine_starts(NGRAM_L4_1208))
    assert starts == [46.8, 55.2, 56.4, 107.3]
    text = _readme_text(SESSION_1208_H100)
    assert "107.3 s cold, then 56.4, 55.2 and 46.8 s" in text
    assert f"{_windows_quoted(df)}, one seed" in text
    calls = _readme_text(SESSION_1208)
    assert (f"its four engine starts took {sum(starts):.0f} s (107.3 s cold) against "
            f"{sum(_engine_starts(NGRAM_L4_1207F)):.0f} s on 2026-12-07f's board") in calls


def test_1208_rerun_on_the_same_board_moves_every_ratio_through_the_hosts_wait():
    """PLAN order 5: whole, the README's table; against the first run four shifts of −2.1 … −3.5 % (all reproduce
    on the tolerance), the rounds shorter at more power, the GPU's part within 2.7 %, the wait smaller; about six times
    the largest shift of vLLM's MoE rerun."""
    df = _ngram_l4_run_on_1208(NGRAM_L4_1208_RERUN, "0 fail, 3 flag, 39 pass, 12 not_applicable", "rerun n-gram")
    starts = sorted(_engine_starts(NGRAM_L4_1208_RERUN))
    assert starts == [43.6, 45.3, 45.8, 52.2]
    text = _readme_text(SESSION_1208_H100)
    assert "45.3 s for the opening baselines, then 52.2, 45.8 and 43.6 s" in text
    assert f"Order 5's starts took {sum(starts):.0f} s (45.3 s for its first" in _readme_text(SESSION_1208)
    assert f"{_windows_quoted(df)}. **Against the first run" in text
    t = _same_board_rerun(NGRAM_L4_1208, NGRAM_L4_1208_RERUN, GPU_1208, 4)
    s = t["shift"].to_list()
    assert (f"shift by {_pct(s[0])}, {_pct(s[1])} % at B = 1 and {_pct(s[2])}, {_pct(s[3])} % at B = 32 (L = 1, 4; "
            f"largest {100 * t['shift'].abs().max():.1f} %)") in text
    assert max(s) < -0.02  # every ratio lower in the rerun, by more than 2 %
    assert f"the baselines within {100 * t['baseline_shift'].abs().max():.1f} %" in text
    shorter, more = [-x for x in t["round_shift"]], t["power_shift"]
    assert min(shorter) > 0 and more.min() > 0
    assert (f"The drafted rounds were {100 * min(shorter):.1f}–{100 * max(shorter):.1f} % shorter at "
            f"{100 * more.min():.1f}–{100 * more.max():.1f} % more power") in text
    busy = t["busy_shift"].min(), t["busy_shift"].max()
    assert f"the GPU ran moved {_pct(busy[0])} to {_pct(busy[1])} %" in text and max(map(abs, busy)) < 0.03
    assert (f"the waiting part {t['idle_ms_a'].min():.2f}–{t['idle_ms_a'].max():.2f} ms a round in the first run, "
            f"{t['idle_ms_b'].min():.2f}–{t['idle_ms_b'].max():.2f} ms in the rerun") in text
    assert (t["idle_ms_b"] < t["idle_ms_a"]).all()
    vllm_rerun = _compared(VLLM_MOE_1207J, VLLM_MOE_1207J_RERUN)["shift"].abs().max()
    assert round(t["shift"].abs().max() / vllm_rerun) == 6 and "by about six times what it moved" in text


def test_1208_board_and_run_table_is_compare_evidences_and_every_pair_reproduces():
    """The README's table: each run of this board against each earlier board's SGLang cells; all sixteen shifts
    reproduce on the tolerance; the ranges and the GPU's part the README quotes; the earlier pair's own spread."""
    lines = (SESSION_1208_H100 / "README.md").read_text().splitlines()
    earlier = (("07c", NGRAM_1207C), ("07f", NGRAM_L4_1207F))
    first = {n: _compared(NGRAM_L4_1208, f).sort("batch_size", "configured_L") for n, f in earlier}
    rerun = {n: _compared(NGRAM_L4_1208_RERUN, f).sort("batch_size", "configured_L") for n, f in earlier}
    for t in (*first.values(), *rerun.values()):
        assert t.height == 4 and set(t["engine"]) == {"sglang"} and t["reproduces"].all()
    for i, (batch, L) in enumerate(first["07c"].select("batch_size", "configured_L").iter_rows()):
        f07c, f07f, r07c, r07f = first["07c"].row(i, named=True), first["07f"].row(i, named=True), \
            rerun["07c"].row(i, named=True), rerun["07f"].row(i, named=True)
        assert (f"| {batch} | {L:.0f} | {f07c['energy_ratio_a']:.3f}× | {r07c['energy_ratio_a']:.3f}× | "
                f"{f07c['energy_ratio_b']:.3f}× | {_pct(f07c['shift'])} % | {_pct(r07c['shift'])} % | "
                f"{f07f['energy_ratio_b']:.3f}× | {_pct(f07f['shift'])} % | {_pct(r07f['shift'])} % |") in lines
    text = _readme_text(SESSION_1208_H100)
    assert f"The rerun lies within {100 * rerun['07c']['shift'].abs().max():.1f} % of 2026-12-07c's board" in text
    assert f"and {100 * rerun['07f']['shift'].abs().max():.1f} % of 2026-12-07f's" in text
    below = [-x for x in first["07c"]["shift"]]
    assert min(below) > 0 and (f"2026-12-07c's ratios lie {100 * min(below):.1f}–{100 * max(below):.1f} % below the "
                               f"first run's and 2026-12-07f's within {100 * first['07f']['shift'].abs().max():.1f} %") in text
    pair = _compared(NGRAM_L4_1207F, NGRAM_1207C)
    assert (f"lie within {100 * pair['shift'].abs().max():.1f} % of each other ({_pct(pair['shift'].min())} to "
            f"{_pct(pair['shift'].max())} %, 2026-12-07f against 2026-12-07c)") in text
    # the rerun's own shift is larger than the earlier boards' difference: the run level
    assert _compared(NGRAM_L4_1208, NGRAM_L4_1208_RERUN)["shift"].abs().max() > pair["shift"].abs().max()
    f_busy = pl.concat([first[n]["busy_shift"] for n in first])
    r_busy = pl.concat([rerun[n]["busy_shift"] for n in rerun])
    assert (f"agrees within {100 * max(f_busy.abs().max(), r_busy.abs().max()):.1f} % (first run "
            f"{_pct(f_busy.min())} to {_pct(f_busy.max())} %, rerun {_pct(r_busy.min())} to {_pct(r_busy.max())} %)") in text
    earlier_idle = pl.concat([first[n]["idle_ms_b"] for n in first])
    assert f"the wait, {earlier_idle.min():.2f}–{earlier_idle.max():.2f} ms a round on the earlier boards" in text
    bs = {n: {r["batch_size"]: r["baseline_shift"] for r in first[n].iter_rows(named=True)} for n in first}
    assert (f"The earlier boards' baselines cost {_pct(bs['07c'][1])} and {_pct(bs['07c'][32])} % (2026-12-07c, B = 1 "
            f"and 32) and {_pct(bs['07f'][1])} % (2026-12-07f)") in text and bs["07f"][1] == pytest.approx(bs["07f"][32], abs=5e-4)
    speed = [_aggregated(packed.tree_files(f / "results" / "cells", "*/*.parquet"))["host_speed_mops"]
             for f in (NGRAM_L4_1208, NGRAM_L4_1208_RERUN)]
    assert (f"The host probe read {speed[0].min():.1f}–{speed[0].max():.1f} M iterations/s in the first run and "
            f"{speed[1].min():.1f}–{speed[1].max():.1f} in the rerun on one host") in text


def test_1208_budget_puts_the_ngram_spread_at_the_run_level_as_quoted():
    """Four folders (two earlier boards, this board twice): the energy ratio's board estimate negative (counted as
    0), its run row 2.00 % CV on 4 df; three boards' first runs, the rerun in place, and the first pair; mJ per token's
    split; each as the README, ADR 0241 addendum 9 and the index quote them."""
    folders = (NGRAM_1207C, NGRAM_L4_1207F, NGRAM_L4_1208, NGRAM_L4_1208_RERUN)
    four, board, mj_board, mj_restart = _board_budget(*folders, engine="sglang")
    run = four[("energy_ratio", "run")]
    assert board["variance_raw"] < 0 and board["cv_percent"] == 0 and board["df"] == 8 and board["includes"] == ["board"]
    assert run["df"] == 4 and run["share"] == 1.0 and run["includes"] == ["run", "engine_restart", "seed", "window"]
    three = _board_budget(*folders[:3], engine="sglang")[1]
    swapped = _board_budget(NGRAM_1207C, NGRAM_L4_1207F, NGRAM_L4_1208_RERUN, engine="sglang")[1]
    pair = _board_budget(*folders[:2], engine="sglang")[1]
    assert three["df"] == swapped["df"] == 8 and pair["df"] == 4
    assert run["cv_percent"] > three["cv_percent"] > pair["cv_percent"] > swapped["cv_percent"]
    text = _readme_text(SESSION_1208_H100)
    assert (f"**board component is a negative estimate, counted as 0 ({board['df']} df), and its run component "
            f"{run['cv_percent']:.2f} % CV on {run['df']} df**") in text
    assert (f"the board row (which then holds the run) is {three['cv_percent']:.2f} % CV on 8 df, with the rerun in place "
            f"of the first run {swapped['cv_percent']:.2f} % on 8 df, against {pair['cv_percent']:.2f} % on 4 df") in text
    mj_run = four[("mj_per_committed_token", "run")]
    assert (f"board {mj_board['cv_percent']:.2f} % on {mj_board['df']} df, run {mj_run['cv_percent']:.2f} % on "
            f"{mj_run['df']} and engine restart {mj_restart['cv_percent']:.2f} % on {mj_restart['df']} df") in text
    vllm_board = _board_budget(VLLM_MOE_1205F, VLLM_MOE_1207G, VLLM_MOE_1207J, VLLM_MOE_1207J_RERUN)[1]
    assert vllm_board["share"] > 0.95 and f"where the board was {100 * vllm_board['share']:.0f} % of it" in text
    negative = f"board component is a negative estimate (counted as 0, {board['df']} df) and its run component"
    adr = " ".join(ADR_0241.read_text().split())
    index = (ROOT / "validation" / "h100-2026-12" / "README.md").read_text()
    quoted = {  # where each is quoted: ADR 0241 addendum 9, the index's board table and its text
        adr[adr.index("**Addendum 9 "):]: (f"{negative} {run['cv_percent']:.2f} % CV on {run['df']} df",
                                           f"a board row (holding the run) of {three['cv_percent']:.2f} % CV on 8 df"),
        index: (f"| SGLang | 2026-12-07c, 2026-12-07f, 2026-12-08 | {three['cv_percent']:.2f} % (8 df) |",),
        " ".join(index.split()): (f"{negative} {run['cv_percent']:.2f} % CV ({run['df']} df)",),
    }
    for where, phrases in quoted.items():
        for phrase in phrases:
            assert phrase in where, phrase


def test_adr_0258_addendum_5_the_third_boards_pairs_and_the_rerun():
    """ADR 0258 addendum 5's rows from compare-evidence; the GPU's part inside every earlier pair's 4.7 %; the rerun's
    B = 32, L = 4 waits as it quotes them."""
    adr = ADR_0258.read_text()
    for other, label in ((NGRAM_1207C, "07c"), (NGRAM_L4_1207F, "07f"), (NGRAM_L4_1208_RERUN, "08 rerun")):
        t = _compared(NGRAM_L4_1208, other)
        row = next(ln for ln in adr.splitlines() if ln.startswith(f"| n-gram L = 1, 4 (SGLang) | 2026-12-08, {label} |"))
        assert _round_split_cells(t) in row, row
        assert t["busy_shift"].abs().max() < 0.047
    t = _compared(NGRAM_L4_1208, NGRAM_L4_1208_RERUN)
    b32 = t.filter(pl.col("batch_size") == 32, pl.col("configured_L") == 4.0).row(0, named=True)
    flat = " ".join(adr.split())
    assert (f"the first run's B = 32, L = 4 rounds waited {b32['idle_ms_a']:.2f} ms, the rerun's {b32['idle_ms_b']:.2f} "
            f"ms, with the GPU's part within {100 * t['busy_shift'].abs().max():.1f} %") in flat


def test_1208_nvml_probe_on_a_fifth_board_meets_the_preregistered_reading():
    """PLAN.md's probe after both runs on this session's board, as quoted (ADR 0258 addendum 5); its widest 7.5 ms
    row the widest of the five boards' warm probes."""
    run, readme = _probe_as_quoted(SESSION_1208_H100, SESSION_1208, GPU_1208, "fifth", "Addendum 5")
    _no_gap_idle_as_quoted(run, readme, "2026-12-07j")

    def widest(path: Path) -> float:
        rows = json.loads(path.read_text())["rows"]
        return max(abs(r["nvml_idle_ms"] - r["event_idle_ms"]) for r in rows if r["kernel_ms"] == 7.5 and r["gap_ms"] >= 0.25)

    earlier = {s: widest(ROOT / "validation" / "h100-2026-12" / f"session-2026-12-{s}" / "nvml-busy" / "nvml-busy-warm.json")
               for s in ("07f", "07g", "07h", "07j")}
    here = widest(SESSION_1208_H100 / "nvml-busy" / "nvml-busy-warm.json")
    assert here > max(earlier.values()) and max(earlier, key=earlier.get) == "07g"
    assert f"the widest of the five boards ({max(earlier.values()):.3f} on 2026-12-07g's)" in readme
