"""Every shipped config plans the same cells as when the golden file was written: same record paths, cell ids,
engine keys, run order, families and engine groups (issue 22: refactors and new axes change no identity).

The golden file is tests/data/golden_cells.json, written by tools/golden_cells.py. Regenerate it only for a
change of identity that is intended and said so in the commit (a new cell is fine: the test compares only the
cells the golden file names, and fails if one of them disappears or changes)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specjoule import cells, config

REPO = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((REPO / "tests" / "data" / "golden_cells.json").read_text())
GOLDEN_HASHES = json.loads((REPO / "tests" / "data" / "golden_config_hashes.json").read_text())


def _plan(cfg: dict) -> dict[str, list]:
    table = cells.build(cfg)
    groups = {c.record_path: g.group_id for g in table.engine_groups().values() for c in g.cells}
    return {c.record_path: [c.cell_id, c.engine_key, c.run_order_index, c.family_id, groups[c.record_path]]
            for c in table.cells}


@pytest.mark.parametrize("path", sorted(GOLDEN_HASHES))
def test_shipped_config_hash_is_stable(path):
    """A key added to the schema with a default must not change the hash of configs that ran before it
    (mark it ``hash_neutral: true``): committed records would otherwise all fail to match their config."""
    assert config.config_hash(config.load(REPO / path)) == GOLDEN_HASHES[path]


def test_hash_neutral_key_is_hashed_when_set():
    raw = config.read_yaml(REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml")
    assert config.config_hash(config.validate({**raw, "engine_replicates": 2})) != GOLDEN_HASHES["validation/h200-2026-12/config/h200-engines-one-gpu.yaml"]


def test_analysis_scope_is_never_hashed_and_plans_the_same_cells():
    """How the records are analysed is not what was measured (ADR 0216): measured scope keeps the hash the
    preregistration check compares, and every cell id and engine group."""
    path = "validation/h200-2026-12/session-2026-12-02e/spread/h200-spread.yaml"
    raw = config.read_yaml(REPO / path)
    measured = config.validate({**raw, "analysis_scope": "measured"})
    assert config.validate(raw)["analysis_scope"] == "planned"  # the default: today's behaviour
    assert config.config_hash(measured) == GOLDEN_HASHES["config/h200-spread.yaml"] == config.config_hash(config.load(REPO / path))
    assert _plan(measured) == _plan(config.load(REPO / path))
    with pytest.raises(config.ConfigError, match=r"analysis_scope = 'everything'"):
        config.validate({**raw, "analysis_scope": "everything"})


@pytest.mark.parametrize("path", sorted(GOLDEN))
def test_shipped_config_plans_its_golden_cells(path):
    assert (REPO / path).exists(), f"{path} moved or was removed: update the golden file's key, not its ids"
    got = _plan(config.load(REPO / path))
    want = GOLDEN[path]
    missing = sorted(set(want) - set(got))
    assert not missing, f"{path}: cells no longer planned: {missing[:3]}"
    changed = {p: (want[p], got[p]) for p in want if got[p] != want[p]}
    assert not changed, f"{path}: identity or order changed for {len(changed)} cell(s), e.g. {next(iter(changed.items()))}"


def _shuffled(obj, rng: random.Random):
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [_shuffled(v, rng) for v in obj]
    return obj


@pytest.mark.parametrize("path", ["config/config.yaml", "validation/h200-2026-12/config/h200-engines-one-gpu.yaml"])
def test_cell_ids_do_not_depend_on_key_order(path):
    raw = config.read_yaml(REPO / path)
    want = {p: v[0] for p, v in GOLDEN[path].items()}
    for trial in range(3):
        got = {c.record_path: c.cell_id for c in cells.build(config.validate(_shuffled(raw, random.Random(trial))))}
        assert {p: got.get(p) for p in want} == want
