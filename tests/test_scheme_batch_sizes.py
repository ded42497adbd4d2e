"""A scheme's own batch sizes (ADR 0180): the baseline sweeps the grid's batch sizes, speculative arms run at a
few. Planned cells, identities, engine groups, config errors, and the checks over crafted records of such a grid."""

from __future__ import annotations

import copy

import analysis_records as ar
import polars as pl
import pytest

from specjoule import cells, config
from specjoule.analysis import aggregate, checks
from specjoule.config import ConfigError


def sweep_config(syn_batches=(8,), ngram_batches=(8,), grid=(1, 2, 8)) -> dict:
    cfg = copy.deepcopy(ar.GPU_CONFIG)
    cfg["batch_sizes"] = list(grid)
    cfg["seeds"] = [0]
    cfg["workloads"] = {"closed": cfg["workloads"]["closed"]}
    cfg["protocol"] = {"share_engines": True, "swap_synthetic_acceptance": True}
    if syn_batches is not None:
        cfg["schemes"]["syn"]["batch_sizes"] = list(syn_batches)
    if ngram_batches is not None:
        cfg["schemes"]["ngram"]["batch_sizes"] = list(ngram_batches)
    return cfg


def names_by_batch(table: cells.CellTable) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for c in table.cells:
        out.setdefault(c.batch_size, []).append(c.name)
    return out


def test_batches_without_a_point_keep_only_their_opening_baseline():
    got = names_by_batch(ar.cell_table(sweep_config()))
    assert got[1] == ["baseline--open"] and got[2] == ["baseline--open"]
    assert got[8][0] == "baseline--open" and got[8][-1] == "baseline--close"
    assert sorted(got[8][1:-1]) == ["ngram", "syn--L2", "syn--L4"]


def test_a_scheme_left_out_of_a_batch_leaves_the_other_schemes_and_the_closing_baseline():
    got = names_by_batch(ar.cell_table(sweep_config(syn_batches=(8,), ngram_batches=None)))
    assert got[1] == ["baseline--open", "ngram", "baseline--close"]
    assert got[2] == ["baseline--open", "ngram", "baseline--close"]
    assert sorted(got[8]) == ["baseline--close", "baseline--open", "ngram", "syn--L2", "syn--L4"]


def test_identity_does_not_depend_on_the_subset_or_on_the_other_batch_sizes():
    """Widening a scheme's batch sizes (or the grid) later adds cells; the measured ones keep their ids."""
    narrow = {(c.campaign_id, c.name): c.cell_id for c in ar.cell_table(sweep_config())}
    plain = copy.deepcopy(ar.GPU_CONFIG)
    plain["batch_sizes"], plain["seeds"] = [8], [0]
    plain["workloads"] = {"closed": plain["workloads"]["closed"]}
    plain["protocol"] = {"share_engines": True, "swap_synthetic_acceptance": True}
    wide = {(c.campaign_id, c.name): c.cell_id for c in ar.cell_table(plain)}
    b8 = {key: cid for key, cid in narrow.items() if "-b8-" in key[0]}
    assert b8 and b8 == wide
    widened = {(c.campaign_id, c.name): c.cell_id for c in ar.cell_table(sweep_config(syn_batches=(1, 8)))}
    assert all(widened[key] == cid for key, cid in narrow.items())
    assert len(widened) > len(narrow)


def test_engine_groups_one_opening_engine_for_the_sweep_one_per_point_engine_one_closing():
    table = ar.cell_table(sweep_config())
    groups = sorted(table.engine_groups().values(), key=lambda g: g.index)
    assert groups[0].phase == cells.ROLE_OPENING and [c.batch_size for c in groups[0].cells] == [1, 2, 8]
    assert groups[-1].phase == cells.ROLE_CLOSING and [c.batch_size for c in groups[-1].cells] == [8]
    # syn's two vectors share one engine (swapped), ngram has its own: 2 point groups.
    assert [g.phase for g in groups[1:-1]] == [cells.ROLE_POINT] * 2
    assert table.engine_starts() == 4


def test_schemes_with_different_batch_sizes_order_every_campaign():
    """Campaigns of one family with different points (syn at 1, ngram at 8): each is ordered, each point once."""
    table = ar.cell_table(sweep_config(syn_batches=(1,), ngram_batches=(8,)))
    got = names_by_batch(table)
    assert got[1] == ["baseline--open", *got[1][1:3], "baseline--close"] and sorted(got[1][1:3]) == ["syn--L2", "syn--L4"]
    assert got[2] == ["baseline--open"]
    assert got[8] == ["baseline--open", "ngram", "baseline--close"]
    for members in table.campaigns.values():
        assert [c.run_order_index for c in members] == list(range(len(members)))


@pytest.mark.parametrize("mutate, key, value", [
    (lambda c: c["schemes"]["baseline"].update(batch_sizes=[8]), "schemes.baseline.batch_sizes", "[8]"),
    (lambda c: c["schemes"]["syn"].update(batch_sizes=[8, 16]), "schemes.syn.batch_sizes[1]", "16"),
    (lambda c: c["schemes"]["syn"].update(batch_sizes=[8, 8]), "schemes.syn.batch_sizes", "[8, 8]"),
    (lambda c: c["schemes"]["syn"].update(batch_sizes=[]), "schemes.syn.batch_sizes", "[]"),
])
def test_bad_scheme_batch_sizes_are_config_errors_naming_key_and_value(mutate, key, value):
    cfg = sweep_config()
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        config.validate(cfg)
    assert key in str(err.value) and value in str(err.value)


def test_the_checks_judge_a_sweep_grid_without_a_failure():
    """Crafted records of the sweep grid through the real aggregate and checks: a baseline-only batch size is
    not a failure of pairing or drift; its drift is 'not applicable' and says why."""
    cfg = sweep_config()
    recs = aggregate.aggregate_frame(ar.frame_campaigns(cfg))
    result = checks.run_checks(recs, checks.Thresholds.from_config({}), ar.CONFIG_HASH)
    assert not result.filter(pl.col("status") == checks.FAIL).height, result.filter(pl.col("status") == checks.FAIL)
    sweep_point = "vllm-p-closed-b2-code-s0-cg1"
    drift = result.filter((pl.col("check") == "baseline_drift") & (pl.col("campaign_id") == sweep_point)).row(0, named=True)
    assert drift["status"] == checks.NA and "baseline sweep point" in drift["detail"]
    bracketed = result.filter((pl.col("check") == "baseline_drift") & (pl.col("campaign_id") == ar.CLOSED)).row(0, named=True)
    assert bracketed["status"] == checks.PASS
