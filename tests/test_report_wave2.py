"""Wave-2 report: intervals from the summary, the paper's figure, the scheme comparison, the scheme ×
family × engine matrix, capture bias per family, the variance budget, headline cards.

Inputs are FIXTURE tables (tests/report_fixtures.py, scenario ``schemes``: made-up numbers). Expected
values are recomputed here from the curves and records with plain polars, not read back from the code
under test.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import polars as pl
import pytest
import vl_convert as vlc

sys.path.insert(0, str(Path(__file__).parent))
import report_fixtures as rf  # noqa: E402

from specjoule.report import figures as F  # noqa: E402
from specjoule.report import numbers as N  # noqa: E402
from specjoule.report import render as R  # noqa: E402
from specjoule.report import schemes as S  # noqa: E402
from specjoule.report import spread as SP  # noqa: E402

CONFIG = ["engine", "model_pair", "scheme", "acceptance_name", "batch_size", "cuda_graphs"]


@pytest.fixture(scope="module")
def sch(tmp_path_factory) -> rf.Scenario:
    return rf.build("schemes", tmp_path_factory.mktemp("schemes"), timelines=False)


@pytest.fixture(scope="module")
def gpu(tmp_path_factory) -> rf.Scenario:
    return rf.build("gpu", tmp_path_factory.mktemp("gpu"), timelines=False)


def fi_of(s: rf.Scenario, **over) -> F.FigureInputs:
    tables = dict(curves=s.curves, records=s.records, checks=s.checks, summary=s.summary) | over
    return F.FigureInputs.from_config(s.config, **tables)


@pytest.fixture(scope="module")
def sch_figs(sch) -> dict[str, F.Figure]:
    return rf.shared_figures(F.build_all(fi_of(sch)))


def one(df: pl.DataFrame, **eq) -> pl.DataFrame:
    for k, v in eq.items():
        df = df.filter(pl.col(k).is_null() if v is None else pl.col(k) == v)
    return df


def graphs_on(engine: str, model_pair: str, scheme: str, acceptance_name: str, batch_size: int) -> dict:
    """The selection of one schemes-fixture configuration with CUDA graphs on, for ``one``."""
    return dict(
        engine=engine,
        model_pair=model_pair,
        scheme=scheme,
        acceptance_name=acceptance_name,
        batch_size=batch_size,
        cuda_graphs=True,
    )


def unit_span(rows: pl.DataFrame, metric: str, level: str) -> tuple[float, float]:
    """min–max of the per-unit means at a replicate level (what the fixture's summary says its interval is)."""
    u = rows.group_by(level).agg(pl.col(metric).mean())[metric]
    return u.min(), u.max()


def datasets(spec: dict) -> list[dict]:
    out = [r for v in spec.get("datasets", {}).values() for r in v if isinstance(r, dict)]

    def walk(node):
        if isinstance(node, dict):
            d = node.get("data")
            if isinstance(d, dict) and isinstance(d.get("values"), list):
                out.extend(r for r in d["values"] if isinstance(r, dict))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk({k: v for k, v in spec.items() if k != "datasets"})
    return out


# --- intervals: the summary's where the figure's point is one summary configuration -------------------------


def test_point_stats_takes_the_summary_interval_of_the_highest_level(sch):
    pts = fi_of(sch).points
    st = SP.point_stats(pts, CONFIG, ["energy_ratio", "mj_per_committed_token"], sch.summary)
    row = one(st, **graphs_on("vllm", "qwen3_8b", "eagle3", "L2_5", 1)).row(0, named=True)
    rows = one(sch.curves, **graphs_on("vllm", "qwen3_8b", "eagle3", "L2_5", 1))
    assert rows.height == 8  # 2 windows × 2 seeds × 2 engine replicates
    lo, hi = unit_span(rows, "energy_ratio", "engine_replicate")
    assert row["energy_ratio"] == pytest.approx(rows["energy_ratio"].mean(), rel=1e-12)
    assert (row["energy_ratio_lo"], row["energy_ratio_hi"]) == (
        pytest.approx(lo, rel=1e-12),
        pytest.approx(hi, rel=1e-12),
    )
    assert row["energy_ratio_band"] == "ci" and row["interval_level"] == "engine_replicate"
    assert (row["n_windows"], row["n_seeds"], row["n_engine_replicates"], row["n_gpus"]) == (2, 2, 2, 2)
    assert row["support"] == "2 windows × 2 seeds × 2 engine replicates on 2 GPUs; 95 % interval over engine replicates"
    # Without a second engine replicate the interval resamples seeds.
    row = one(st, **graphs_on("sglang", "qwen3_8b", "eagle3", "L2_5", 1)).row(0, named=True)
    rows = one(sch.curves, **graphs_on("sglang", "qwen3_8b", "eagle3", "L2_5", 1))
    assert row["interval_level"] == "seed"
    assert row["energy_ratio_lo"] == pytest.approx(unit_span(rows, "energy_ratio", "seed")[0], rel=1e-12)


def test_a_group_with_fewer_replicates_than_its_summary_row_gets_no_interval(sch):
    # Leave out engine replicate 1: the summary's interval is over rows the figure would not show.
    pts = fi_of(sch).points.filter(pl.col("engine_replicate") == 0)
    st = SP.point_stats(pts, CONFIG, ["energy_ratio"], sch.summary)
    row = one(st, **graphs_on("vllm", "qwen3_8b", "eagle3", "L2_5", 1)).row(0, named=True)
    rows = one(pts, **graphs_on("vllm", "qwen3_8b", "eagle3", "L2_5", 1))
    assert row["energy_ratio_band"] == "range" and row["interval_level"] is None
    assert (row["energy_ratio_lo"], row["energy_ratio_hi"]) == (rows["energy_ratio"].min(), rows["energy_ratio"].max())
    assert row["support"].endswith("no interval (whiskers: min–max of replicates)")


def test_a_summary_row_with_a_failed_check_gives_no_interval(sch):
    summary = sch.summary.with_columns(
        failed_checks=pl.when((pl.col("engine") == "vllm") & (pl.col("model_pair") == "qwen3_8b"))
        .then(pl.lit(["baseline_drift"]))
        .otherwise(pl.col("failed_checks"))
    )
    st = SP.point_stats(fi_of(sch).points, CONFIG, ["energy_ratio"], summary)
    assert set(one(st, engine="vllm", model_pair="qwen3_8b")["energy_ratio_band"]) == {"range"}
    assert set(one(st, engine="sglang", model_pair="qwen3_8b")["energy_ratio_band"]) == {"ci"}


def test_derived_values_take_the_interval_through_their_map(sch):
    pts = fi_of(sch).points
    st_pts = pts.with_columns(saving_pct=(1 - pl.col("energy_ratio")) * 100)
    st = SP.point_stats(
        st_pts,
        CONFIG,
        ["saving_pct", "accepted_per_verification"],
        sch.summary.drop([c for c in sch.summary.columns if c.startswith("accepted_per_verification_")]),
    )
    row = one(st, **graphs_on("vllm", "glm47_flash", "dflash", "L4", 32)).row(0, named=True)
    s = one(sch.summary, **graphs_on("vllm", "glm47_flash", "dflash", "L4", 32)).row(0, named=True)
    # A saving's ends swap; accepted per pass is realized L − 1 when the summary has no column of its own.
    assert row["saving_pct_lo"] == pytest.approx((1 - s["energy_ratio_ci_high"]) * 100, rel=1e-12)
    assert row["saving_pct_hi"] == pytest.approx((1 - s["energy_ratio_ci_low"]) * 100, rel=1e-12)
    assert row["accepted_per_verification"] == pytest.approx(s["realized_L_mean"] - 1, rel=1e-12)
    assert row["accepted_per_verification_lo"] == pytest.approx(s["realized_L_ci_low"] - 1, rel=1e-12)


def test_an_older_summary_interval_is_over_seeds(gpu):
    """A summary over seeds alone (one window, one engine replicate): its interval is the seeds' (ADR 0027, 0081)."""
    assert set(gpu.summary["interval_level"].drop_nulls()) == {"seed"}
    pts = fi_of(gpu).points
    keys = ["engine", "model_pair", "workload", "corpus", "cuda_graphs", "batch_size", "scheme", "acceptance_name"]
    st = SP.point_stats(pts, keys, ["energy_ratio"], gpu.summary)
    row = one(
        st, workload="closed", corpus="code", cuda_graphs=True, batch_size=8, scheme="syn", acceptance_name="mv3"
    ).row(0, named=True)
    s = one(
        gpu.summary,
        workload="closed",
        corpus="code",
        cuda_graphs=True,
        batch_size=8,
        scheme="syn",
        acceptance_name="mv3",
    ).row(0, named=True)
    assert row["energy_ratio_band"] == "ci" and row["interval_level"] == "seed"
    assert (row["energy_ratio_lo"], row["energy_ratio_hi"]) == (s["energy_ratio_ci_low"], s["energy_ratio_ci_high"])
    assert row["support"] == "1 window × 2 seeds × 1 engine replicate on 2 GPUs; 95 % interval over seeds"


# --- the paper's figure ---------------------------------------------------------------------------------------


def test_paper_figure_panels_are_family_model_engine_in_config_order(sch, sch_figs):
    fig = sch_figs["energy_vs_accepted_per_pass"]
    assert fig.drawn, fig.reason
    spec = fig.spec()
    vlc.vegalite_to_vega(spec, vl_version=F.VEGALITE_VERSION)
    body = spec["vconcat"][1]
    titles = [p["title"] for p in body["concat"]]
    assert titles == [
        "gated_deltanet · dense · qwen36_27b · vllm",
        "gated_deltanet · dense · qwen36_27b · sglang",
        "gqa · dense · qwen3_8b · vllm",
        "gqa · dense · qwen3_8b · sglang",
        "gqa · MoE · qwen3_30b_a3b · vllm",
        "gqa · MoE · qwen3_30b_a3b · sglang",
        "mla · MoE · glm47_flash · vllm",
        "mla · MoE · glm47_flash · sglang",
    ]
    assert body["columns"] == 2  # engines side by side


def test_paper_figure_points_band_and_tooltips(sch, sch_figs):
    spec = sch_figs["energy_vs_accepted_per_pass"].spec()
    # The panel data carry no model column: take the qwen3_8b vllm panel's rows from its own layer data.
    body = spec["vconcat"][1]["concat"]
    (panel,) = [p for p in body if p["title"] == "gqa · dense · qwen3_8b · vllm"]
    data = panel["data"]
    rows = spec["datasets"][data["name"]] if "name" in data else data["values"]
    (pt,) = [
        r
        for r in rows
        if r["scheme"] == "dflash"
        and r["acceptance_name"] == "L4"
        and r["sel_batch_size"] == "B=1"
        and r["sel_cuda_graphs"] == "on"
    ]
    cur = one(sch.curves, **graphs_on("vllm", "qwen3_8b", "dflash", "L4", 1))
    lo, hi = unit_span(cur, "mj_per_committed_token", "engine_replicate")
    assert pt["mj_per_committed_token"] == pytest.approx(cur["mj_per_committed_token"].mean(), rel=1e-5)
    assert (pt["mj_per_committed_token_lo"], pt["mj_per_committed_token_hi"]) == (
        pytest.approx(lo, rel=1e-5),
        pytest.approx(hi, rel=1e-5),
    )
    assert pt["accepted_per_verification"] == pytest.approx(cur["accepted_per_verification"].mean(), rel=1e-5)
    # The per-pass quantities, from the records: a block drafter verifies its whole block (k = 7 → 8 wide).
    recs = one(sch.records, **graphs_on("vllm", "qwen3_8b", "dflash", "L4", 1)).filter(pl.col("status") == "measured")
    assert pt["verify_width"] == pytest.approx(8.0)
    assert pt["draft_passes_per_round"] == 1
    assert pt["drafted_per_committed"] == pytest.approx(
        (recs["draft_tokens"] / recs["committed_tokens"]).mean(), rel=1e-5
    )
    # Per request-step (ADR 0256), request-steps = committed − accepted: the mean over the point's records.
    steps = recs["committed_tokens"] - recs["accepted_tokens"]
    assert pt["drafted_step_share"] == pytest.approx((recs["drafts"] / steps).mean(), rel=1e-5)
    assert pt["committed_per_step"] == pytest.approx((recs["committed_tokens"] / steps).mean(), rel=1e-5)
    # ... and per decode step (ADR 0256 addendum 2): a request's prefill step out, at most as many steps back as a
    # step accepts tokens (the positive rates) a request; closed batch, so bounded
    assert set(recs["workload_kind"]) == {"closed_batch"}
    fewest = steps - recs["requests_completed"]
    most = fewest + recs["requests_completed"] * pl.Series([sum(r > 0 for r in rates) for rates in recs["acceptance_rates"]])
    assert (most > fewest).all()
    assert pt["drafted_decode_share_low"] == pytest.approx((recs["drafts"] / most).mean(), rel=1e-5)
    assert pt["drafted_decode_share_high"] == pytest.approx((recs["drafts"] / fewest).clip(upper_bound=1.0).mean(), rel=1e-5)
    assert pt["support"].startswith("2 windows × 2 seeds × 2 engine replicates on 2 GPUs")
    assert pt["ratio_text"].count("[") == 1
    # Tooltips name the per-pass quantities.
    titles = {t.get("title") for l in panel["layer"] for t in (l.get("encoding", {}).get("tooltip") or [])}
    assert {
        "verify width (tokens / request / pass)",
        "drafted per committed token",
        "draft passes per round",
        "accepted per verify pass",
        "drafted share of steps",
        "committed per step",
        "drafted share of decode steps, at least",
        "drafted share of decode steps, at most",
        "behind it",
    } <= titles
    # The band is the opening and closing baselines of that engine, model, batch and graph mode.
    (band_layer,) = [l for l in panel["layer"] if l.get("mark", {}).get("type") == "rect"]
    band = spec["datasets"][band_layer["data"]["name"]]
    (b,) = [r for r in band if r["sel_batch_size"] == "B=1" and r["sel_cuda_graphs"] == "on"]
    base = one(sch.records, engine="vllm", model_pair="qwen3_8b", batch_size=1, cuda_graphs=True).filter(
        pl.col("role") != "point"
    )
    assert base.height == 16  # opening + closing × 2 windows × 2 seeds × 2 engine replicates
    assert b["base_lo"] == pytest.approx(base["mj_per_committed_token"].min(), rel=1e-5)
    assert b["base_hi"] == pytest.approx(base["mj_per_committed_token"].max(), rel=1e-5)


def test_paper_figure_reads_per_pass_columns_from_the_records_when_curves_lack_them(sch):
    lean = sch.curves.drop(
        ["verify_width", "drafted_per_committed", "draft_passes_per_round", "target_family", "target_moe"]
    )
    fig = F.energy_vs_accepted_per_pass(fi_of(sch, curves=lean)).to_dict()
    assert "gqa · MoE · qwen3_30b_a3b · vllm" in json.dumps(fig, ensure_ascii=False)
    widths = {r["verify_width"] for r in datasets(fig) if r.get("scheme") == "eagle3" and "verify_width" in r}
    assert widths == {4.0}


def test_paper_figure_without_family_says_so_in_the_panel(sch):
    lean = sch.curves.drop(["target_family", "target_moe"])
    recs = sch.records.drop(["target_family", "target_moe"])
    fig = F.energy_vs_accepted_per_pass(fi_of(sch, curves=lean, records=recs)).to_dict()
    titles = [p["title"] for p in fig["vconcat"][1]["concat"]]
    assert all(t.startswith(F.FAMILY_UNKNOWN + " · ") for t in titles)


def test_paper_figure_on_cpu_says_why(tmp_path):
    cpu = rf.build("cpu", tmp_path, timelines=False)
    (fig,) = F.build_all(fi_of(cpu), names=["energy_vs_accepted_per_pass"])
    assert not fig.drawn and fig.reason.startswith("meter: none")


def test_every_wave2_figure_validates_and_compiles(sch_figs):
    assert {n for n, f in sch_figs.items() if f.drawn} == set(F.FIGURE_NAMES) - {
        "concurrency_per_arm",
        "power_timeline",
    }
    for f in sch_figs.values():
        if f.drawn:
            vlc.vegalite_to_vega(f.spec(), vl_version=F.VEGALITE_VERSION)


# --- capture bias ------------------------------------------------------------------------------------------------


def test_capture_bias_per_family_with_the_papers_bars(sch, sch_figs):
    t = F.capture_bias_table(fi_of(sch))
    assert set(t["batch_size"]) == {1}  # graphs off ran at single stream only
    assert set(zip(t["family"], t["moe"])) == {("gqa", False), ("gqa", True), ("mla", True), ("gated_deltanet", False)}
    for r in t.iter_rows(named=True):
        scheme, _, vector = r["arm"].partition(" · ")
        rows = one(
            sch.curves,
            engine=r["engine"],
            model_pair=r["model_pair"],
            batch_size=1,
            scheme=scheme,
            acceptance_name=vector or None,
        )
        on = one(rows, cuda_graphs=True)["energy_ratio"].mean()
        off = one(rows, cuda_graphs=False)["energy_ratio"].mean()
        assert r["bias_pp"] == pytest.approx((on - off) * 100, rel=1e-9), r
        if r["bias_pp_lo"] is not None:
            assert r["bias_pp_lo"] <= r["bias_pp"] <= r["bias_pp_hi"]
    # The made-up physics' bias comes back out on average (single cells carry the fixture's noise).
    for (moe, engine), grp in t.group_by(["moe", "engine"]):
        expected = rf.CAPTURE_BIAS_PP[moe] * (rf.SGLANG_RATIO_SCALE if engine == "sglang" else 1.0)
        assert grp["bias_pp"].mean() == pytest.approx(expected, abs=1.5), (moe, engine)
    spec = sch_figs["cuda_graphs"].spec()
    text = json.dumps(spec, ensure_ascii=False)
    for title in (
        "gqa · dense: capture bias",
        "gqa · MoE: capture bias",
        "mla · MoE: capture bias",
        "gated_deltanet · dense: capture bias",
    ):
        assert title in text
    refs = {(r["lo"], r["hi"]) for r in datasets(spec) if "lo" in r and "text" in r}
    assert refs == {(0.0, 10.0), (19.0, 39.0)}
    assert "paper, B=1: < 10 pp on every dense model" in text and "19–39 pp on every MoE model" in text


def test_capture_bias_pairs_graph_modes_measured_on_different_boards(gpu):
    """On and off of one configuration may run on two boards (campaigns differ in graph mode)."""
    moved = gpu.curves.with_columns(
        gpu_uuid=pl.when(pl.col("cuda_graphs")).then(pl.col("gpu_uuid")).otherwise(pl.lit("GPU-another-board"))
    )
    recs = gpu.records.with_columns(
        gpu_uuid=pl.when(pl.col("cuda_graphs")).then(pl.col("gpu_uuid")).otherwise(pl.lit("GPU-another-board"))
    )
    assert (
        F.capture_bias_table(fi_of(gpu, curves=moved, records=recs)).height
        == F.capture_bias_table(fi_of(gpu)).height
        > 20
    )


# --- scheme comparison -----------------------------------------------------------------------------------------


def test_match_at_measured_interpolated_and_never_extrapolated():
    pts = [(1.5, 1.0, 0.9, 1.1, "ci", "a"), (2.5, 0.8, 0.7, 0.9, "ci", "a"), (3.5, 0.6, None, None, None, "a")]
    m = S.match_at(pts, 2.5, 1e-9)
    assert (m.value, m.lo, m.hi, m.interpolated) == (0.8, 0.7, 0.9, False)
    m = S.match_at(pts, 2.0, 1e-9)
    assert m.interpolated and m.value == pytest.approx(0.9) and (m.lo, m.hi) == (pytest.approx(0.8), pytest.approx(1.0))
    m = S.match_at(pts, 3.0, 1e-9)  # one end has no interval: the interpolated value has none either
    assert m.value == pytest.approx(0.7) and m.lo is None and m.band is None
    assert S.match_at(pts, 1.0, 1e-9) is None and S.match_at(pts, 4.0, 1e-9) is None
    assert S.match_at(pts, 2.54, 0.05).interpolated is False  # within the tolerance: measured there
    assert S.match_at([], 1.0, 0.05) is None


def test_comparison_at_matched_L(sch):
    long = S.comparison(fi_of(sch), "L")
    sel = dict(engine="vllm", model_pair="qwen3_8b", batch_size=1, cuda_graphs=True)
    at = lambda t, arm: one(long, **sel, target=t, arm=arm).row(0, named=True)  # noqa: E731
    cur = one(sch.curves, **sel)
    mean = lambda scheme, L: one(cur, scheme=scheme, configured_L=L)["energy_ratio"].mean()  # noqa: E731
    assert at(3.5, "eagle3")["ratio"] == pytest.approx(mean("eagle3", 3.5), rel=1e-12)
    assert at(3.5, "eagle3")["interpolated"] is False
    d = at(3.5, "dflash")  # dflash ran L = 2.5 and 4: 3.5 is two thirds of the way
    assert d["interpolated"] is True
    assert d["ratio"] == pytest.approx(
        mean("dflash", 2.5) + (2 / 3) * (mean("dflash", 4.0) - mean("dflash", 2.5)), rel=1e-9
    )
    assert at(6.0, "eagle3")["ratio"] is None  # eagle3 (k=3) stops at L = 3.5: never extrapolated
    assert at(1.5, "dflash")["ratio"] is None
    assert "mtp" not in set(one(long, **sel)["arm"])  # unsupported on Qwen3-8B: no point at all
    assert "ngram" not in set(long["arm"])  # model acceptance has no configured L


def test_comparison_at_matched_accepted_per_pass(sch):
    fi = fi_of(sch)
    long = S.comparison(fi, "apv")
    sel = dict(engine="sglang", model_pair="glm47_flash", batch_size=32, cuda_graphs=True)
    g = one(long, **sel)
    ngram_apv = one(fi.points, **sel, scheme="ngram")["accepted_per_verification"].mean()
    targets = sorted(set(g["target"]))
    assert targets == sorted({0.5, 1.5, 2.5, 3.0, 5.0} | {round(ngram_apv, 2)})
    e = one(g, target=round(ngram_apv, 2), arm="eagle3").row(0, named=True)
    assert e["interpolated"] is True  # eagle3 measured near 0.5 and 1.5 accepted per pass: bracketed
    pts = (
        one(fi.points, **sel, scheme="eagle3")
        .group_by("configured_L")
        .agg(pl.col("accepted_per_verification").mean(), pl.col("energy_ratio").mean())
        .sort("configured_L")
    )
    x0, x1 = pts["accepted_per_verification"][0], pts["accepted_per_verification"][1]
    y0, y1 = pts["energy_ratio"][0], pts["energy_ratio"][1]
    t = round(ngram_apv, 2)
    assert e["ratio"] == pytest.approx(y0 + (t - x0) / (x1 - x0) * (y1 - y0), rel=1e-9)
    assert one(g, target=round(ngram_apv, 2), arm="ngram").row(0, named=True)["interpolated"] is False


def test_comparison_table_text_and_footnote(sch):
    t = S.comparison_table(fi_of(sch), "L", ["eagle3", "mtp", "dflash", "dspark", "ngram"])
    assert t.columns[:6] == ["family", "target", "engine", "B", "CUDA graphs", "configured L"]
    assert t.arms == ["eagle3", "mtp", "dflash", "dspark"]
    assert any(c.endswith(" †") for row in t.rows for c in row)
    assert "never extrapolated" in t.note and "interpolated linearly along configured L" in t.note
    for row in t.rows:
        for cell in row[6:10]:
            assert cell in ("—", S.NOT_MEASURED) or re.fullmatch(
                r"(≈ )?-?[\d.]+( \[-?[\d.]+, -?[\d.]+\])?( †)?", cell
            ), cell
    # Rows in config order of targets and engines; a scheme without a point on a target says so, not "—".
    assert [r[2] for r in t.rows[:2]] == ["vllm", "vllm"]
    (row,) = [r for r in t.rows if r[1:6] == ["qwen36_27b", "sglang", "1", "on", "2.5"]]
    assert row[8] == S.NOT_MEASURED  # dflash never ran on SGLang for this target
    (row,) = [r for r in t.rows if r[1:6] == ["qwen3_8b", "vllm", "1", "on", "2.5"]]
    assert row[7] == S.NOT_MEASURED  # mtp unsupported on Qwen3-8B
    apv = S.comparison_table(fi_of(sch), "apv", ["eagle3", "mtp", "dflash", "dspark", "ngram"])
    assert "ngram" in apv.arms and "acceptance_length_tolerance (0.05)" in apv.note


# --- scheme × family × engine ------------------------------------------------------------------------------------


def test_scheme_matrix_measured_unsupported_not_run(sch):
    m = S.scheme_matrix(sch.records, sch.config)
    assert m.columns == [
        "scheme",
        "gated_deltanet · vllm",
        "gated_deltanet · sglang",
        "gqa · vllm",
        "gqa · sglang",
        "mla · vllm",
        "mla · sglang",
    ]
    cell = {(r[0], c): (v, m.classes[i][j]) for i, r in enumerate(m.rows) for j, (c, v) in enumerate(zip(m.columns, r))}
    assert cell[("eagle3", "gqa · vllm")] == ("measured (qwen3_8b, qwen3_30b_a3b)", "m-measured")
    v, cls = cell[("mtp", "gqa · vllm")]
    assert (
        v
        == (
            "qwen3_8b: unsupported (Qwen3ForCausalLM has no MTP layers (num_nextn_predict_layers is 0)); "
            "qwen3_30b_a3b: measured"
        )
        and cls == "m-unsupported"
    )
    assert cell[("dflash", "gated_deltanet · sglang")] == ("not run (qwen36_27b)", "m-not-run")
    assert cell[("dspark", "mla · sglang")] == (
        "unsupported (glm47_flash): DSPARK does not support Glm4MoeLiteForCausalLM (MLA attention)",
        "m-unsupported",
    )


def test_scheme_matrix_on_records_older_than_status(gpu):
    recs = gpu.records.drop(["status", "unsupported_reason", "target_family"])
    m = S.scheme_matrix(recs, gpu.config)
    assert m.columns == ["scheme", f"{F.FAMILY_UNKNOWN} · vllm"]
    assert {r[1] for r in m.rows} == {"measured (qwen3b)"}


def test_unsupported_list_counts_cells(sch):
    u = S.unsupported_list(sch.records)
    assert u.height == 3 and set(u["cells"]) == {18}  # 2 graph modes at B=1 + graphs on at B=32, × 2 seeds × 3 vectors
    assert S.unsupported_list(sch.records.drop("status")).height == 0


# --- the rendered report -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sch_html(sch, sch_figs, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("sch-figures")
    F.export(list(sch_figs.values()), out, html=False)
    manifest, specs = F.read_manifest(out)
    return R.render(
        R.ReportInputs(
            config=sch.config,
            config_hash="fixture0000hash",
            records=sch.records,
            checks=sch.checks,
            curves=sch.curves,
            manifest=manifest,
            specs=specs,
            summary=sch.summary,
            variance=sch.variance,
        )
    )


def section(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end)]


def test_report_sections_in_order(sch_html):
    order = [
        '<h2 id="figures">',
        '<h2 id="schemes">',
        'data-axis="L"',
        'data-axis="apv"',
        'id="scheme-matrix"',
        'id="unsupported-cells"',
        '<h2 id="engines">',
        '<h2 id="spread">',
        'id="variance-budget"',
        '<h2 id="tables">',
    ]
    at = [sch_html.index(x) for x in order]
    assert at == sorted(at)


def test_headline_cards_quote_only_supported_digits(sch, sch_html):
    fi = fi_of(sch)
    keys = ["engine", "model_pair", "workload", "corpus", "cuda_graphs", "batch_size", "scheme", "acceptance_name"]
    means = fi.points.group_by(keys).agg(pl.col("energy_ratio").mean()).sort("energy_ratio")
    best = means.row(0, named=True)
    rows = one(sch.curves, **{k: best[k] for k in keys})
    level = "engine_replicate" if rows["engine_replicate"].n_unique() > 1 else "seed"
    lo, hi = unit_span(rows, "energy_ratio", level)
    words = N.saving_words(best["energy_ratio"], lo, hi)
    card = section(sch_html, 'data-headline="best"', 'data-headline="worst"')
    assert words in card and "[" in words
    assert (
        f"{best['engine']}, {best['model_pair']}, {best['scheme']} · {best['acceptance_name']}, B={best['batch_size']}"
        in card
    )
    assert "2 windows × 2 seeds × 1 engine replicate on 2 GPUs; 95 % interval over seeds" in card
    # The digits: the saving's last digit sits where the interval's half-width starts.
    dec = N.interval_decimals((1 - hi) * 100, (1 - lo) * 100)
    value = re.search(r"([\d.]+) % less", card).group(1)
    assert (len(value.split(".")[1]) if "." in value else 0) == max(dec, 0)


def test_report_without_summary_says_one_window_no_interval(gpu, tmp_path):
    figs = F.build_all(fi_of(gpu, summary=None))
    F.export(figs, tmp_path, html=False)
    manifest, specs = F.read_manifest(tmp_path)
    html = R.render(
        R.ReportInputs(
            config=gpu.config,
            config_hash="x",
            records=gpu.records,
            checks=gpu.checks,
            curves=gpu.curves,
            manifest=manifest,
            specs=specs,
        )
    )
    assert "no energy ratio carries an interval (no summary table): one window, no interval" in html
    card = section(html, 'data-headline="best"', 'data-headline="worst"')
    assert "≈ " in card and "no interval" in card
    assert 'data-no-variance="1"' in html


def test_report_caveats_and_counts_with_unsupported_cells(sch_html):
    assert "54 cell(s) unsupported by their engine (3 engine × target × scheme combination(s))" in sch_html
    assert "dummy (random) weights" not in sch_html  # no drafter model here: n-gram and synthetic acceptance only
    assert "54 of them unsupported by the engine (no window)" in sch_html
    assert "2 window(s) per cell · 2 seed(s) · 2 engine replicate(s) · 2 GPU board(s)" in sch_html
    # Unsupported records have no meter: no "meter none" caveat for them.
    assert "meter: none on" not in sch_html
    assert "276 of 276 configurations carry a 95 % interval of their energy ratio" in sch_html


def test_variance_budget_table(sch, sch_html):
    t = R.variance_table(sch.variance)
    gqa = [r for r in t.rows if r[0] == "gqa"]
    assert [r[2] for r in gqa] == ["windows", "seeds", "engine replicates", "GPUs", "runs", "residual"]
    v = sch.variance.filter((pl.col("family") == "gqa") & (pl.col("level") == "engine_replicate")).row(0, named=True)
    assert gqa[2][4] == R.fmt(v["share"] * 100, 2) + " %" and gqa[2][6] == "yes"
    assert gqa[3][3:5] == ["—", "not estimable"] and "confounded with seed" in gqa[3][7]
    mla = [r for r in t.rows if r[0] == "mla"]
    assert mla[2][4] == "not estimable" and mla[2][7] == "one engine replicate in this family"
    budget = section(sch_html, 'id="variance-budget"', '<h2 id="tables">')
    assert budget.count('class="not-estimable"') == sum(1 for r in t.rows if r[6] == "not estimable")
    with pytest.raises(ValueError, match="lacks column"):
        R.variance_table(sch.variance.drop("estimable"))


def test_tables_from_before_wave_2_still_draw_and_render(gpu, tmp_path):
    """Records, curves and summary without any wave-2 column (as the committed wave-1 evidence has them)."""
    wave2 = list(rf.WAVE2_COLUMNS)
    recs = gpu.records.drop([c for c in wave2 if c in gpu.records.columns])
    # ... nor the per request-step columns derive writes from ADR 0256 on
    assert set(rf.STEP_CURVE_COLUMNS) <= set(gpu.curves.columns)
    curves = gpu.curves.drop([c for c in [*wave2, *rf.STEP_CURVE_COLUMNS] if c in gpu.curves.columns])
    figs = list(rf.shared_figures(F.build_all(fi_of(gpu, records=recs, curves=curves))).values())  # specs read 3-4 times
    drawn = {f.name for f in figs if f.drawn}
    assert drawn == set(F.FIGURE_NAMES) - {"engine_comparison", "power_timeline"}  # no timelines given here
    (paper,) = [f for f in figs if f.name == "energy_vs_accepted_per_pass"]
    assert f"{F.FAMILY_UNKNOWN} · qwen3b · vllm" in json.dumps(paper.spec(), ensure_ascii=False)
    # Unknown there, so left out: no tooltip for them and no 0 or NaN in any figure's data.
    for f in figs:
        if not f.drawn:
            continue
        text = json.dumps(f.spec(), ensure_ascii=False)
        assert "drafted share of steps" not in text and "committed per step" not in text, f.name
        assert "decode steps" not in text, f.name
        assert not any(c in r for r in datasets(f.spec()) for c in rf.STEP_CURVE_COLUMNS), f.name
    F.export(figs, tmp_path, html=False)
    manifest, specs = F.read_manifest(tmp_path)
    html = R.render(
        R.ReportInputs(
            config=gpu.config,
            config_hash="x",
            records=recs,
            checks=gpu.checks,
            curves=curves,
            manifest=manifest,
            specs=specs,
            summary=gpu.summary,
        )
    )
    assert "1 window(s) per cell (not recorded: records before wave 2)" in html
    assert f"{F.FAMILY_UNKNOWN} · vllm" in html and "measured (qwen3b)" in html
    assert "unsupported by their engine" not in html


def test_vllm_v1_draft_model_caveat_comes_from_the_records():
    """The committed 2026-12-01b records ran vLLM's draft_model on V1 without async scheduling: the caveat says so
    with their rounds; the 2026-12-01d records (V2 schemes) do not get it."""
    import polars as pl

    from specjoule.report import render

    root = Path(__file__).resolve().parent.parent / "validation" / "h200-2026-12"
    v1 = pl.read_parquet(root / "session-2026-12-01b" / "results" / "records.parquet")
    text = render._vllm_v1_draft_model(v1)
    assert text and "Model Runner V1" in text and "ms baseline step" in text
    rounds = v1.filter((pl.col("engine") == "vllm") & (pl.col("method") == "draft_model"))["round_time_ms"]
    assert f"{rounds.min():.1f}–{rounds.max():.1f} ms" in text
    v2 = pl.read_parquet(root / "session-2026-12-01d" / "qwen3-8b" / "results" / "records.parquet")
    assert render._vllm_v1_draft_model(v2) is None


def test_vllm_v1_draft_model_caveat_names_the_gpu_busy_fraction_and_survives_async_scheduling():
    """ADR 0096 addendum 3: the 2026-12-02e windows recorded NVML utilization, and the caveat quotes it beside the
    baselines'; a V1 draft_model arm with async scheduling keeps the caveat (0.26.0's V1 drafter runs the same
    piecewise passes from Python either way), worded for the scheduling its records name."""
    import polars as pl

    from specjoule.report import render

    root = Path(__file__).resolve().parent.parent / "validation" / "h200-2026-12"
    recs = pl.read_parquet(root / "session-2026-12-02e" / "spread" / "results" / "records.parquet")
    vllm = recs.filter(pl.col("engine") == "vllm")
    busy = vllm.filter(pl.col("method") == "draft_model")["gpu_busy_fraction"]
    base = vllm.filter(pl.col("method") == "baseline")["gpu_busy_fraction"]
    text = render._vllm_v1_draft_model(recs)
    assert text and "with synchronous scheduling" in text
    assert f"the GPU busy {busy.min():.2f}–{busy.max():.2f} of those windows" in text
    assert f"against {base.min():.2f}–{base.max():.2f} for the baselines" in text
    flip = pl.col("engine_config").str.replace(r'"async_scheduling":\s*false', '"async_scheduling": true')
    is_draft = pl.col("method") == "draft_model"
    on = recs.with_columns(pl.when(is_draft).then(flip).otherwise(pl.col("engine_config")).alias("engine_config"))
    assert (on.filter(is_draft)["engine_config"].str.json_path_match("$.async_scheduling") == "true").all()
    text_on = render._vllm_v1_draft_model(on)
    assert text_on and "with async scheduling and piecewise CUDA graphs" in text_on and "synchronous" not in text_on
    # One arm each way: both named.
    first = pl.int_range(pl.len()) == 0
    mixed = recs.with_columns(
        pl.when(is_draft & first.over("method")).then(flip).otherwise(pl.col("engine_config")).alias("engine_config")
    )
    assert "synchronous or async scheduling (by arm)" in render._vllm_v1_draft_model(mixed)
    # Records from before NVML utilization was recorded: no busy words, the rest as before.
    old = render._vllm_v1_draft_model(pl.read_parquet(root / "session-2026-12-01b" / "results" / "records.parquet"))
    assert old and "GPU busy" not in old and "ms baseline step." in old


def test_vllm_v1_draft_model_caveat_quotes_the_profile_and_names_the_other_arms_runners():
    """ADR 0096's Result (2026-12-04d's profiles) in the caveat, its numbers the committed profile's; the sentence on
    vLLM's other speculative arms says which runner each ran on, from the records (EAGLE3 on Qwen3.6 ran on V1, so
    "V2 and not affected" would be wrong), and is absent where the records hold no other arm."""
    import polars as pl

    from specjoule.report import render

    root = Path(__file__).resolve().parent.parent / "validation" / "h200-2026-12"
    prof = pl.read_parquet(root / "session-2026-12-04d" / "rounds" / "rounds.parquet")
    sync = prof.filter((pl.col("configured_L") == 3.0) & ~pl.col("async_scheduling")).row(0, named=True)
    quoted = f"{sync['gpu_ms_per_round']:.1f} ms of a {sync['round_ms_unprofiled']:.0f} ms round is GPU work"
    draft = pl.read_parquet(root / "session-2026-12-04c" / "draft-async" / "results" / "records.parquet")
    alone = render._vllm_v1_draft_model(draft)
    assert alone and quoted in alone and "Its other speculative arms" not in alone
    gdn = pl.read_parquet(root / "session-2026-12-04d" / "gdn-eagle3" / "results" / "records.parquet")
    both = render._vllm_v1_draft_model(pl.concat([draft, gdn], how="diagonal_relaxed"))
    assert both.endswith(" Its other speculative arms here: eagle3 on Model Runner V1.")
    v2 = pl.read_parquet(root / "session-2026-12-01d" / "qwen3-8b" / "results" / "records.parquet")
    mixed = render._vllm_v1_draft_model(pl.concat([draft, gdn, v2], how="diagonal_relaxed"))
    assert mixed.endswith(
        " Its other speculative arms here: dflash, dspark, eagle3 on Model Runner V2; eagle3 on Model Runner V1."
    )


def test_intervals_over_two_units_are_named_as_ranges_in_the_caveats(sch_html):
    """ADR 0081 addendum 1: a percentile bootstrap over two units is their range; the report says so, and counts
    only intervals over exactly two units of their own level."""
    stats = pl.DataFrame(
        {
            "energy_ratio_band": ["ci", "ci", "ci", "ci", "range", None],
            "interval_level": ["engine_replicate", "engine_replicate", "seed", "window", None, None],
            "n_engine_replicates": [2, 3, 1, 1, 2, 1],
            "n_seeds": [3, 2, 2, 1, 2, 1],
            "n_windows": [2, 2, 2, 4, 2, 1],
        }
    )
    picked = SP.two_unit_intervals(stats)
    # two replicates (whatever the seeds below them), two seeds; not three replicates over two seeds, four
    # windows, or a range that is not an interval
    assert picked["interval_level"].to_list() == ["engine_replicate", "seed"]
    assert picked["n_engine_replicates"].to_list() == [2, 1]
    assert (
        "276 of 276 configurations have their interval from two units (engine replicates, seeds): it is the range "
        "of the two" in sch_html
    )


def test_sglang_draft_model_caveat_quotes_its_rounds_and_the_profile_against_vllms():
    """Issue 17 item 6 on the second engine (ADR 0096 addenda 6 and 8): wherever SGLang's STANDALONE arm was
    measured, the report says its round is host-bound too, with its measured rounds and busy fraction from the
    records and the H200 profile's split, each number the committed one; records without such an arm get nothing."""
    import polars as pl

    from specjoule.report import render

    root = Path(__file__).resolve().parent.parent / "validation" / "h200-2026-12"
    recs = pl.read_parquet(root / "session-2026-12-04g" / "spread-sglang-r0" / "results" / "records.parquet")
    text = render._sglang_draft_model(recs)
    sglang = recs.filter(pl.col("engine") == "sglang")
    arms, base = sglang.filter(pl.col("method") == "draft_model"), sglang.filter(pl.col("method") == "baseline")
    assert text and text.startswith("SGLang 0.5.17's draft_model speculation (STANDALONE)")
    rounds = arms["round_time_ms"]
    assert (
        f"rounds took {rounds.min():.1f}–{rounds.max():.1f} ms against a {base['round_time_ms'].median():.1f} ms"
        in text
    )
    busy = arms["gpu_busy_fraction"]
    assert f"the GPU busy {busy.min():.2f}–{busy.max():.2f} of those windows" in text
    sglang_prof = pl.read_parquet(root / "session-2026-12-04e" / "rounds" / "rounds.parquet")
    l3 = sglang_prof.filter(pl.col("configured_L") == 3.0).row(0, named=True)
    assert f"{l3['gpu_ms_per_round']:.1f} ms of a {l3['round_ms_unprofiled']:.1f} ms round is GPU work" in text
    assert f"about {l3['round_ms_unprofiled'] - l3['gpu_ms_per_round']:.1f} ms is the host's" in text
    vllm_prof = pl.read_parquet(root / "session-2026-12-04d" / "rounds" / "rounds.parquet")
    sync = vllm_prof.filter((pl.col("configured_L") == 3.0) & ~pl.col("async_scheduling")).row(0, named=True)
    assert f"about {sync['round_ms_unprofiled'] - sync['gpu_ms_per_round']:.0f} ms on vLLM" in text
    # the vLLM caveat is the vLLM arm's; records with no SGLang draft-model arm get no SGLang caveat
    assert render._sglang_draft_model(recs.filter(pl.col("engine") == "vllm")) is None
    assert render._sglang_draft_model(sglang.filter(pl.col("method") == "baseline")) is None
    # an older record set without the busy fraction still gets the rounds
    old = pl.read_parquet(root / "session-2026-12-01b" / "results" / "records.parquet")
    old_text = render._sglang_draft_model(old)
    assert old_text and "GPU busy" not in old_text and "ms baseline step." in old_text


def test_sglang_triton_verify_caveat_quotes_its_rounds_and_the_committed_profile():
    """Issue 17 item 6 (ADR 0249): wherever SGLang's speculative arms ran on the Triton attention backend, the report
    says their verify pass is the engine's Triton extend path, with the arms' measured rounds from the records and
    the H100 profile's numbers as committed; arms on another backend, and draft-model arms, get nothing."""
    import polars as pl

    from specjoule.report import render

    root = Path(__file__).resolve().parent.parent / "validation" / "h100-2026-12"
    recs = pl.read_parquet(root / "session-2026-12-06" / "depth-sw-sglang" / "results" / "records.parquet")
    text = render._sglang_triton_verify(recs)
    arms, base = recs.filter(pl.col("method") == "eagle3"), recs.filter(pl.col("method") == "baseline")
    assert text and text.startswith("SGLang 0.5.17's eagle3 arms ran on its Triton attention backend")
    # the rounds of the widest batch against that batch's step, not a range over B = 1 and 32
    rounds = arms.filter(pl.col("batch_size") == 32)["round_time_ms"]
    step = base.filter(pl.col("batch_size") == 32)["round_time_ms"].median()
    assert f"Here at B = 32 its rounds took {rounds.min():.1f}–{rounds.max():.1f} ms against a {step:.1f} ms" in text
    # a busy fraction that is one value at two decimals is written once, not as a range "0.98–0.98"
    busy, base_busy = (f.filter(pl.col("batch_size") == 32)["gpu_busy_fraction"] for f in (arms, base))
    assert f"{busy.min():.2f}" == f"{busy.max():.2f}" and f"{base_busy.min():.2f}" == f"{base_busy.max():.2f}"
    assert f"the GPU busy {busy.min():.2f} of those windows against {base_busy.min():.2f} for the baselines" in text
    # the quoted profile is the committed one (rounds_kernels.parquet of 2026-12-06b)
    kernels = pl.read_parquet(root / "session-2026-12-06b" / "rounds" / "rounds_kernels.parquet")
    verify = kernels.filter(pl.col("batch_size") == 32, pl.col("cell_name") == "eagle3--mv3", pl.col("phase") == "verify")
    step = kernels.filter(pl.col("batch_size") == 32, pl.col("cell_name") == "baseline--open", pl.col("phase") == "other")
    v, s = (dict(f.select("kernel_class", "kernel_ms_per_round").iter_rows()) for f in (verify, step))
    share = (v["attention"] - s["attention"]) / (sum(v.values()) - sum(s.values()))
    p = render.TRITON_VERIFY_PROFILE
    assert (p["verify_ms"], p["step_ms"]) == (round(sum(v.values()), 2), round(sum(s.values()), 2))
    assert (p["attention_ms"], p["step_attention_ms"], p["attention_share"]) == (
        round(v["attention"], 2), round(s["attention"], 2), round(share, 2))
    assert f"took {sum(v.values()):.1f} ms of GPU time a round against the decode step's {sum(s.values()):.1f} ms" in text
    assert f"attention was {100 * share:.0f} % of the difference ({v['attention']:.2f} against {s['attention']:.2f} ms)" in text
    # on FA3 (the MoE depth family on SGLang) and for draft-model arms: no such caveat
    fa3 = pl.read_parquet(root / "session-2026-12-05e" / "depth-moe-sglang" / "results" / "records.parquet")
    assert render._sglang_triton_verify(fa3) is None
    assert render._sglang_triton_verify(base) is None
    standalone = pl.read_parquet(root.parent / "h200-2026-12" / "session-2026-12-04g" / "spread-sglang-r0" / "results"
                                 / "records.parquet")
    assert render._sglang_triton_verify(standalone) is None
