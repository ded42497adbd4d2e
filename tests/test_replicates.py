"""Replicate axes in the cell table (issue 17, ADR 0064): windows on one warm engine, engine replicates.

Index 0 of each axis keeps the ids of a config without the axis; window w >= 1 and replicate r >= 1 are cells
of their own, named and ordered so that replicates of one cell are interleaved with the other cells of its engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from specjoule import cells, config

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "validation/h200-2026-12/config/h200-engines-one-gpu.yaml"


def _table(**overrides) -> cells.CellTable:
    raw = config.read_yaml(SHIPPED)
    raw.update(overrides)
    return cells.build(config.validate(raw))


def test_first_window_and_replicate_keep_the_ids_of_a_config_without_them():
    plain = {c.record_path: c.cell_id for c in _table()}
    more = {c.record_path: c.cell_id for c in _table(windows=3, engine_replicates=2)}
    assert plain and all(more[p] == i for p, i in plain.items())
    assert len(more) == 3 * 2 * len(plain)
    assert len(set(more.values())) == len(more), "every window and replicate has an id of its own"


def test_windows_are_named_and_indexed():
    table = _table(windows=3)
    vllm_b1 = table.campaigns["vllm-qwen3b-closed-b1-random-s0-cg1"]
    names = [c.name for c in vllm_b1]
    assert names[:3] == ["baseline--open", "baseline--open--w1", "baseline--open--w2"]
    assert names[-3:] == ["baseline--close", "baseline--close--w1", "baseline--close--w2"]
    for c in vllm_b1:
        suffix = c.name.rsplit("--w", 1)
        assert c.window_index == (int(suffix[1]) if len(suffix) == 2 and suffix[1].isdigit() else 0)
        assert c.identity()["window_index"] == c.window_index
    assert [c.run_order_index for c in vllm_b1] == list(range(len(vllm_b1)))


def test_swapped_vectors_interleave_their_windows_on_one_engine():
    """One vLLM engine serves mv1, mv3, mv6: every vector's window 0 before any window 1."""
    table = _table(windows=2)
    groups = [g for g in table.engine_groups().values() if g.phase == cells.ROLE_POINT and g.cells[0].engine == "vllm"]
    assert len(groups) == 1
    seq = [(c.window_index, c.acceptance_name, c.batch_size) for c in groups[0].cells]
    windows = [w for w, _, _ in seq]
    assert windows == sorted(windows), "window-major: no window 1 before every window 0"
    first = [(a, b) for w, a, b in seq if w == 0]
    second = [(a, b) for w, a, b in seq if w == 1]
    assert first == second and len(first) == 3 * 2, "same vector order in every window, batch sizes inside"


def test_baseline_windows_share_their_phase_engine_and_alternate_batch_sizes():
    table = _table(windows=2)
    opening = [g for g in table.engine_groups().values() if g.phase == cells.ROLE_OPENING and g.cells[0].engine == "vllm"]
    assert len(opening) == 1
    assert [(c.window_index, c.batch_size) for c in opening[0].cells] == [(0, 1), (0, 32), (1, 1), (1, 32)]
    assert len({c.engine_key for c in opening[0].cells}) == 1


def test_engine_replicates_are_campaigns_and_families_of_their_own():
    table = _table(engine_replicates=2)
    assert "vllm-qwen3b-closed-b1-random-s0-cg1-r1" in table.campaigns
    r1 = table.campaigns["vllm-qwen3b-closed-b1-random-s0-cg1-r1"]
    assert {c.family_id for c in r1} == {"vllm-qwen3b-closed-cg1-r1"}
    assert {c.engine_replicate for c in r1} == {1}
    assert [c.role for c in r1][0] == cells.ROLE_OPENING and [c.role for c in r1][-1] == cells.ROLE_CLOSING
    groups_r0 = [g for g in table.engine_groups().values() if g.family_id == "vllm-qwen3b-closed-cg1"]
    groups_r1 = [g for g in table.engine_groups().values() if g.family_id == "vllm-qwen3b-closed-cg1-r1"]
    assert len(groups_r0) == len(groups_r1) == 3
    assert not {c.record_path for g in groups_r0 for c in g.cells} & {c.record_path for g in groups_r1 for c in g.cells}
    # The replicate's point order is shuffled under its own seed salt, like any other family.
    assert table.engine_starts() == 2 * _table().engine_starts()


def test_windows_need_shared_engines():
    raw = config.read_yaml(SHIPPED)
    raw["windows"] = 2
    raw["protocol"] = {**raw["protocol"], "share_engines": False, "swap_synthetic_acceptance": False}
    with pytest.raises(config.ConfigError, match=r"config error at windows = 2: .*share_engines"):
        config.validate(raw)


@pytest.mark.parametrize("key,value", [("windows", 0), ("engine_replicates", 0), ("windows", 1.5)])
def test_replicate_counts_must_be_positive_integers(key, value):
    raw = config.read_yaml(SHIPPED)
    raw[key] = value
    with pytest.raises(config.ConfigError, match=rf"config error at {key} = {value!r}"):
        config.validate(raw)
