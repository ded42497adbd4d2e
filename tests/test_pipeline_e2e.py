"""The demo grid through the whole chain: Snakemake → real vLLM cells → analysis → report."""

from __future__ import annotations

import polars as pl
import pytest
from snakemake_api import plan

from specjoule import cells, config, records

pytestmark = pytest.mark.engine
REPO_CONFIG = config.REPO_ROOT / "config/config.yaml"


@pytest.mark.engine_reader
def test_every_cell_wrote_one_record_with_honest_energy(demo_run):
    table = cells.build(config.load(REPO_CONFIG))
    paths = [demo_run / c.record_path for c in table]
    assert all(p.exists() for p in paths)
    rows = records.read_records(paths).to_pylist()
    assert len(rows) == len(table) == 4
    for row in rows:
        assert row["meter"] == "none"
        assert row["energy_j"] is None and row["mj_per_committed_token"] is None
        assert row["committed_tokens"] == row["requests_completed"] * row["output_len"] > 0
        assert row["requests_failed"] == 0
        assert row["device_held_s"] >= row["engine_start_s"] + row["warmup_s"] + row["window_s"]
        assert row["config_hash"] == config.config_hash(config.load(REPO_CONFIG))


@pytest.mark.engine_reader
def test_cells_ran_in_the_recorded_order(demo_run):
    rows = pl.read_parquet(demo_run / "results/records.parquet").sort("run_order_index")
    starts = rows["window_start"].to_list()
    assert starts == sorted(starts), "cells did not run in their shuffled, recorded order"
    assert rows["role"].to_list()[0] == "opening_baseline" and rows["role"].to_list()[-1] == "closing_baseline"


@pytest.mark.engine_reader
def test_speculative_cells_counted_drafts(demo_run):
    rows = pl.read_parquet(demo_run / "results/records.parquet")
    for method in ("ngram", "draft_model"):
        row = rows.filter(pl.col("method") == method).row(0, named=True)
        assert row["drafts"] > 0 and row["accepted_tokens"] is not None
        assert sum(row["accepted_per_position"]) == row["accepted_tokens"]
        assert row["realized_L"] == pytest.approx(1 + row["accepted_tokens"] / row["drafts"])
    draft = rows.filter(pl.col("method") == "draft_model").row(0, named=True)
    assert draft["draft_tokens"] == draft["drafts"] * draft["k"]


@pytest.mark.engine_reader
def test_checks_curves_and_report_say_energy_was_not_measured(demo_run):
    checks = pl.read_parquet(demo_run / "results/checks.parquet")
    energy = checks.filter(pl.col("check") == "energy_measured")
    assert energy.height >= 1 and set(energy["status"]) == {"fail"}
    curves = pl.read_parquet(demo_run / "results/curves.parquet")
    assert curves.height == 2  # ngram and draft against the baseline
    assert curves["energy_ratio"].null_count() == curves.height
    assert all("energy_measured" in r for r in curves["energy_refused_reason"].to_list())
    html = (demo_run / "results/report.html").read_text()
    assert "meter: none" in html
    assert "held by 4 engine launch(es)" in html  # the device-time account: one launch per demo cell
    assert "http://" not in html.replace("http://www.w3.org", "")  # self-contained: no external loads


def test_a_complete_run_plans_nothing(demo_run):
    counts = plan(demo_run, REPO_CONFIG)
    assert counts["run_cell"] == 0 and counts["report"] == 0, dict(counts)
