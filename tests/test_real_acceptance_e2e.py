"""Real acceptance through the whole chain (ADR 0120): the project's trained pair on real vLLM (CPU),
draft_model and ngram at model acceptance over code, conversation and long documents, Snakemake from
resolve_models to the report. Three engine starts (shared across the corpora).

Asserted are properties any real drafter shows, never a measured value: counters that add up, a
per-position profile that can only fall (position j+1 is reached only through position j), a draft
model that accepts on the text it was trained on, and acceptance that depends on the text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from specjoule import cells, config, pair, records
from specjoule import resolve_models as rm

pytestmark = pytest.mark.engine
REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config/cpu-real-acceptance.yaml"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("real")
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(work), "--cores", "2", "--resources", "gpu=1",
           "--configfile", str(CONFIG)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    (work / "snakemake.stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"real-acceptance pipeline failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    return work


@pytest.fixture(scope="module")
def rows(real_run) -> pl.DataFrame:
    table = cells.build(config.load(CONFIG))
    return pl.from_arrow(records.read_records([real_run / c.record_path for c in table]))


@pytest.mark.engine_reader
def test_models_were_resolved_first_and_every_cell_ran_on_three_engine_starts(real_run, rows):
    cfg = config.load(CONFIG)
    for ref in rm.model_refs(cfg):
        man = json.loads((real_run / rm.manifest_path(ref)).read_text())
        # The revision is the weights hash the checkpoint's training manifest states (ADR 0120, 0121).
        assert man["source"] == "local" and man["revision"] == "sha256:" + pair.read_manifest(man["path"])[
            "weights_sha256"][:16]
    assert (real_run / "results/logs/resolve_models.log").read_text().count("resolve ") == 2
    assert rows.height == len(cells.build(cfg)) == 9
    assert rows["engine_instance"].n_unique() == 3  # one per scheme, shared by the three corpora
    assert set(rows["corpus"]) == {"code", "conversation", "long_documents"}
    assert rows["requests_failed"].to_list() == [0] * rows.height  # lists: a null must not pass as True


@pytest.mark.engine_reader
def test_speculative_records_carry_consistent_model_acceptance_counters(rows):
    spec = rows.filter(pl.col("method") != "baseline")
    assert spec.height == 6
    for row in spec.iter_rows(named=True):
        where = f"{row['scheme']} on {row['corpus']}"
        assert row["synthetic"] is False and row["acceptance_mechanism"] == "model", where
        per_pos = row["accepted_per_position"]
        assert len(per_pos) == row["k"], where
        assert sum(per_pos) == row["accepted_tokens"] <= row["draft_tokens"] <= row["drafts"] * row["k"], where
        # A position is reached only through the one before it: the profile never rises.
        assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), (where, per_pos)
        assert row["realized_L"] == pytest.approx(1 + row["accepted_tokens"] / row["drafts"]), where
        # Speculation changes how tokens are made, not how many: whole generations of output_len each.
        assert row["committed_tokens"] == row["requests_completed"] * row["output_len"] > 0, where
    drafted = spec.filter(pl.col("method") == "draft_model")
    assert drafted["draft_tokens"].to_list() == [d * k for d, k in zip(drafted["drafts"], drafted["k"])]


@pytest.mark.engine_reader
def test_draft_model_accepts_on_its_training_distribution_and_acceptance_depends_on_the_text(rows):
    draft = rows.filter(pl.col("method") == "draft_model").sort("corpus")
    # Each corpus is text the draft was distilled on: it must accept there (chance is ~k/8192 per round).
    assert all(L is not None and L > 1.1 for L in draft["realized_L"]), draft.select("corpus", "realized_L").to_dicts()
    for method in ("draft_model", "ngram"):
        by_corpus = rows.filter(pl.col("method") == method)["realized_L"].to_list()
        assert len(set(by_corpus)) == 3, (method, by_corpus)


@pytest.mark.engine_reader
def test_report_draws_acceptance_by_corpus_from_measured_cells(real_run):
    html = (real_run / "results/report.html").read_text()
    assert "Acceptance length by corpus and scheme" in html
    assert "every speculative cell uses synthetic acceptance" not in html
    curves = pl.read_parquet(real_run / "results/curves.parquet")
    assert set(curves["corpus"]) == {"code", "conversation", "long_documents"}


@pytest.mark.engine_reader
def test_records_name_the_weights_they_measured(real_run, rows):
    cfg = config.load(CONFIG)
    revision = {r.key.split(".")[2]: json.loads((real_run / rm.manifest_path(r)).read_text())["revision"]
                for r in rm.model_refs(cfg)}
    assert rows["target_revision"].to_list() == [revision["target"]] * rows.height
    drafted = rows.filter(pl.col("method") == "draft_model")
    assert drafted["draft_revision"].to_list() == [revision["draft"]] * drafted.height
    assert rows.filter(pl.col("method") != "draft_model")["draft_revision"].null_count() == 6
