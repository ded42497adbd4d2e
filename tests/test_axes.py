"""The axis declaration (specjoule.axes, ADR 0160) is true to the planner and the record, every key list of the
analysis and the report is the one it derives, and a newly declared axis reaches those lists by itself."""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from specjoule import axes, cells, config, records
from specjoule.cellspec import CellSpec

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(json.loads((REPO / "tests" / "data" / "golden_cells.json").read_text()))

# Every grid axis takes two values here (two engines, pairs, workloads, corpora, graph modes, batch sizes, schemes
# with two vectors, seeds, windows and engine replicates): each axis can be seen to vary, or not, where it should.
RICH = {
    "device": "cuda", "engines": ["vllm", "sglang"], "paper_grade": False,
    "models": {"a": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                     "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}},
               "b": {"target": {"model": "config/models/qwen2.5-3b", "load_format": "dummy"},
                     "draft": {"model": "config/models/qwen2.5-0.5b", "load_format": "dummy"}, "max_model_len": 2048}},
    "schemes": {"baseline": {"method": "baseline"},
                "draft": {"method": "draft_model", "k": 3, "synthetic": True, "acceptance": ["mv2", "mv3"]},
                "ngram": {"method": "ngram", "k": 3}},
    "acceptance": {"mv2": {"minvar": 2.0}, "mv3": {"minvar": 3.0}},
    "batch_sizes": [1, 4],
    "corpora": {"r": {"source": "random"}, "h": {"source": "builtin", "name": "humaneval"}},
    "seeds": [0, 1], "windows": 2, "engine_replicates": 2, "protocol": {"share_engines": True},
    "cuda_graphs": [True, False],
    "workloads": {"short": {"kind": "closed_batch", "output_len": 16}, "long": {"kind": "closed_batch", "output_len": 32}},
}


@pytest.fixture(scope="module")
def rich() -> list[cells.Cell]:
    return list(cells.build(config.validate(RICH)))


def _declared_columns() -> set[str]:
    return {c for a in axes.AXES for c in a.columns}


# -- (b) the declaration is true to the record, the config and the planner ------------------------------------------


@pytest.mark.parametrize("path", SHIPPED)
def test_every_identity_column_of_a_record_is_declared(path):
    """A record's identity columns are the plan's bookkeeping and the declared axes' columns, nothing else."""
    for cell in cells.build(config.load(REPO / path)):
        ident = set(cell.identity())
        assert ident - set(axes.PLAN_COLUMNS) == _declared_columns(), path


def test_axis_columns_are_record_columns_and_config_keys_are_config_keys():
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())["properties"]
    for a in axes.AXES:
        assert set(a.columns) <= set(records.RECORD_COLUMNS), a.name
        assert a.config_key in schema, a.name
    names = [c for a in axes.AXES for c in a.columns]
    assert len(names) == len(set(names)), "a column belongs to one axis"


def test_scope_is_what_the_planner_does(rich):
    """Campaign-scope axes are constant inside a campaign and tell campaigns apart; arm-scope axes vary inside one."""
    by_campaign: dict[str, list[dict]] = defaultdict(list)
    for c in rich:
        by_campaign[c.campaign_id].append(c.identity())
    campaign_axes = [a for a in axes.grid() if a.scope == "campaign"]
    for cid, members in by_campaign.items():
        for a in campaign_axes:
            assert len({tuple(m[col] is None or json.dumps(m[col]) for col in a.columns) for m in members}) == 1, (cid, a)
    campaigns_by_values = defaultdict(set)
    for c in rich:
        campaigns_by_values[tuple(getattr(c, a.name) for a in campaign_axes)].add(c.campaign_id)
    assert all(len(ids) == 1 for ids in campaigns_by_values.values())
    assert len(campaigns_by_values) == len(by_campaign) == 2 ** len(campaign_axes)
    for a in (a for a in axes.grid() if a.scope == "arm"):
        assert any(len({m[a.name] for m in members}) > 1 for members in by_campaign.values()), a.name


def test_shapes_engine_is_what_the_engine_key_does(rich):
    """Cells on one engine key agree on every engine-shaping axis; every other grid axis varies on some key."""
    by_key: dict[str, list[dict]] = defaultdict(list)
    for c in rich:
        by_key[c.engine_key].append(c.identity())
    for a in axes.AXES:
        n_values = [len({json.dumps([m[col] for col in a.columns]) for m in group}) for group in by_key.values()]
        if a.shapes_engine:
            assert max(n_values) == 1, a.name
        elif a.scope != "setting":
            assert max(n_values) > 1, a.name


def test_configuration_keys_tell_configurations_apart_up_to_replicates(rich):
    """Cells equal on CONFIGURATION_KEYS (and the point's name less its window) differ only in replicate axes,
    and each configuration holds every replicate: seeds × windows × engine replicates."""
    replicate = {c for a in axes.grid() if a.replicate for c in a.columns}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for c in rich:
        if c.role != axes.ROLE_POINT:
            continue
        ident = c.identity()
        groups[tuple(json.dumps(ident[k]) for k in axes.CONFIGURATION_KEYS) + (c.name.split("--w")[0],)].append(ident)
    n_replicates = len(RICH["seeds"]) * RICH["windows"] * RICH["engine_replicates"]
    for members in groups.values():
        assert len(members) == n_replicates
        differing = {k for k in members[0] if len({json.dumps(m[k]) for m in members}) > 1}
        assert differing - set(axes.PLAN_COLUMNS) <= replicate


def test_pair_keys_name_exactly_the_campaigns(rich):
    groups = {tuple(json.dumps(c.identity().get(k, c.campaign_id)) for k in axes.PAIR_KEYS) for c in rich}
    assert len(groups) == len({c.campaign_id for c in rich})


def test_series_keys_leave_out_only_the_acceptance_vector(rich):
    series = defaultdict(set)
    for c in rich:
        if c.role == axes.ROLE_POINT:
            series[tuple(json.dumps(c.identity()[k]) for k in axes.SERIES_KEYS)].add(c.acceptance_name)
    assert any(len(v) > 1 for v in series.values())
    assert set(axes.CONFIGURATION_KEYS) - set(axes.SERIES_KEYS) == set(axes.ACCEPTANCE.key_columns)


def test_the_spec_dict_round_trips_through_the_typed_parts(rich):
    for c in rich[:200]:
        assert CellSpec.from_dict(c.spec) == c.setup
        assert CellSpec.from_dict(c.spec).as_dict() == c.spec


# -- (b) every module's key list is the declaration's ---------------------------------------------------------------


def test_module_key_lists_are_the_declarations():
    from specjoule.analysis import aggregate, checks, derive, matched, spread
    from specjoule.report import figures, parallel, schemes
    from specjoule.report import spread as report_spread

    assert aggregate.PAIR_KEYS == axes.PAIR_KEYS
    assert spread.SUMMARY_KEYS == (*axes.CONFIGURATION_KEYS, "cell_name")
    assert derive.CURVE_COLUMNS[:3 + len(axes.CURVE_KEYS)] == ("campaign_id", "cell_id", "cell_name", *axes.CURVE_KEYS)
    assert checks.SERIES_KEYS == axes.SERIES_KEYS
    assert report_spread.CONFIG_KEYS == axes.CONFIGURATION_KEYS
    assert tuple(figures.CONFIG_KEYS) == axes.READING_KEYS
    assert axes.LABELS.items() <= figures.DIM_LABELS.items()
    assert set(figures.ENGINE_MATCH_KEYS) == {"gpu_model", *axes.SLICE_KEYS, "seed", *axes.ARM_KEYS} - {"engine"}
    assert set(schemes.GROUP_KEYS) == {"family", *axes.SLICE_KEYS}
    assert set(parallel.ARM_KEYS) == {*axes.SLICE_KEYS, *axes.ARM_NAMES} - {"model_pair"} | {"target_model"}
    assert set(matched.SLICE_KEYS) == set(axes.SLICE_KEYS) - {"workload", "batch_size"} | {
        "workload_kind", "prompt_len", "output_len"}
    assert (aggregate.ROLE_OPENING, aggregate.ROLE_POINT, aggregate.ROLE_CLOSING) == axes.PHASES == cells.PHASES


def test_derived_lists_follow_their_orders():
    """Record-ordered lists follow the record schema; reading-ordered ones the declaration."""
    position = {c: i for i, c in enumerate(records.RECORD_COLUMNS)}
    for keys in (axes.CONFIGURATION_KEYS, axes.CURVE_KEYS, axes.SERIES_KEYS):
        assert [position[k] for k in keys] == sorted(position[k] for k in keys)
    declared = [a.name for a in axes.AXES]
    assert [declared.index(k) for k in axes.SLICE_KEYS] == sorted(declared.index(k) for k in axes.SLICE_KEYS)


# Column lists that name axes among other columns on purpose (not grouping keys): each says why it is typed out.
NOT_KEY_LISTS = {
    "specjoule/analysis/evidence.py": "MEASURED_KEY: what a measurement is across runs; config names left out",
    "specjoule/analysis/roofline.py": "columns a roofline row carries from its record",
    "specjoule/analysis/rounds.py": "profile table columns (a profile is not a grid cell)",
    "specjoule/report/render.py": "the engine-match table's shown and renamed columns",
    "specjoule/cells.py": "plan.tsv's columns: a file format",
}


def test_no_module_retypes_a_key_list():
    """A list of four or more axis names typed out in the library is a key list that should derive from the
    declaration (adding an axis would miss it); the few column lists that are not are named above."""
    names = {a.name for a in axes.grid()}
    found = []
    for path in sorted((REPO / "specjoule").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel == "specjoule/axes.py" or rel in NOT_KEY_LISTS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.List, ast.Tuple)):
                hit = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
                if len(hit) >= 4:
                    found.append(f"{rel}:{node.lineno} {sorted(hit)}")
    assert not found, found


# -- (c) declaring an axis reaches every derived list ---------------------------------------------------------------

NEW_COLUMN = "kv_cache_dtype"  # a record column appended with the axis (house rule: new columns are appended)
RECORD_WITH_NEW = (*records.RECORD_COLUMNS, NEW_COLUMN)


def test_a_new_campaign_axis_reaches_pairing_summary_curve_series_and_slices():
    new = axes.Axis(NEW_COLUMN, "kv_cache_dtypes", "campaign", "KV cache dtype", shapes_engine=True)
    before = axes.KeyLists.of(axes.AXES)
    after = axes.KeyLists.of((*axes.AXES, new), record_columns=RECORD_WITH_NEW)
    for field in ("pair", "configuration", "curve", "series", "slice", "reading", "same_engine_state"):
        old, got = getattr(before, field), getattr(after, field)
        assert NEW_COLUMN not in old and NEW_COLUMN in got, field
        assert tuple(k for k in got if k != NEW_COLUMN) == old, field  # nothing else moves
    assert NEW_COLUMN not in after.arm and after.labels[NEW_COLUMN] == "KV cache dtype"


def test_a_new_arm_axis_is_a_configuration_key_not_a_pairing_key():
    new = axes.Axis(NEW_COLUMN, "kv_cache_dtypes", "arm", "KV cache dtype", shapes_engine=True)
    after = axes.KeyLists.of((*axes.AXES, new), record_columns=RECORD_WITH_NEW)
    assert NEW_COLUMN in after.configuration and NEW_COLUMN in after.arm and NEW_COLUMN in after.arm_names
    assert NEW_COLUMN not in after.pair and NEW_COLUMN not in after.slice


def test_a_new_replicate_axis_pairs_but_is_pooled_over():
    new = axes.Axis(NEW_COLUMN, "kv_cache_dtypes", "campaign", "KV cache dtype", shapes_engine=False, replicate=True)
    after = axes.KeyLists.of((*axes.AXES, new), record_columns=RECORD_WITH_NEW)
    assert NEW_COLUMN in after.pair
    # A replicate repeats one configuration: a cell differing from the window before it only there needs no warm-up
    # (ADR 0188), so it is not part of the engine state compared.
    assert NEW_COLUMN not in after.same_engine_state
    assert NEW_COLUMN not in after.configuration and NEW_COLUMN not in after.slice and NEW_COLUMN not in after.curve


def test_an_axis_without_a_record_column_is_refused():
    new = axes.Axis(NEW_COLUMN, "kv_cache_dtypes", "campaign", "KV cache dtype", shapes_engine=True)
    with pytest.raises(KeyError, match=NEW_COLUMN):
        axes.KeyLists.of((*axes.AXES, new))


def test_baseline_cell_name_tells_every_baseline_from_every_point_of_the_shipped_configs():
    """Attempt markers carry a cell's name only; the coverage matrix tells a baseline by BASELINE_CELL_NAME. It must
    match every baseline cell the planner names (windows 2, closing baselines) and no point."""
    import re

    from specjoule import config as sj_config

    names: dict[str, set[str]] = defaultdict(set)
    for path in ("config/h200-draft-async.yaml", "config/h200-schemes-gdn-eagle3.yaml", "config/config.yaml"):
        for cell in cells.build(sj_config.load(Path(__file__).resolve().parent.parent / path)).cells:
            names[cell.role].add(cell.name)
    assert {r for r in axes.BASELINE_ROLES if names[r]} == set(axes.BASELINE_ROLES)
    assert any(n.endswith("--w1") for r in axes.BASELINE_ROLES for n in names[r])
    for role, found in names.items():
        for name in found:
            assert bool(re.search(axes.BASELINE_CELL_NAME, name)) == (role in axes.BASELINE_ROLES), (role, name)
