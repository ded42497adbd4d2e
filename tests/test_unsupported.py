"""Cells an engine cannot run end as `unsupported` records with the engine's reason (issue 16, ADR 0063).

Never a silent gap and never a crash: planned-unsupported cells are written without a device lease or an engine
start; an engine that refuses the configuration at start (here real vLLM on CPU, a target architecture it does
not know) writes the same record with its own words, and no engine process stays behind."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from specjoule import cells, config, records, runner
from specjoule.engines import proc
from specjoule.engines.worker import engine_says_unsupported

REPO = Path(__file__).resolve().parent.parent


def _demo_cells() -> list[cells.Cell]:
    return list(cells.build(config.load(REPO / "config" / "config.yaml")))


def _jobs(cells_: list[cells.Cell], out: Path) -> list[runner.CellJob]:
    return [runner.CellJob(c, out / f"{c.name}.parquet", out / f"{c.name}.timeline.parquet") for c in cells_]


def test_planned_unsupported_cells_write_records_without_a_lease(tmp_path, monkeypatch):
    leased = []
    monkeypatch.setattr(runner.gpu, "acquire", lambda *a, **k: leased.append(a) or pytest.fail("leased a device"))
    group = [dataclasses.replace(c, unsupported_reason="vLLM 0.26.0 registers no architecture NoSuchForCausalLM")
             for c in _demo_cells() if c.name.startswith("baseline")]
    jobs = _jobs(group, tmp_path)
    rows = runner.run_cells(jobs, config_hash="h", git_commit="c", version_param=1)
    assert not leased and len(rows) == 2
    for job in jobs:
        row = records.read_records([job.record_path]).to_pylist()[0]
        assert row["status"] == "unsupported"
        assert "NoSuchForCausalLM" in row["unsupported_reason"]
        assert row["cell_id"] == job.cell.cell_id and row["energy_j"] is None and row["window_s"] is None
        assert pq.read_table(job.timeline_path).num_rows == 0


def test_an_unsupported_record_must_say_why_and_measure_nothing():
    cell = _demo_cells()[0]
    row = runner.unsupported_row(cell, "because")
    records.validate_row(row)
    with pytest.raises(records.RecordError, match="must say why"):
        records.validate_row({**row, "unsupported_reason": None})
    with pytest.raises(records.RecordError, match="measured nothing, but has energy_j"):
        records.validate_row({**row, "energy_j": 12.0})
    with pytest.raises(records.RecordError, match="status = 'maybe'"):
        records.validate_row({**row, "status": "maybe"})


@pytest.mark.parametrize("exc,unsupported", [
    (ValueError("Model architectures ['X'] are not supported for now. Supported architectures: ..."), True),
    (NotImplementedError("EAGLE3 with sliding window"), True),
    (RuntimeError("Speculative decoding is not yet supported with pipeline parallelism"), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), False),
    (ValueError("max_model_len 4096 exceeds the KV cache"), False),
    (KeyError("not supported"), False),
])
def test_engine_words_that_mean_unsupported(exc, unsupported):
    assert engine_says_unsupported(exc) is unsupported


@pytest.mark.engine
def test_real_vllm_refusing_an_architecture_writes_an_unsupported_record(tmp_path):
    model = tmp_path / "no-such-model"
    model.mkdir()
    cfg = json.loads((REPO / "config" / "models" / "tiny-target" / "config.json").read_text())
    cfg["architectures"] = ["NoSuchArchitectureForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    raw = config.read_yaml(REPO / "config" / "config.yaml")
    raw["models"] = {"tiny": {**raw["models"]["tiny"], "target": {**raw["models"]["tiny"]["target"], "model": str(model)}}}
    # The bundled registry tables would plan this cell unsupported without an engine (tested above); off, so the
    # engine itself is asked and refuses in its own words.
    raw["protocol"] = {**raw.get("protocol", {}), "unsupported_from_tables": False}
    cell = next(c for c in cells.build(config.validate(raw)) if c.name == "baseline--open")
    assert cell.unsupported_reason is None
    log = tmp_path / "cell.log"
    row = runner.run_cell(cell, tmp_path / "r.parquet", tmp_path / "t.parquet", log_path=log, config_hash="h",
                          git_commit="c", version_param=1)
    assert row["status"] == "unsupported"
    assert "NoSuchArchitectureForCausalLM" in row["unsupported_reason"]
    assert "not supported" in row["unsupported_reason"]
    assert records.read_records([tmp_path / "r.parquet"]).to_pylist()[0]["status"] == "unsupported"
    # The engine's process group is gone: a refused start leaves nothing behind.
    for pgid in {int(p) for p in __import__("re").findall(r"pid (\d+) \(own process group\)", log.read_text())}:
        assert not proc.group_members(pgid), f"engine process group {pgid} survived"


def test_plan_marks_what_the_bundled_registries_cannot_run():
    """GLM-4.7-Flash cannot feed an EAGLE3 head on vLLM 0.26.0 (no SupportsEagle3): the cell is planned unsupported,
    costs no GPU estimate, and its baseline is planned as a measurement."""
    raw = {
        "device": "cuda", "engines": ["vllm"],
        "models": {"glm": {"target": {"model": "config/models/glm-4.7-flash", "load_format": "dummy"}}},
        "schemes": {"baseline": {"method": "baseline"},
                    "eagle3": {"method": "eagle3", "k": 3, "drafter": "config/models/glm-4.7-flash-eagle3"}},
        "batch_sizes": [1], "seeds": [0], "workloads": {"closed": {"kind": "closed_batch"}},
    }
    table = cells.build(config.validate(raw))
    by_role = {c.role: c for c in table}
    point = by_role[cells.ROLE_POINT]
    assert point.unsupported_reason and "Glm4MoeLiteForCausalLM" in point.unsupported_reason
    assert "EAGLE3" in point.unsupported_reason and point.estimated_s == 0
    assert by_role[cells.ROLE_OPENING].unsupported_reason is None and by_role[cells.ROLE_OPENING].estimated_s > 0
    assert "1 cell(s) the engine cannot run" in table.summary()
    off = cells.build(config.validate({**raw, "protocol": {"unsupported_from_tables": False}}))
    assert all(c.unsupported_reason is None for c in off)
    assert [c.cell_id for c in off] == [c.cell_id for c in table], "the mark is not part of the identity"


def test_records_name_the_model_family():
    cell = next(c for c in _demo_cells() if c.name == "draft")
    cols = runner.model_columns(cell.spec)
    assert cols["target_architecture"] == "Qwen2ForCausalLM" and cols["target_family"] in ("gqa", "mha")
    assert cols["target_moe"] is False and cols["draft_architecture"] == "Qwen2ForCausalLM"
