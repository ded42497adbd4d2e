"""The roofline section of the report (issue 18, ADR 0177): the decomposition table and figure from curves
the model priced, the crossover table, and the lines that say why either is missing — on records crafted
from known coefficients (tests/test_roofline.py's generator) and on the committed H200 evidence."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_roofline as gen  # noqa: E402 - the synthetic-record generator with known coefficients

from specjoule.analysis import roofline as rf  # noqa: E402
from specjoule.report import figures as F  # noqa: E402
from specjoule.report import render as R  # noqa: E402
from specjoule.report import roofline as rr  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EVIDENCE = REPO / "validation" / "h200-2026-12"
ROOF_01D = EVIDENCE / "roofline" / "session-2026-12-01d" / "qwen3-8b"


def _priced_curves(host_wait_s: float = 0.01) -> tuple[pl.DataFrame, rf.RooflineResult]:
    """Curves as derive writes them after rule roofline: crafted speculative records at B = 1 and 32, one
    of them with a host-bound wait per round the model cannot see."""
    spec = [gen._record(b, "draft_model", 5, L, name=f"draft--b{b}-L{L}", acceptance=f"L{L:g}")
            for b in (1, 32) for L in (2.0, 5.0)]
    slow = gen._record(32, "draft_model", 5, 4.0, name="draft--slow", acceptance="slow", host_wait_s=host_wait_s)
    records = gen._records([*spec, slow])
    res = rf.model_cells(records, gen._lookup, [gen._calibration()], resamples=50)
    pts = records.filter(pl.col("method") != "baseline").select(
        "cell_id", "engine", "model_pair", "batch_size", "scheme", "method", "k", "acceptance_name", "realized_L",
        "mj_per_committed_token", "baseline_mj_per_committed_token",
        pl.lit(None, pl.String).alias("energy_refused_reason"))
    return rf.attach_to_curves(pts, res.cells), res


def test_decomposition_splits_the_measured_energy_by_the_models_shares():
    curves, res = _priced_curves()
    table = rr.decomposition(curves)
    assert table.height == 5
    cells = res.cells.filter(pl.col("method") == "draft_model")
    for row in table.iter_rows(named=True):
        src = cells.filter((pl.col("batch_size") == row["batch_size"]) &
                           (pl.col("cell_name").str.contains(row["acceptance_name"]) if row["acceptance_name"] != "slow"
                            else pl.col("cell_name") == "draft--slow")).row(0, named=True)
        measured = src["measured_mj_per_committed_token"]
        assert row["verify_mj"] + row["draft_mj"] + row["idle_mj"] == pytest.approx(measured)
        assert row["draft_mj"] == pytest.approx(measured * src["energy_draft_share"])
        assert row["predicted_mj"] == pytest.approx(src["predicted_mj_per_committed_token"])
        assert row["residual"] == pytest.approx(src["residual"])
    # The crafted host wait shows up where it belongs: idle energy, and a positive residual.
    slow = table.filter(pl.col("acceptance_name") == "slow").row(0, named=True)
    exact = table.filter(pl.col("acceptance_name") != "slow")
    assert slow["idle_mj"] > 0.2 * slow["measured_mj"] and slow["residual"] > 0.1
    assert (exact["idle_mj"] < 0.01 * exact["measured_mj"]).all() and (exact["residual"].abs() < 0.02).all()


def test_the_figure_draws_the_tables_numbers():
    curves, _ = _priced_curves()
    table = rr.decomposition(curves)
    spec = rr.decomposition_chart(table).to_dict()
    values = [r for d in spec["datasets"].values() for r in d]
    drawn = {(r["panel"], r["cell"], r["component"]): r["mj"] for r in values}
    assert len(drawn) == 5 * 5  # three measured components, the prediction and the baseline per cell
    for r in table.iter_rows(named=True):
        panel, cell = f"vllm · pair · B = {r['batch_size']}", f"draft_model · {r['acceptance_name']}"
        for comp, col in (("verify", "verify_mj"), ("draft", "draft_mj"), ("idle / host wait", "idle_mj"),
                          ("predicted", "predicted_mj"), ("baseline", "baseline_mj")):
            assert drawn[(panel, cell, comp)] == pytest.approx(r[col]), (cell, comp)
    # And the report's table prints those same numbers.
    printed = {(row[2], row[4]): row for row in rr.decomposition_rows(table)}
    for r in table.iter_rows(named=True):
        row = printed[(str(r["batch_size"]), r["acceptance_name"])]
        assert float(row[7].replace(",", "")) == pytest.approx(r["measured_mj"], rel=1e-3)
        assert row[13] == f"{r['residual']:+.3f}"


def test_crossover_table_lists_predicted_beside_measured():
    curves, res = _priced_curves()
    rows = rr.crossover_rows(res.crossover)
    assert len(rows) == 2 and [r[5] for r in rows] == ["1", "32"]
    for row, cx in zip(rows, res.crossover.sort("batch_size").iter_rows(named=True)):
        assert row[7].startswith(f"{cx['predicted_crossover_L']:.3g} [")
        assert row[9] == cx["measured_bracket"]
        assert 1.0 < cx["predicted_crossover_L"] < 6.0
    assert rr.crossover_rows(None) == [] and rr.crossover_rows(pl.DataFrame(schema=rf.CROSSOVER_SCHEMA)) == []


def test_missing_model_or_crossover_is_said_not_drawn():
    curves, _ = _priced_curves()
    bare = curves.drop("residual", "model_status")
    with pytest.raises(rr.NoModel, match="no roofline columns .*residual, .*model_status"):
        rr.decomposition(bare)
    sec = rr.section(bare, None)
    assert sec["tables"] == []
    assert sec["missing"][0].startswith("no decomposition: the curves carry no roofline columns")
    assert sec["missing"][1] == "no crossover table: results/crossover.parquet was not among the report's inputs"
    unpriced = curves.with_columns(pl.lit("not_modelled").alias("model_status"),
                                   pl.lit("target shape x lacks field 'num_experts'").alias("not_modelled_reason"))
    with pytest.raises(rr.NoModel, match="lacks field 'num_experts'"):
        rr.decomposition(unpriced)


def test_report_renders_the_roofline_section_from_the_committed_h200_evidence(tmp_path):
    """Qwen3-8B EAGLE3 / DFlash / DSpark at B = 1 (session 2026-12-01d): curves with the model's columns and
    the crossover table as rule roofline wrote them (validation/h200-2026-12/roofline/session-2026-12-01d/)."""
    run = EVIDENCE / "session-2026-12-01d" / "qwen3-8b"
    curves = pl.read_parquet(ROOF_01D / "curves.parquet")
    crossover = pl.read_parquet(ROOF_01D / "crossover.parquet")
    records = pl.read_parquet(run / "results" / "records.parquet")
    checks = pl.read_parquet(run / "results" / "checks.parquet")
    from specjoule import config as config_mod

    config = config_mod.load(run / "h200-schemes-qwen3-8b.yaml")
    inputs = F.FigureInputs.from_config(config, curves=curves, records=records, checks=checks)
    figs = F.build_all(inputs, names=["energy_decomposition"])
    assert figs[0].drawn, figs[0].reason
    F.export(figs, tmp_path / "figures", html=False)
    manifest, specs = F.read_manifest(tmp_path / "figures")
    html = R.render(R.ReportInputs(config=config, config_hash="x", records=records, checks=checks, curves=curves,
                                   manifest=manifest, specs=specs, crossover=crossover))
    assert 'id="fig-energy_decomposition"' in html and 'id="roofline-decomposition"' in html
    assert 'id="roofline-crossover"' in html and "between L = 1 (ratio 1.34) and L = 3 (ratio 0.455)" in html
    table = rr.decomposition(curves)
    assert table.height == 9 and set(table["scheme"]) == {"eagle3", "dflash", "dspark"}
    # Every speculative curve row carries the model's prediction, residual and split (issue 18's "done when").
    spec_rows = curves.filter(pl.col("method") != "baseline")
    for col in ("predicted_mj_per_committed_token", "residual", "energy_verify_share", "energy_draft_share",
                "energy_idle_share"):
        assert spec_rows[col].null_count() == 0, col
    # The committed fit (ADR 0182, README there): every cell inside the pre-registered model_residual_max (0.25).
    assert (table["residual"].abs() < 0.25).all()


def test_the_expert_routing_caveat_names_points_and_baselines_below_the_floor_and_says_dummy_only_for_dummy():
    """ADR 0242: a warn caveat once a MoE point, or a campaign's baseline, ran below its routed-expert floor;
    nothing when every pass could have read what uniform routing touches or the columns are absent."""
    curves = pl.DataFrame({
        "campaign_id": ["moe-b32", "moe-b32", "gemma-b32", "dense-b1"],
        "cell_name": ["eagle3--mv1", "eagle3--mv4", "eagle3--mv4", "eagle3--mv4"],
        "model_pair": ["moe", "moe", "gemma", "dense"],
        "round_time_ms": [10.78, 25.39, 17.6, 8.0],
        "expert_floor_ms": [18.83, 18.83, 10.58, None],
        "below_expert_floor": [True, False, False, None],
        "baseline_below_expert_floor": [False, False, True, None],
    })
    (caveat,) = R.expert_routing_caveats(curves, ["moe", "dense"])
    assert caveat.level == "warn" and "ADR 0242" in caveat.text
    assert "1 point(s) (eagle3--mv1 in moe-b32: 10.78 ms against 18.83)" in caveat.text
    assert "the baselines of 1 campaign(s) (gemma-b32)" in caveat.text
    assert "With dummy weights (moe)" in caveat.text  # gemma is not dummy here, dense never below
    (real,) = R.expert_routing_caveats(curves, [])
    assert "dummy" not in real.text
    fine = curves.with_columns(pl.lit(False).alias("below_expert_floor"), pl.lit(False).alias("baseline_below_expert_floor"))
    assert R.expert_routing_caveats(fine, ["moe"]) == []
    assert R.expert_routing_caveats(curves.drop("below_expert_floor"), ["moe"]) == []
