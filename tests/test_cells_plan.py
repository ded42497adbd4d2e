"""Growing a grid plans only the new cells (README: "adding a model pair, a batch size, a corpus or a seed
plans only the new cells"), in process: the cell table itself and the engine-sharing planner that decides
what a group job re-measures. tests/test_planning.py shows the same through Snakemake's own dry run."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specjoule import cells, config, engine_jobs, records

REPO = Path(__file__).resolve().parents[1]


def demo_raw(share: bool) -> dict:
    raw = yaml.safe_load((REPO / "config/config.yaml").read_text())
    raw["batch_sizes"] = [2, 4]
    raw["protocol"]["share_engines"] = share
    return raw


def _plan(raw: dict) -> dict[str, tuple]:
    table = cells.build(config.validate(raw))
    return {c.record_path: (c.cell_id, c.campaign_id, c.name, c.run_order_index, c.engine_key, c.family_id)
            for c in table}


GROWTH = {
    "seed": lambda r: r["seeds"].append(7),
    "batch size": lambda r: r["batch_sizes"].append(8),
    "corpus": lambda r: r["corpora"].update(rand={"source": "random"}),
    "model pair": lambda r: r["models"].update(tiny2=copy.deepcopy(r["models"]["tiny"])),
}


@pytest.mark.parametrize("share", [False, True], ids=["one-engine-per-cell", "shared-engines"])
@pytest.mark.parametrize("what", list(GROWTH))
def test_growing_the_grid_keeps_every_planned_cell_as_it_was(what, share):
    raw = demo_raw(share)
    before = _plan(raw)
    grown_raw = copy.deepcopy(raw)
    GROWTH[what](grown_raw)
    grown = _plan(grown_raw)
    assert {p: grown.get(p) for p in before} == before  # same id, campaign, name, order, engine and family
    new = set(grown) - set(before)
    assert new and len(grown) == len(before) + len(new)
    if what == "seed":  # exactly the campaigns of the new seed, every arm of each
        assert {v[1] for p, v in grown.items() if p in new} == {
            f"vllm-tiny-closed-b{b}-code-s7-cg0" for b in (2, 4)}
        assert len(new) == len(before)  # one seed more than the one there was


def test_under_engine_sharing_a_new_seed_is_all_that_is_pending(tmp_path, monkeypatch):
    """The group planner (engine_jobs.plan_jobs, ADR 0017, 0140) reads what is on disk and writes nothing: with the
    old grid measured, the grown grid's pending records are exactly the new seed's."""
    monkeypatch.chdir(tmp_path)
    raw = demo_raw(share=True)
    old = cells.build(config.validate(raw))
    for c in old:
        records.write_record({**c.identity(), "version_param": 3}, c.record_path)
    assert engine_jobs.plan_jobs(old, 3).pending == set()  # everything measured under this version
    grown_raw = copy.deepcopy(raw)
    grown_raw["seeds"].append(7)
    grown = cells.build(config.validate(grown_raw))
    new = {c.record_path for c in grown} - {c.record_path for c in old}
    assert engine_jobs.plan_jobs(grown, 3).pending == new and len(new) == len(old)
    assert not Path(cells.STAMPS_DIR).exists(), "planning writes no stamp (ADR 0140)"
    # A version bump re-plans everything; a record holding another id is measured again, and so is what
    # follows it in its campaign (the campaign's order holds for what is re-measured).
    assert engine_jobs.plan_jobs(grown, 4).pending == {c.record_path for c in grown}
    first = old.campaigns[next(iter(old.campaigns))]
    Path(first[1].record_path).unlink()
    records.write_record({**first[1].identity(), "cell_id": "0" * 12, "version_param": 3}, first[1].record_path)
    assert engine_jobs.plan_jobs(grown, 3).pending == new | {c.record_path for c in first[1:]}


def test_pending_trusts_neither_a_stale_stamp_nor_an_unreadable_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = cells.build(config.validate(demo_raw(share=True)))
    for c in table:
        records.write_record({**c.identity(), "version_param": 3}, c.record_path)
    camp_a, camp_b = list(table.campaigns.values())[:2]
    # A stamp of another version: a group job measured this cell under version 2, so the record that says 3 was
    # not written by the job that stamps it; measure again, and the rest of the campaign after it.
    stale = Path(camp_a[2].stamp_path(2))
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.touch()
    Path(camp_b[1].record_path).write_bytes(b"PAR1 cut short")  # unreadable: measure again
    assert engine_jobs.plan_jobs(table, 3).pending == {c.record_path for c in camp_a[2:]} | {c.record_path for c in camp_b[1:]}


def test_replicate_suffixes_and_hash_input():
    assert cells.replicate_suffix(0, "w") == "" and cells.replicate_suffix(2, "w") == "w2"
    assert cells.replicate_suffix(1, "r") == "r1"
    # The hash input is canonical JSON: keys sorted, no spaces, anything else as its text.
    assert cells._blob({"b": 1, "a": [Path("m"), None]}) == '{"a":["m",null],"b":1}'


def test_a_cells_record_identity_is_its_config_written_out():
    """Every identity column a record carries, for one synthetic-acceptance point of an open-loop workload,
    against the config it came from (values written here by hand, not read back from the cell)."""
    raw = demo_raw(share=False)
    raw["schemes"]["syn"] = {"method": "draft_model", "k": 3, "synthetic": True, "acceptance": ["L2"]}
    raw["acceptance"] = {"L2": {"minvar": 2.5}}
    raw["workloads"] = {"open": {"kind": "open_loop", "prompt_len": 16, "output_len": 24, "rate": 3.5,
                                 "window_s": 6, "warmup_s": 1, "cooldown_s": 1}}
    raw["batch_sizes"] = [2]
    raw["device"] = "cuda"  # synthetic acceptance is GPU-only in vLLM
    table = cells.build(config.validate(raw))
    cell = next(c for c in table if c.name == "syn--L2")
    ident = cell.identity()
    assert {k: v for k, v in ident.items() if k not in ("cell_id", "run_order_index")} == {
        "campaign_id": "vllm-tiny-open-b2-code-s0-cg0", "cell_name": "syn--L2", "role": "point", "engine": "vllm",
        "model_pair": "tiny", "target_model": "config/models/tiny-target", "draft_model": "config/models/tiny-draft",
        "scheme": "syn", "method": "draft_model", "k": 3, "synthetic": True, "acceptance_name": "L2",
        "acceptance_kind": "minvar", "acceptance_rates": [1.0, 0.5, 0.0], "configured_L": 2.5, "batch_size": 2,
        "corpus": "code", "seed": 0, "cuda_graphs": False, "workload": "open", "workload_kind": "open_loop",
        "prompt_len": 16, "output_len": 24, "request_rate": 3.5, "device": "cuda", "prefix_caching": False,
        "run_order_seed": 20261130, "window_index": 0, "engine_replicate": 0,
        "concurrency": None, "tensor_parallel_size": 1,  # an open loop has a rate, not a fixed concurrency
    }
    assert ident["cell_id"] == cell.cell_id and len(cell.cell_id) == 12
    members = table.campaigns[cell.campaign_id]
    assert ident["run_order_index"] == members.index(cell) and members[0].name == "baseline--open"
    base = members[0].identity()
    assert (base["draft_model"], base["acceptance_rates"], base["configured_L"], base["k"]) == (
        "config/models/tiny-draft", None, None, None)
    assert base["synthetic"] is False and base["role"] == "opening_baseline" and members[-1].role == "closing_baseline"
    # Paths are the campaign's folder and the cell's name.
    assert cell.record_path == "results/cells/vllm-tiny-open-b2-code-s0-cg0/syn--L2.parquet"
    assert cell.timeline_path == "results/timelines/vllm-tiny-open-b2-code-s0-cg0/syn--L2.parquet"
    assert cell.log_path == "results/logs/cells/vllm-tiny-open-b2-code-s0-cg0/syn--L2.log"
    assert table.get(cell.record_path) is cell and table.by_wildcards(cell.campaign_id, "syn--L2") is cell
    assert table.opening(cell.campaign_id) is members[0]
    assert [c.name for c in table.points(cell.campaign_id)] == [c.name for c in members[1:-1]]


def test_a_synthetic_scheme_without_a_list_runs_every_acceptance_vector():
    raw = demo_raw(share=False)
    raw["device"] = "cuda"
    raw["acceptance"] = {"L2": {"minvar": 2.5}, "G3": {"geometric": 3.0}, "R": {"rates": [0.9, 0.5, 0.1]}}
    raw["schemes"]["syn"] = {"method": "draft_model", "k": 3, "synthetic": True}
    raw["schemes"]["one"] = {"method": "draft_model", "k": 3, "synthetic": True, "acceptance": ["R"]}
    table = cells.build(config.validate(raw))
    points = {c.name: c for c in table.points(next(iter(table.campaigns)))}
    assert {n for n in points if n.startswith("syn--")} == {"syn--L2", "syn--G3", "syn--R"}
    assert {n for n in points if n.startswith("one")} == {"one--R"}
    assert points["syn--R"].acceptance_rates == (0.9, 0.5, 0.1) and points["syn--R"].configured_L == 2.5
    assert points["syn--G3"].acceptance_kind == "geometric" and points["syn--G3"].configured_L == pytest.approx(3.0)


def test_identity_names_a_schemes_own_drafter_and_a_closed_loops_concurrency():
    # Read by hand from the shipped configs: the EAGLE3 scheme of the Qwen3-8B config names its drafter; the
    # matched open-loop config has a closed loop at concurrency 3.
    schemes = cells.build(config.load(REPO / "validation/h200-2026-12/config/h200-schemes-qwen3-8b.yaml"))
    eagle = next(c for c in schemes if c.method == "eagle3")
    assert eagle.identity()["draft_model"] == "config/models/qwen3-8b-eagle3"
    base = next(c for c in schemes if c.method == "baseline")
    assert base.identity()["draft_model"] == (base.spec.get("draft") or {}).get("model")
    loops = cells.build(config.load(REPO / "config/h200-openloop-matched.yaml"))
    assert {c.identity()["concurrency"] for c in loops if c.workload == "conc3"} == {3}
    assert {c.identity()["concurrency"] for c in loops if c.workload == "poisson3"} == {None}


def test_a_corpus_of_its_own_pool_size_is_measured_and_identified_with_it():
    raw = demo_raw(share=False)
    raw["corpora"]["small"] = {"source": "random", "pool_size": 8}
    table = cells.build(config.validate(raw))
    by_corpus = {c.corpus: c for c in table if c.name == "ngram" and c.batch_size == 2}
    assert by_corpus["small"].spec["pool_size"] == 8
    assert by_corpus["code"].spec["pool_size"] == 96  # the config's default pool size
    plain = demo_raw(share=False)
    plain["corpora"]["small"] = {"source": "random"}
    other = {c.record_path: c.cell_id for c in cells.build(config.validate(plain))}
    assert other[by_corpus["small"].record_path] != by_corpus["small"].cell_id  # the pool size is in the identity
    assert other[by_corpus["code"].record_path] == by_corpus["code"].cell_id
