"""One engine for a synthetic scheme's acceptance vectors (protocol.swap_synthetic_acceptance, ADR 0039).

Planning: which cells share an engine, in which order, and what stays unchanged (ids, paths, the run
order). The swap inside vLLM's worker: ``swap_synthetic_rates`` on a stand-in for the worker's
attribute layout (model_runner.rejection_sampler.synthetic_conditional_rates, a real torch tensor),
because synthetic acceptance does not run on a CPU build; and through a real CPU vLLM engine that was
not started with synthetic acceptance, the runner's failure path for a swap the engine cannot do. That engine is
conftest's ``draft_group_run``, whose first two cells are a seed replicate's warm-up test's, here too: this file holds
both of the fixture's readers, apart from the demo's (ADR 0245)."""

from __future__ import annotations

import re
import types

import pytest

from specjoule import cells, config, records
from specjoule.engines import EngineError, proc
from specjoule.engines.vllm import swap_synthetic_rates

REPO = config.REPO_ROOT


def _table(name: str, swap: bool, **changes) -> cells.CellTable:
    raw = config.read_yaml(REPO / "config" / name)
    raw["protocol"] = {**raw["protocol"], "share_engines": True, "swap_synthetic_acceptance": swap}
    raw.update(changes)
    return cells.build(config.validate(raw))


def test_swap_needs_share_engines():
    raw = config.read_yaml(REPO / "config/h200-validation-a.yaml")
    raw["protocol"] = {**raw["protocol"], "share_engines": False, "swap_synthetic_acceptance": True}
    with pytest.raises(config.ConfigError) as info:
        config.validate(raw)
    assert "protocol.swap_synthetic_acceptance" in str(info.value) and "share_engines" in str(info.value)


def test_a_schemes_vectors_share_one_engine_and_keep_ids_paths_and_run_order():
    off, on = _table("h200-validation-a.yaml", False), _table("h200-validation-a.yaml", True)
    assert {c.record_path: c.cell_id for c in off} == {c.record_path: c.cell_id for c in on}
    assert {k: [c.name for c in v] for k, v in off.campaigns.items()} == \
           {k: [c.name for c in v] for k, v in on.campaigns.items()}  # one engine: the vector order is unchanged
    groups = list(on.engine_groups().values())
    assert [g.phase for g in groups] == ["opening_baseline", "point", "closing_baseline"]
    assert on.engine_starts() == 3 < off.engine_starts() == 8
    assert "synthetic acceptance swapped in place" in on.summary()
    # fewer starts, same windows: a larger estimated share of the device time inside them
    assert on.estimated_window_s() == off.estimated_window_s() == 16 * 20
    share = lambda t: t.estimated_window_s() / t.estimated_gpu_s()  # noqa: E731
    assert share(on) > share(off)
    assert f"≈ {100 * share(on):.0f} % of it inside energy windows" in on.summary()
    draft = groups[1]
    # the family's shuffled vector order, batch sizes ascending inside each vector
    order = [c.name for c in off.campaigns["vllm-qwen3b-closed-b1-random-s0-cg1"] if c.role == cells.ROLE_POINT]
    assert [(c.name, c.batch_size) for c in draft.cells] == [(n, b) for n in order for b in (1, 32)]
    assert len({c.acceptance_rates for c in draft.cells}) == 6


def test_swapped_arms_keep_their_own_vectors_order_and_unswappable_cells_keep_their_engines():
    raw = config.read_yaml(REPO / "config/h200-validation.yaml")
    off, on = _table("h200-validation.yaml", False), _table("h200-validation.yaml", True)
    campaign = next(iter(off.campaigns))
    points_off = [c for c in off.campaigns[campaign] if c.role == cells.ROLE_POINT]
    points_on = [c for c in on.campaigns[campaign] if c.role == cells.ROLE_POINT]
    for scheme in {c.scheme for c in points_off}:
        # each arm's vectors run in the same relative order as without the swap ...
        assert [c.name for c in points_on if c.scheme == scheme] == [c.name for c in points_off if c.scheme == scheme]
        # ... on one engine per arm
        assert len({c.engine_key for c in points_on if c.scheme == scheme}) == 1
    # and each arm's vectors are contiguous: one engine start per arm
    schemes_in_order = [c.scheme for c in points_on]
    assert sum(1 for a, b in zip(schemes_in_order, schemes_in_order[1:]) if a != b) == len(set(schemes_in_order)) - 1
    assert len([g for g in on.engine_groups().values() if g.phase == "point"]) == len({c.scheme for c in points_on})
    # open loop goes through a server, where the rates cannot be swapped: one engine per vector stays
    ol = _table("h200-openloop.yaml", True)
    assert len({c.engine_key for c in ol if c.role == cells.ROLE_POINT}) == 2
    assert raw["schemes"]  # the shipped config was read


def _worker(rates: list[float], k: int = 3):
    """A stand-in with the attribute layout of vLLM's GPU worker (model_runner.rejection_sampler), holding
    a real tensor as vLLM builds it."""
    import torch  # here, not at the top: every worker collects this file, one runs this (1.5 s import)
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

    tensor = torch.tensor(unconditional_to_conditional_rates(rates), dtype=torch.float32)
    sampler = types.SimpleNamespace(synthetic_conditional_rates=tensor)
    spec = types.SimpleNamespace(synthetic_acceptance_rates=list(rates), num_speculative_tokens=k)
    return types.SimpleNamespace(model_runner=types.SimpleNamespace(rejection_sampler=sampler),
                                 vllm_config=types.SimpleNamespace(speculative_config=spec)), tensor


def test_swap_writes_conditional_rates_into_the_same_tensor():
    worker, tensor = _worker([0.9, 0.6, 0.3])
    ptr = tensor.data_ptr()
    out = swap_synthetic_rates(worker, [0.5, 0.25, 0.125])
    assert out == pytest.approx([0.5, 0.5, 0.5]) and tensor.tolist() == pytest.approx([0.5, 0.5, 0.5])
    assert tensor.data_ptr() == ptr  # in place: a kernel or CUDA graph holding the tensor sees it
    assert worker.vllm_config.speculative_config.synthetic_acceptance_rates == [0.5, 0.25, 0.125]
    with pytest.raises(RuntimeError, match="4 rates for an engine built with k = 3"):
        swap_synthetic_rates(worker, [0.5, 0.4, 0.3, 0.2])
    worker.model_runner.rejection_sampler.synthetic_conditional_rates = None
    with pytest.raises(RuntimeError, match="not started with synthetic acceptance"):
        swap_synthetic_rates(worker, [0.5, 0.25, 0.125])


@pytest.mark.engine
@pytest.mark.engine_reader
def test_a_swap_the_real_engine_cannot_do_fails_that_cell_only(draft_group_run):
    """Real CPU vLLM, draft_model without synthetic acceptance (GPU-only): the cells before the swap are measured
    and written; the swap before the next cell reaches the worker's rejection sampler through collective_rpc,
    finds no synthetic rates, and fails with that reason; nothing is written for it and no process stays. The engine
    is conftest's ``draft_group_run`` (its first two cells are the seed-replicate warm-up test's, below)."""
    run = draft_group_run
    assert isinstance(run["error"], EngineError), run["error"]
    assert re.search("not started with synthetic acceptance", str(run["error"])), run["error"]
    *measured, swapped = run["jobs"]
    assert swapped.cell is run["swapped"] and swapped.cell.acceptance_rates != measured[0].cell.acceptance_rates
    for job in measured:
        assert records.read_records([job.record_path]).num_rows == 1, job.record_path
    assert not swapped.record_path.exists() and not swapped.timeline_path.exists()
    (pg,) = {int(m) for m in re.findall(r"pid (\d+) \(own process group\)", run["log"].read_text())}
    assert proc.group_members(pg) == []


@pytest.mark.engine
@pytest.mark.engine_reader
def test_a_seed_replicate_on_a_shared_engine_skips_its_warm_up(draft_group_run):
    """ADR 0188 on a real engine: the second seed of one configuration follows the first's window on the same
    engine and runs no warm-up; the record says so. ADR 0189: the engine process gets the cache root, and the CPU
    engine (eager, nothing compiled) claims no compile-cache state. The engine is conftest's ``draft_group_run``,
    whose third cell (a failed acceptance swap, the test above) comes after these two are written."""
    run = draft_group_run
    assert [c.seed for c in run["seed_cells"]] == [0, 1]
    first, second = (records.read_records([j.record_path]).to_pylist()[0] for j in run["jobs"][:2])
    assert first["warmup_skipped"] is False and first["warmup_s"] >= 1
    assert second["warmup_skipped"] is True and second["warmup_s"] == 0
    assert first["engine_instance"] == second["engine_instance"]
    assert run["log"].read_text().count("warm-up: skipped") == 1
    assert first["compile_cache_warm"] is None and second["compile_cache_warm"] is None
    cache = run["cache"]
    assert cache.is_dir() and any(cache.iterdir())  # vLLM keeps its own files under the root it was given


@pytest.mark.parametrize("rates", [[0.9, 0.6, 0.3], [0.0, 0.0, 0.0], [1.0, 1.0, 0.5], [0.5, 0.0, 0.0]])
def test_our_conditional_rates_are_vllms(rates):
    """The read-back check after a swap compares with specjoule.acceptance.conditional_rates: it must be the
    conversion the installed vLLM applies."""
    from vllm.v1.spec_decode.utils import unconditional_to_conditional_rates

    from specjoule import acceptance

    assert acceptance.conditional_rates(rates) == pytest.approx(unconditional_to_conditional_rates(rates))
