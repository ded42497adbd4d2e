"""The coverage matrix (specjoule.analysis.coverage, ADR 0196) on the committed H200 evidence and shipped configs.

Expected values come from the raw cell files and checks.parquet of the sessions, read here directly, and from
the closing notes of the sessions (validation/h200-2026-12/session-*/README.md), not from the module.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import polars as pl
import pytest

from specjoule import cells, config, logtext, runner, schemes
from specjoule.analysis import AnalysisError, coverage, packed

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "validation" / "h200-2026-12"
GLM_RUN = EVIDENCE / "session-2026-12-02c" / "glm-mla" / "results"
GLM_CAMPAIGN = GLM_RUN / "cells" / "vllm-glm47_flash-closed-b1-random-s0-cg1"
CLOSED = EVIDENCE / "session-2026-12-01" / "closed"
SGLANG_1130 = EVIDENCE / "session-2026-11-30c"
C = pl.col


@pytest.fixture(scope="module")
def records(h200_evidence_records) -> pl.DataFrame:
    """coverage.load_evidence([EVIDENCE]), read once per worker (tests/conftest.py)."""
    return h200_evidence_records


@pytest.fixture(scope="module")
def plan() -> pl.DataFrame:
    return coverage.planned_cells(coverage.shipped_configs())


@pytest.fixture(scope="module")
def table(records, plan) -> pl.DataFrame:
    return coverage.matrix(records, plan)


# Pre-registered 2026-12-04f, after the sessions the history tests below replay: left out of "the plan as it stood".
DEPTH_GDN = "config/h200-schemes-depth-gdn.yaml"


def plan_before_1204f(plan: pl.DataFrame) -> pl.DataFrame:
    return plan.filter(C("config") != DEPTH_GDN)


def row(table: pl.DataFrame, model: str, engine: str, method: str) -> dict:
    hit = table.filter(
        (C("target_model") == f"config/models/{model}") & (C("engine") == engine) & (C("method") == method)
    )
    assert hit.height == 1, hit
    return hit.row(0, named=True)


def test_glm_mtp_on_vllm_is_measured_with_the_hand_computed_ratio_at_L4(records, plan):
    """The row as 2026-12-02c left it (Model Runner V1): one run; 2026-12-03d's V2 run is the next test's."""
    table = coverage.matrix(records.filter(~C("run").str.contains("session-2026-12-03d")), plan)
    got = row(table, "glm-4.7-flash", "vllm", "mtp")
    assert got["status"] == coverage.MEASURED
    assert got["target_family"] == "mla"
    point = packed.read_frame(GLM_CAMPAIGN / "mtp--mv4.parquet")["mj_per_committed_token"][0]
    opening = packed.read_frame(GLM_CAMPAIGN / "baseline--open.parquet")["mj_per_committed_token"][0]
    closing = packed.read_frame(GLM_CAMPAIGN / "baseline--close.parquet")["mj_per_committed_token"][0]
    by_hand = point / ((opening + closing) / 2)  # the run's baseline: opening and closing of its campaign
    assert got["b1_lmax_L"] == 4
    assert got["b1_lmax_ratio"] == pytest.approx(by_hand, rel=1e-9)
    assert round(by_hand, 3) == 0.611  # the 2026-12-02c closing note's number
    assert got["b1_lmax_n"] == 1 and got["b1_lmax_runs"] == 1
    assert "L=4: 0.611 (n=1)" in got["ratio_b1"]
    assert got["b32_lmin_L"] is None and got["ratio_b32"] == ""


def test_glm_mtp_on_vllm_since_2026_12_03d_spans_both_runners_as_two_runs(table):
    """V1 (2026-12-02c) and V2 (2026-12-03d) are two runs of one row: the ratio is their range, not one number."""
    got = row(table, "glm-4.7-flash", "vllm", "mtp")
    by_run = []
    for campaign in (GLM_CAMPAIGN, EVIDENCE / "session-2026-12-03d" / "glm-v2" / "results" / "cells" / GLM_CAMPAIGN.name):
        mj = {n: packed.read_frame(campaign / f"{n}.parquet")["mj_per_committed_token"][0]
              for n in ("mtp--mv4", "baseline--open", "baseline--close")}
        by_run.append(mj["mtp--mv4"] / ((mj["baseline--open"] + mj["baseline--close"]) / 2))
    assert got["status"] == coverage.MEASURED and got["b1_lmax_L"] == 4
    assert (got["b1_lmax_n"], got["b1_lmax_runs"], got["b1_lmax_boards"]) == (2, 2, 2)
    assert got["b1_lmax_ratio_lo"] == pytest.approx(min(by_run), rel=1e-9)
    assert got["b1_lmax_ratio_hi"] == pytest.approx(max(by_run), rel=1e-9)
    assert [round(r, 3) for r in by_run] == [0.611, 0.506]  # V1, V2: the 2026-12-03d README's numbers
    assert "L=4: 0.506–0.611 (n=2, 2 runs, 2 boards)" in got["ratio_b1"]


def test_glm_eagle3_on_vllm_is_unsupported_with_the_engines_reason(table):
    got = row(table, "glm-4.7-flash", "vllm", "eagle3")
    assert got["status"] == coverage.UNSUPPORTED
    assert "SupportsEagle3" in got["reason"]
    assert got["B"] == "" and got["b1_lmin_ratio"] is None


def test_gemma_eagle3_on_sglang_is_unsupported_with_each_configs_reason(table):
    """2026-12-03 recorded it unsupported under the families config (fa3); 2026-12-03b's triton start failed on
    the text-only config, which the plan now knows (ADR 0194 addendum 2): the row gives both reasons."""
    got = row(table, "gemma-4-26b-a4b", "sglang", "eagle3")
    assert got["status"] == coverage.UNSUPPORTED
    assert got["target_family"] == "gqa_sliding"
    reason = got["reason"]
    assert reason.startswith("sglang 0.5.17 accepts only trtllm_mha, triton")
    assert "planned unsupported under config/h200-schemes-sglang-gemma4.yaml: " in reason
    assert "'gemma4_text'" in reason and "swa_num_key_value_heads" in reason


def test_sglang_breadth_is_settled_on_every_shipped_pair(table):
    """Every (target, scheme) SGLang row of the shipped configs but one is measured or unsupported: since 2026-12-03f
    (gemma-4's multimodal shape, ADR 0225) all but EAGLE3 on Qwen3.6, pre-registered 2026-12-04b, and since 2026-12-04e
    that one too: its start failed on an SGLang 0.5.17 defect the plan now names (ADR 0194 addendum 3). The one is
    SGLang's n-gram, pre-registered 2026-12-06f and never run on an H200 (it ran on an H100 on 2026-12-06g: the
    test after this one)."""
    sglang = table.filter(pl.col("engine") == "sglang")
    # a token-mode companion (ADR 0244) is a row of its own, not breadth: on an H200 it has not run (H100s only)
    variants = sglang.filter(pl.col("method").str.ends_with(f" ({schemes.REAL_DRAFT_TOKEN})"))
    assert sorted(variants.select("target_model", "method", "status", "configs").rows()) == [
        ("config/models/gemma-4-26b-a4b-mm", f"eagle3 ({schemes.REAL_DRAFT_TOKEN})", coverage.NOT_RUN,
         "config/h200-schemes-depth-sw-sglang-rt.yaml"),
        ("config/models/qwen3-30b-a3b", f"eagle3 ({schemes.REAL_DRAFT_TOKEN})", coverage.NOT_RUN,
         "config/h200-moe-token-mode.yaml, config/h200-schemes-depth-moe-sglang-rt.yaml"),
    ]
    sglang = sglang.join(variants, on=list(coverage.ROW_KEY), how="anti")
    # the one scheme never run on SGLang on an H200, its host-side n-gram, pre-registered 2026-12-06f (and again at
    # L = 4 on 2026-12-06i, ADR 0250 addendum 4: the row names both configs)
    unrun = sglang.filter(pl.col("status") == coverage.NOT_RUN)
    assert unrun.select("target_model", "method", "configs").rows() == [
        ("config/models/qwen2.5-3b", "ngram", "config/h200-schemes-ngram-l4.yaml, config/h200-schemes-ngram-sglang.yaml")]
    sglang = sglang.filter(pl.col("status") != coverage.NOT_RUN)
    assert set(sglang["status"]) <= {coverage.MEASURED, coverage.UNSUPPORTED, coverage.UNSUPPORTED_PLAN}
    got = row(table, "qwen3.6-35b-a3b", "sglang", "eagle3")
    assert got["status"] in (coverage.UNSUPPORTED, coverage.UNSUPPORTED_PLAN)
    # both configs that plan it refuse it, gdn-eagle3 and (since 2026-12-04f) the Gated-DeltaNet depth config
    assert f"planned unsupported under {DEPTH_GDN}, config/h200-schemes-gdn-eagle3.yaml: " in got["reason"]
    assert "_is_layer_to_capture" in got["reason"] and "too many values to unpack" in got["reason"]
    for target, method in (
        ("mimo-7b", "mtp"),
        ("qwen3-30b-a3b", "eagle3"),
        ("glm-4.7-flash", "eagle3"),
        ("gemma-4-26b-a4b-mm", "eagle3"),
        ("qwen3.6-35b-a3b", "mtp"),
    ):
        got = row(table, target, "sglang", method)
        assert got["status"] == coverage.MEASURED and got["b1_lmin_L"] == 1 and got["b1_lmax_L"] == 4, got
    assert row(table, "gemma-4-26b-a4b-mm", "sglang", "eagle3")["target_family"] == "gqa_sliding"


def test_ngram_on_both_engines_is_measured_on_the_h100_and_its_ratios_are_the_runs_cells(two_classes):
    """ADR 0250 addenda 1-5: SGLang's NGRAM ran on five H100s (2026-12-06g; 2026-12-06h and 2026-12-07c beside
    vLLM's on one board; 2026-12-07f alone; 2026-12-08 twice on one board, ADR 0241 addendum 9), so its H100 row's
    L = 1 is six runs on five boards and its L = 6 two (07c, 07f and 08 ran L = 4), each point the mean of the runs' ratios over the mean of each B's two baselines; it is still not run in the H200
    matrix. vLLM's H100 row reaches L = 4 (07c, passing) while naming the L = 6 arms that failed on 06h and 06i; its
    H200 row is measured at L = 1 only, its L = 6 failed there."""
    sglang_runs = {
        "06g": _raw_cells(H100_EVIDENCE / "session-2026-12-06g" / "ngram-sglang" / "results"),
        "06h": _raw_cells(H100_EVIDENCE / "session-2026-12-06h" / "ngram-both" / "results").filter(C("engine") == "sglang"),
        "07c": _raw_cells(H100_EVIDENCE / "session-2026-12-07c" / "ngram-l4" / "results").filter(C("engine") == "sglang"),
        "07f": _raw_cells(H100_EVIDENCE / "session-2026-12-07f" / "ngram-l4-sglang" / "results"),
        "08": _raw_cells(H100_EVIDENCE / "session-2026-12-08" / "ngram-l4-sglang" / "results"),
        "08 rerun": _raw_cells(H100_EVIDENCE / "session-2026-12-08" / "ngram-l4-sglang-rerun" / "results"),
    }
    h100, h200 = two_classes["NVIDIA H100 80GB HBM3"], two_classes["NVIDIA H200"]
    got = row(h100, "qwen2.5-3b", "sglang", "ngram")
    assert (got["status"], got["B"], got["L"], got["runs"]) == (coverage.MEASURED, "1,32", "1,4,6", 6)
    for b in (1, 32):
        ratios: dict[float, list[float]] = {1.0: [], 4.0: [], 6.0: []}
        for cells_ in sglang_runs.values():
            base = cells_.filter(C("batch_size") == b, C("role") != "point")["mj_per_committed_token"].mean()
            for L, mj in (cells_.filter(C("batch_size") == b, C("role") == "point")
                          .select("configured_L", "mj_per_committed_token").iter_rows()):
                ratios[L].append(mj / base)
        assert (len(ratios[1.0]), len(ratios[4.0]), len(ratios[6.0])) == (6, 4, 2)
        assert (got[f"b{b}_lmin_L"], got[f"b{b}_lmax_L"]) == (1.0, 6.0)
        assert got[f"b{b}_lmin_ratio"] == pytest.approx(statistics.mean(ratios[1.0]), rel=1e-9)
        assert got[f"b{b}_lmax_ratio"] == pytest.approx(statistics.mean(ratios[6.0]), rel=1e-9)
        assert (got[f"b{b}_lmin_n"], got[f"b{b}_lmin_boards"], got[f"b{b}_lmax_boards"]) == (6, 5, 2)
    assert row(h200, "qwen2.5-3b", "sglang", "ngram")["status"] == coverage.NOT_RUN
    vllm = row(h100, "qwen2.5-3b", "vllm", "ngram")
    l4 = _raw_cells(H100_EVIDENCE / "session-2026-12-07c" / "ngram-l4" / "results").filter(C("engine") == "vllm")
    assert (vllm["status"], vllm["L"], vllm["runs"], vllm["b1_lmax_L"], vllm["b1_lmax_n"]) == (coverage.MEASURED, "1,4", 3, 4.0, 1)
    for b in (1, 32):
        cells_ = l4.filter(C("batch_size") == b)
        base = cells_.filter(C("role") != "point")["mj_per_committed_token"].mean()
        point = cells_.filter(C("role") == "point", C("configured_L") == 4.0)["mj_per_committed_token"].item()
        assert vllm[f"b{b}_lmax_ratio"] == pytest.approx(point / base, rel=1e-9)
    for run in ("session-2026-12-06h/ngram-both", "session-2026-12-06i/ngram-vllm"):
        assert f"{run}: acceptance_length at B=1,32 L=6" in vllm["check_failed"]
    assert "session-2026-12-07c" not in vllm["check_failed"]
    h200_vllm = row(h200, "qwen2.5-3b", "vllm", "ngram")
    assert h200_vllm["status"] == coverage.MEASURED and h200_vllm["L"] == "1"
    assert "session-2026-12-01" in h200_vllm["check_failed"] and "acceptance_length at B=1,32 L=6" in h200_vllm["check_failed"]


def test_qwen36_on_sglang_is_whole_since_2026_12_03f_and_two_of_its_points_ran_on_two_boards(table):
    """2026-12-03 (GPU-3a0e409b, cut) measured MTP L = 1 and DFlash L = 16; 2026-12-03f (GPU-be9eea70) the whole
    family: those two points read as two runs on two boards, the new ones (MTP L = 4, DFlash L = 1) as one."""
    mtp = row(table, "qwen3.6-35b-a3b", "sglang", "mtp")
    dflash = row(table, "qwen3.6-35b-a3b", "sglang", "dflash")
    assert mtp["target_family"] == dflash["target_family"] == "gated_deltanet"
    assert (dflash["status"], dflash["b1_lmin_L"], dflash["b1_lmax_L"]) == (coverage.MEASURED, 1, 16)
    assert (mtp["b1_lmin_n"], mtp["b1_lmin_boards"], mtp["b1_lmax_n"]) == (2, 2, 1)
    assert (dflash["b1_lmin_n"], dflash["b1_lmax_n"], dflash["b1_lmax_boards"]) == (1, 2, 2)
    assert "L=4: 0.625 (n=1)" in mtp["ratio_b1"] and "L=1: 1.85 (n=1)" in dflash["ratio_b1"]


def test_gemma_eagle3_on_vllm_is_measured_although_an_earlier_attempt_failed(table, records):
    """2026-12-02d measured it; 2026-12-02c's failed attempt stays committed and must not hide the measurement."""
    got = row(table, "gemma-4-26b-a4b", "vllm", "eagle3")
    assert got["status"] == coverage.MEASURED
    assert got["B"] == "1,32" and got["b1_lmin_L"] == 1 and got["b1_lmax_L"] == 4
    with_markers = coverage.matrix(
        records, coverage.planned_cells(coverage.shipped_configs()), coverage.failed_attempts([EVIDENCE])
    )
    assert row(with_markers, "gemma-4-26b-a4b", "vllm", "eagle3")["status"] == coverage.MEASURED


def test_qwen3_8b_eagle3_on_sglang_is_measured(table):
    """2026-12-02b (B = 1) and 2026-12-03e's depth (B = 1 and 32) on two boards: at B = 1 two runs a row, and at
    L = 4 the SGLang range lies wholly below vLLM's (2026-12-01d, 2026-12-03d and 2026-12-04b, three other boards,
    graphs on; 2026-12-04b's two graphs-off points are counted beside the range, not in it)."""
    got = row(table, "qwen3-8b", "sglang", "eagle3")
    assert got["status"] == coverage.MEASURED
    assert got["target_family"] == "gqa"
    assert got["B"] == "1,32" and got["b1_lmin_L"] == 1 and got["b1_lmax_L"] == 4
    assert (got["b1_lmax_n"], got["b1_lmax_runs"], got["b1_lmax_boards"]) == (2, 2, 2)
    assert "L=4: 0.305–0.312 (n=2, 2 runs, 2 boards)" in got["ratio_b1"]
    vllm = row(table, "qwen3-8b", "vllm", "eagle3")
    assert "L=4: 0.345–0.348 (n=3, 3 runs, 3 boards)" in vllm["ratio_b1"]
    assert vllm["graphs_off_points"] == 2  # graphs off at L = 4: 0.364 over a host-bound baseline, outside the range
    assert got["b1_lmax_ratio_hi"] < vllm["b1_lmax_ratio_lo"]


def test_planned_family_is_the_one_the_runner_records(plan):
    """Each planned target's family equals what runner.model_columns writes into that cell's record."""
    seen: dict[str, str] = {}
    for path in coverage.shipped_configs():
        for c in cells.build(config.load(ROOT / path)).cells:
            model = c.setup.engine.target.model
            if model not in seen:
                seen[model] = runner.model_columns(c.setup).get("target_family") or coverage.UNKNOWN_FAMILY
    planned = dict(plan.select("target_model", "target_family").unique().iter_rows())
    assert {m: seen[m] for m in planned} == planned
    assert {"gqa", "gqa_sliding", "mla", "gated_deltanet"} <= set(planned.values())


def test_every_evidence_combination_is_one_row_and_nothing_measured_is_called_not_run(records, table):
    points = records.filter(C("role") == "point")
    combos = points.select(*coverage.ROW_KEY).unique()
    evidenced = table.join(combos, on=list(coverage.ROW_KEY), how="semi")
    assert evidenced.height == combos.height
    # an evidenced row reads from the plan only when its records all say unsupported under one configuration and
    # another shipped config plans it as supported (gemma-4 EAGLE3 on SGLang: fa3 refused, triton planned)
    from_plan = evidenced.filter(C("status").is_in([coverage.NOT_RUN, coverage.UNSUPPORTED_PLAN]))
    assert from_plan["reason"].str.contains("recorded unsupported under another configuration").all()
    assert points.join(from_plan.select(coverage.ROW_KEY), on=list(coverage.ROW_KEY), how="semi")[
        "status"
    ].unique().to_list() in ([], ["unsupported"])
    assert table.select(*coverage.ROW_KEY).is_duplicated().sum() == 0


def test_a_failed_check_removes_its_cells_from_the_measured_L(table):
    """session-2026-12-01/closed: acceptance_length fails on the vLLM ngram L=6 arm (test_h200_evidence)."""
    verdicts = pl.read_parquet(CLOSED / "results" / "checks.parquet")
    failing = verdicts.filter((C("status") == "fail") & (C("check") == "acceptance_length"))
    assert failing["cell_names"].explode().unique().to_list() == ["ngram--mv6"]
    got = row(table, "qwen2.5-3b", "vllm", "ngram")
    assert got["status"] == coverage.MEASURED  # its L=1 arm passed
    assert got["L"] == "1" and got["b1_lmax_L"] == 1
    assert got["check_failed"] == "session-2026-12-01/closed: acceptance_length at B=1,32 L=6"


def test_a_row_whose_every_measured_cell_failed_a_check_is_check_failed():
    closed = coverage.load_evidence([CLOSED])
    only_l6 = closed.filter(~((C("method") == "ngram") & (C("configured_L") == 1)))
    got = row(coverage.matrix(only_l6), "qwen2.5-3b", "vllm", "ngram")
    assert got["status"] == coverage.CHECK_FAILED + "acceptance_length"
    assert got["L"] == "" and got["b1_lmax_ratio"] is None


def test_a_failed_check_on_a_baseline_reaches_the_points_paired_with_it():
    """session-2026-11-30c: baseline_drift fails naming the two baselines only; the points inherit it."""
    verdicts = pl.read_parquet(SGLANG_1130 / "results" / "checks.parquet")
    drift = verdicts.filter((C("status") == "fail") & (C("check") == "baseline_drift"))
    assert set(drift["cell_names"].explode().to_list()) == {"baseline--open", "baseline--close"}
    recs = coverage.load_evidence([SGLANG_1130])
    points = recs.filter(C("role") == "point")
    assert points.height and all("baseline_drift" in cs for cs in points["check_failed"].to_list())


def test_engine_start_medians_split_cold_and_warm_cache(table):
    # every vLLM GLM campaign in the tree (V1 on 2026-12-02c, V2 on 2026-12-03c): the row pools the family's starts
    paths = [p for pack in sorted(EVIDENCE.glob("**/results/cells.parquet"))
             for p in packed.tree_files(pack.with_suffix(""), "vllm-glm47_flash-*/*.parquet")]
    assert GLM_CAMPAIGN in {p.parent for p in paths} and len({p.parent for p in paths}) >= 2
    raw = pl.concat([packed.read_frame(p).with_columns(run=pl.lit(str(p.parent))) for p in paths], how="diagonal_relaxed")
    started = raw.filter(C("engine_start_s").is_not_null()).unique(subset=["run", "engine_instance"])
    cold = started.filter(C("compile_cache_warm") == False)["engine_start_s"].to_list()  # noqa: E712
    warm = started.filter(C("compile_cache_warm") == True)["engine_start_s"].to_list()  # noqa: E712
    assert cold and warm
    got = row(table, "glm-4.7-flash", "vllm", "mtp")
    assert got["start_cold_s"] == pytest.approx(statistics.median(cold))
    assert got["start_warm_s"] == pytest.approx(statistics.median(warm))
    assert (got["start_cold_n"], got["start_warm_n"]) == (len(cold), len(warm))


def test_cli_prints_markdown_and_writes_parquet(tmp_path, capsys, table):
    out = tmp_path / "coverage.parquet"
    assert coverage.main([str(EVIDENCE), "--format", "md", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| family | target | engine | scheme | status |")
    assert len(lines) == 2 + table.height
    assert any("| glm-4.7-flash | vllm | mtp | measured |" in line for line in lines)
    assert pl.read_parquet(out).height == table.height


def test_cli_names_a_missing_evidence_folder(capsys, tmp_path):
    assert coverage.main([str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_a_planned_unsupported_cell_without_records_carries_the_plans_reason(records, plan):
    """Without the 2026-12-02c GLM EAGLE3 records, the plan alone (no GPU) already says why it cannot run."""
    without = records.filter(~((C("target_model") == "config/models/glm-4.7-flash") & (C("method") == "eagle3")))
    got = row(coverage.matrix(without, plan), "glm-4.7-flash", "vllm", "eagle3")
    assert got["status"] == coverage.UNSUPPORTED_PLAN
    assert "SupportsEagle3" in got["reason"]
    assert "validation/h200-2026-12/config/h200-schemes-glm-mla.yaml" in got["configs"].split(", ")


def test_planned_cells_on_another_device_than_the_evidence_are_left_out(plan, table):
    cpu_targets = set(plan.filter(C("device") == "cpu")["target_model"].to_list())
    assert cpu_targets  # config/config.yaml plans CPU cells
    assert not table["target_model"].is_in(list(cpu_targets)).any()


FAILED_STARTS = EVIDENCE / "session-2026-12-02c" / "failed-starts"


def _before_1203c(records: pl.DataFrame) -> pl.DataFrame:
    """The tree as it stood before 2026-12-03c measured Qwen3.6's vLLM arms with matched engines."""
    return records.filter(~C("run").str.contains("session-2026-12-03c"))


def test_a_failed_start_in_the_evidence_reads_as_an_attempt_that_failed(records, plan):
    """2026-12-02c committed the attempt markers of its two failed starts (written before ADR 0197: no cause);
    2026-12-02d the marker of Qwen3.6's second failed start (its cause only in the error's text)."""
    table = coverage.matrix(_before_1203c(records), plan, coverage.failed_attempts([EVIDENCE]))
    # 2026-12-02f measured DFlash (its engine_config_matched check failed, ADR 0217); MTP's engine started, and the
    # budget ended in its first window: its marker is one more attempt with no record
    assert row(table, "qwen3.6-35b-a3b", "vllm", "dflash")["status"] == "measured, check failed: engine_config_matched"
    for method in ("mtp",):
        got = row(table, "qwen3.6-35b-a3b", "vllm", method)
        assert got["status"] == coverage.ATTEMPT_FAILED
        assert "mtp--mv1: " + coverage.NO_CAUSE in got["reason"]
        # the error's first line, not the worker's traceback under it
        assert "OSError: Can't load image processor for " in got["reason"] and "\n" not in got["reason"]
    only_1202c = coverage.failed_attempts([EVIDENCE / "session-2026-12-02c"])
    assert set(only_1202c["cause"]) == {coverage.NO_CAUSE}
    # the markers name vLLM campaigns (and an SGLang start the plan now refuses): other rows keep their status
    assert row(table, "glm-4.7-flash", "sglang", "eagle3")["status"] == coverage.MEASURED
    assert row(table, "glm-4.7-flash", "vllm", "mtp")["status"] == coverage.MEASURED


def test_the_root_cause_the_runner_notes_is_the_one_the_matrix_shows(tmp_path, monkeypatch, records, plan):
    """runner.note_failed_attempt on a real planned cell, with the committed H200 log of Qwen3.6's first failed
    start: the matrix names the cause (the first exception that wraps no other), not vLLM's wrappers."""
    import types

    from specjoule.engines import EngineError

    cfg = config.load(ROOT / "config" / "h200-schemes-gdn.yaml")
    cell = next(c for c in cells.build(cfg).cells if c.name == "baseline--open")
    log = FAILED_STARTS / "vllm-qwen36_35b_a3b-g00-opening.log"
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    runner.note_failed_attempt(
        [types.SimpleNamespace(cell=cell)], EngineError("vLLM engine failed to start: RuntimeError: ..."), log
    )
    marker = runner.attempt_marker(cell)
    assert marker.exists() and not list(marker.parent.glob(".*"))  # written whole, no temporary left
    table = coverage.matrix(_before_1203c(records), plan, coverage.failed_attempts([tmp_path]))
    for method in ("mtp",):  # DFlash has records since 2026-12-02f
        got = row(table, "qwen3.6-35b-a3b", "vllm", method)
        assert got["status"] == coverage.ATTEMPT_FAILED
        assert got["reason"] == "baseline--open: ModuleNotFoundError: No module named 'compressed_tensors'"


def test_qwen36_on_vllm_is_measured_since_2026_12_03c_and_the_failed_check_of_2026_12_02f_stays_named(records, plan):
    """Clean points (block size pinned, ADR 0217) make both rows measured; the earlier run's failed check is not
    forgotten: the row's check_failed column still names it, and its points stay out of the ratio."""
    table = coverage.matrix(records, plan, coverage.failed_attempts([EVIDENCE]))
    dflash = row(table, "qwen3.6-35b-a3b", "vllm", "dflash")
    assert dflash["status"] == coverage.MEASURED
    assert dflash["check_failed"].startswith("session-2026-12-02f/gdn: engine_config_matched")
    assert dflash["runs"] == 2 and dflash["b1_lmin_n"] == 1  # the failed run's points are not in the ratio
    mtp = row(table, "qwen3.6-35b-a3b", "vllm", "mtp")
    assert mtp["status"] == coverage.MEASURED and mtp["b1_lmax_L"] == 4
    cells_1203c = EVIDENCE / "session-2026-12-03c" / "gdn-pinned" / "results" / "cells"
    (campaign,) = {p.parent for p in packed.tree_files(cells_1203c)}
    point = packed.read_frame(campaign / "mtp--mv4.parquet")["mj_per_committed_token"][0]
    base = [
        packed.read_frame(campaign / f"baseline--{e}.parquet")["mj_per_committed_token"][0] for e in ("open", "close")
    ]
    assert mtp["b1_lmax_ratio"] == pytest.approx(point / (sum(base) / 2), rel=1e-9)


@pytest.mark.parametrize(
    "log,cause",
    [
        ("vllm-gemma4_26b_a4b-g00-opening.log", "ModuleNotFoundError: No module named 'cutlass'"),
        # model inspection: vLLM re-raises its subprocess's error as CalledProcessError, then RuntimeError
        ("vllm-qwen36_35b_a3b-g00-opening.log", "ModuleNotFoundError: No module named 'compressed_tensors'"),
    ],
)
def test_root_cause_of_the_h200_failed_starts(log, cause):
    exceptions = runner.logged_exceptions(FAILED_STARTS / log)
    assert cause in exceptions and runner.root_cause(exceptions) == cause


def test_a_worker_failure_sent_through_the_pipe_still_names_its_cause(tmp_path, monkeypatch):
    """2026-12-02d: Qwen3.6's offline worker failed in its own process (an image processor it could not load), so
    its traceback reached the runner only inside the EngineError, and the log held no exception line when the
    marker was written. The marker must name the cause from the error's text (it said null on the H200)."""
    import types

    from specjoule.engines import EngineError

    committed = EVIDENCE / "session-2026-12-02d" / "failed-starts" / "vllm-qwen36_35b_a3b-g00-opening.log"
    lines = logtext.read_log(committed).splitlines(keepends=True)  # committed gzipped (ADR 0212)
    failed = next(i for i, line in enumerate(lines) if "ERROR specjoule.runner: cell: failed" in line)
    # the log as it stood when the runner caught the error, and the error's text as the runner logged it after
    log = tmp_path / "at-failure.log"
    log.write_text("".join(lines[:failed]))
    assert runner.logged_exceptions(log) == []
    message_end = next(i for i in range(failed + 1, len(lines)) if lines[i].startswith("Traceback") and i > failed + 1)
    message = "".join(lines[failed:message_end]).split("EngineError: ", 1)[1]
    cfg = config.load(ROOT / "config" / "h200-schemes-gdn.yaml")
    cell = next(c for c in cells.build(cfg).cells if c.name == "baseline--open")
    monkeypatch.chdir(tmp_path)
    runner.mark_attempt(cell)
    runner.note_failed_attempt([types.SimpleNamespace(cell=cell)], EngineError(message), log)
    noted = json.loads(runner.attempt_marker(cell).read_text())
    assert noted["root_cause"].startswith("OSError: Can't load image processor for ")
    assert noted["logged_exceptions"][0].startswith("EngineError: vLLM engine failed to start: OSError")
    # the log's own lines still come first when it has them (ADR 0197)
    both = runner.exception_lines(message.splitlines(), found=["ModuleNotFoundError: No module named 'x'"])
    assert both[0] == "ModuleNotFoundError: No module named 'x'" and len(both) <= 5


def test_qwen3_30b_a3b_eagle3_on_vllm_at_b1_reads_as_three_runs_on_three_boards_graphs_on(table):
    """2026-12-02 (GPU-98f2ec42, B = 1 and 32), 2026-12-03g (GPU-a8351c02) and 2026-12-04 (GPU-add5a720), B = 1,
    graphs on: each L is three runs on three boards, each ratio over its own campaign's opening and closing
    baselines. 2026-12-04's graphs-off points (GPU-21207a74, host-bound baseline) are counted, not in the range."""
    got = row(table, "qwen3-30b-a3b", "vllm", "eagle3")
    assert got["status"] == coverage.MEASURED and got["B"] == "1,32"
    ratios = {}
    runs = ("session-2026-12-02/families", "session-2026-12-03g/capture-moe", "session-2026-12-04/capture-moe")
    for run in runs:
        camp = EVIDENCE / run / "results" / "cells" / "vllm-qwen3_30b_a3b-closed-b1-random-s0-cg1"
        mj = {p.stem: packed.read_frame(p)["mj_per_committed_token"][0] for p in packed.tree_files(camp.parent, f"{camp.name}/*.parquet")}
        base = (mj["baseline--open"] + mj["baseline--close"]) / 2
        for L in (1, 4):
            ratios.setdefault(L, []).append(mj[f"eagle3--mv{L}"] / base)
    for key, L in (("b1_lmin", 1), ("b1_lmax", 4)):
        assert (got[f"{key}_n"], got[f"{key}_runs"], got[f"{key}_boards"]) == (3, 3, 3)
        assert got[f"{key}_ratio_lo"] == pytest.approx(min(ratios[L])) and got[f"{key}_ratio_hi"] == pytest.approx(
            max(ratios[L])
        )
    assert (got["b32_lmin_n"], got["b32_lmax_n"]) == (1, 1)
    # the graphs-off points (L = 4: 0.248 over a host-bound baseline) would have widened the range
    assert got["graphs_off_points"] == 2 and got["b1_lmax_ratio_lo"] > 0.5


def test_a_baseline_start_that_failed_before_its_campaign_was_measured_stops_no_arm_planned_since(
    table, records, plan
):
    """Qwen3.6's vLLM baseline failed to start three times (2026-12-02c-e) before 2026-12-02f and 2026-12-03c
    measured it; EAGLE3, planned on 2026-12-04b in the same campaign, read not run, not "an attempt failed", until
    2026-12-04d measured it."""
    attempts = coverage.failed_attempts([EVIDENCE])
    campaign = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"
    baseline = attempts.filter((pl.col("campaign_id") == campaign) & (pl.col("cell_name") == "baseline--open"))
    assert baseline.height == 3
    live = coverage.superseded_attempts_dropped(attempts, records)
    assert live.filter((pl.col("campaign_id") == campaign) & (pl.col("cell_name") == "baseline--open")).height == 0
    assert live.height < attempts.height and set(live.columns) == set(attempts.columns)
    assert row(table, "qwen3.6-35b-a3b", "vllm", "eagle3")["status"] == coverage.MEASURED
    before = coverage.matrix(records.filter(~C("run").str.contains("session-2026-12-04d")), plan_before_1204f(plan))
    got = row(before, "qwen3.6-35b-a3b", "vllm", "eagle3")
    assert got["status"] == coverage.NOT_RUN and got["configs"] == "config/h200-schemes-gdn-eagle3.yaml"
    # an attempt later than every record of its cell still counts (the runner's own marker, written now)
    later = baseline.with_columns(started=pl.lit(4.0e9))
    assert coverage.superseded_attempts_dropped(later, records).height == 3



def test_a_row_one_config_can_run_names_another_config_s_plan_time_reason_as_that_config_s(table, records, plan):
    """SGLang EAGLE3 on Qwen3.6 until 2026-12-04e: h200-schemes-gdn-eagle3.yaml planned it with a head;
    h200-schemes-sglang-families.yaml plans the pair without one (unsupported at plan time). The row was not run, its
    config the one that can run it, and the other config's reason is said to be that config's — not the row's.
    Since 2026-12-04e both configs refuse it (ADR 0194 addendum 3), so the example is the plan as it stood before:
    the gdn-eagle3 rows without their new reason, and the records before that session."""
    gdn_eagle3 = (C("config") == "config/h200-schemes-gdn-eagle3.yaml") & (C("engine") == "sglang")
    plan_before = plan_before_1204f(plan).with_columns(
        pl.when(gdn_eagle3 & (C("method") == "eagle3")).then(None).otherwise(C("plan_reason")).alias("plan_reason")
    )
    table_before = coverage.matrix(records.filter(~C("run").str.contains("session-2026-12-04e")), plan_before)
    got = row(table_before, "qwen3.6-35b-a3b", "sglang", "eagle3")
    assert got["status"] == coverage.NOT_RUN
    assert got["configs"] == "config/h200-schemes-gdn-eagle3.yaml"
    planned = plan_before.filter(
        (C("target_model") == "config/models/qwen3.6-35b-a3b") & (C("engine") == "sglang") & (C("method") == "eagle3")
    )
    elsewhere = planned.filter(C("plan_reason").is_not_null())
    assert set(elsewhere["config"]) == {"config/h200-schemes-sglang-families.yaml"}
    (reason,) = set(elsewhere["plan_reason"])
    assert got["reason"].split(" | ")[0] == f"planned unsupported under config/h200-schemes-sglang-families.yaml: {reason}"
    # today: unsupported, the row's reasons naming each config's own (the families config's missing head first)
    now = row(table, "qwen3.6-35b-a3b", "sglang", "eagle3")
    assert now["status"] in (coverage.UNSUPPORTED, coverage.UNSUPPORTED_PLAN) and now["configs"] != got["configs"]
    assert (
        f"planned unsupported under {DEPTH_GDN}, config/h200-schemes-gdn-eagle3.yaml: sglang 0.5.17: EAGLE3 target"
        in now["reason"]
    )


H100_EVIDENCE = ROOT / "validation" / "h100-2026-12"
GEMMA_MM_H100 = H100_EVIDENCE / "session-2026-12-06" / "depth-sw-sglang" / "results"
GEMMA_MM_RT_H100 = H100_EVIDENCE / "session-2026-12-06b" / "depth-sw-sglang-rt" / "results"
GEMMA_MM_H200 = EVIDENCE / "session-2026-12-03f" / "gemma4-mm" / "results"


@pytest.fixture(scope="module")
def two_classes(records, plan) -> dict:
    """The matrix over the H200 and H100 evidence (ADR 0241): one per GPU class. The H200 tree's records are the
    worker's shared read (load_evidence reads run by run, so the two reads joined are the one read of both)."""
    both = pl.concat([records, coverage.load_evidence([H100_EVIDENCE])], how="diagonal_relaxed")
    return dict(coverage.board_class_matrices(both, plan, [EVIDENCE, H100_EVIDENCE]))


def _raw_cells(run: Path) -> pl.DataFrame:
    """A run's cell records as committed: its packed file's rows (ADR 0246), else the files of its cells tree."""
    pack = packed.packed_path(run / "cells")
    if packed.is_packed(pack):
        return packed.read_members(pack, None, path_column="record_path")
    return pl.concat([pl.read_parquet(p) for p in sorted((run / "cells").glob("*/*.parquet"))], how="diagonal_relaxed")


def _gemma_mm_ratios(run: Path) -> dict[tuple[int, float], float]:
    """mJ per committed token of each B = 1 / 32 EAGLE3 point over its opening baseline (the H200 run has no
    closing one; the H100 run's two are 0.01 % and 0.12 % apart), read from the raw cells."""
    cells_ = _raw_cells(run)
    base = dict(cells_.filter(C("cell_name") == "baseline--open").select("batch_size", "mj_per_committed_token").rows())
    points = cells_.filter(C("cell_name").str.starts_with("eagle3--"))
    return {(b, L): mj / base[b] for b, L, mj in points.select("batch_size", "configured_L", "mj_per_committed_token").rows()}


def test_evidence_of_two_gpu_classes_gives_one_matrix_each_and_pools_nothing_across(two_classes):
    assert sorted(two_classes) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    h100, h200 = (row(two_classes[c], "gemma-4-26b-a4b-mm", "sglang", "eagle3") for c in sorted(two_classes))
    for got, run in ((h100, GEMMA_MM_H100), (h200, GEMMA_MM_H200)):
        want = _gemma_mm_ratios(run)
        assert got["b1_lmin_ratio"] == pytest.approx(want[(1, 1.0)], rel=2e-3)  # the H100 pairs with its mean baseline
        assert got["b1_lmax_ratio"] == pytest.approx(want[(1, 4.0)], rel=2e-3)
        assert (got["b1_lmin_n"], got["b1_lmin_boards"]) == (1, 1)
    assert h100["B"] == "1,32" and h200["B"] == "1"  # the H200 breadth run measured B = 1 only
    # engine starts: each class's own instances (the H200 run's three; the H100 runs' five each: the token mode is a
    # scheme option, not the engine's start, so the real-draft-token companion's starts count for the model too)
    h100_starts = [s for run in (GEMMA_MM_H100, GEMMA_MM_RT_H100) for s in set(_raw_cells(run)["engine_start_s"].to_list())]
    assert h100["start_unrecorded_n"] == 10 and h100["start_unrecorded_s"] == pytest.approx(statistics.median(h100_starts))
    rt = row(two_classes["NVIDIA H100 80GB HBM3"], "gemma-4-26b-a4b-mm", "sglang", "eagle3 (real-draft-token)")
    rt_cells = _raw_cells(GEMMA_MM_RT_H100).filter(C("batch_size") == 1)
    rt_base = rt_cells.filter(C("role") != "point")["mj_per_committed_token"].mean()  # its baselines are 0.49 % apart
    rt_l4 = rt_cells.filter(C("cell_name") == "eagle3--mv4")["mj_per_committed_token"].item()
    assert rt["b1_lmax_ratio"] == pytest.approx(rt_l4 / rt_base, rel=1e-6)
    assert h200["start_unrecorded_n"] != h100["start_unrecorded_n"]
    # nothing of one class in the other's matrix: every board a row counts is of its class
    for name, table in two_classes.items():
        assert set(table["board_class"]) == {name}


def test_one_gpu_class_gives_the_matrix_as_before(records, plan):
    ((name, alone),) = coverage.board_class_matrices(records, plan, [EVIDENCE])
    assert name == "NVIDIA H200" and "board_class" not in alone.columns
    assert alone.equals(coverage.matrix(records, plan, coverage.failed_attempts([EVIDENCE])))


def test_a_run_whose_records_name_two_gpu_classes_is_refused_by_name(records, plan):
    run = records["run"][0]
    # FAULT INJECTION: one record of a run relabelled as another GPU class (no committed run holds two)
    relabelled = records.with_columns(
        pl.when((C("run") == run) & (pl.int_range(pl.len()) == 0))
        .then(pl.lit(["NVIDIA H100 80GB HBM3"]))
        .otherwise(C("gpu_names"))
        .alias("gpu_names")
    )
    with pytest.raises(AnalysisError, match=rf"run {re.escape(run)} holds records of several GPU classes"):
        coverage.board_class_matrices(relabelled, plan, [EVIDENCE])


def test_cli_prints_one_section_per_gpu_class_and_writes_them_with_their_class(tmp_path, capsys, two_classes):
    out = tmp_path / "coverage.parquet"
    assert coverage.main([str(EVIDENCE), str(H100_EVIDENCE), "--format", "md", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert [ln for ln in text.splitlines() if ln.startswith("### ")] == ["### NVIDIA H100 80GB HBM3", "### NVIDIA H200"]
    written = pl.read_parquet(out)
    assert dict(written.group_by("board_class").len().rows()) == {c: t.height for c, t in two_classes.items()}


def test_sglang_token_modes_are_two_rows_on_the_h100_each_its_own_runs(two_classes):
    """ADR 0244: SGLang's fixed token and its real-draft-token commits are two configurations. On the H100 the MoE
    EAGLE3 arms of both modes ran in several runs (fixed: 2026-12-05e's, 2026-12-07f's and 2026-12-07h's families and 05f's A/B arm;
    real-draft-token: 05f's other arm and 05h's family); each row's B = 32, L = 1 range holds its own mode's runs only."""
    runs = {
        name: _raw_cells(H100_EVIDENCE / name / "results")
        for name in ("session-2026-12-05e/depth-moe-sglang", "session-2026-12-05f/moe-token-mode",
                     "session-2026-12-05h/depth-moe-sglang-rt", "session-2026-12-07f/depth-moe-sglang",
                     "session-2026-12-07h/depth-moe-sglang")
    }
    by_mode: dict[str, set[str]] = {}
    for name, df in runs.items():
        points = df.filter(C("engine") == "sglang", C("method") == "eagle3", C("batch_size") == 32, C("configured_L") == 1)
        for cfg in points["engine_config"]:
            mode = json.loads(cfg).get(coverage.SGLANG_TOKEN_MODE_KEY, "fixed")
            by_mode.setdefault(mode, set()).add(name)
    assert {m: len(r) for m, r in by_mode.items()} == {"fixed": 4, schemes.REAL_DRAFT_TOKEN: 2}
    h100 = two_classes["NVIDIA H100 80GB HBM3"]
    fixed = row(h100, "qwen3-30b-a3b", "sglang", "eagle3")
    rt = row(h100, "qwen3-30b-a3b", "sglang", f"eagle3 ({schemes.REAL_DRAFT_TOKEN})")
    assert fixed["b32_lmin_runs"] == len(by_mode["fixed"]) and rt["b32_lmin_runs"] == len(by_mode[schemes.REAL_DRAFT_TOKEN])
    assert fixed["b32_lmin_ratio_hi"] < 1 < rt["b32_lmin_ratio_lo"]  # a saving and a cost, never one range
