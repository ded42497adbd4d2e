"""The depth configs of issue 16 beyond the dense family (config/h200-schemes-depth.yaml): MoE and MLA (pre-registered
2026-12-04e), Gated-DeltaNet and sliding window (2026-12-04f). Each carries the dense design (three L and B in {1, 32},
one window) to its family unchanged but for the model pair, the engines that can run it and what the family forces
(a pinned block size, an engine's own shape), so their ratios compare with the dense family's at equal everything
else, and nothing in them is refused at plan time but what the engine cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specjoule import cells, config
from specjoule.engines import sglang as sg

REPO = Path(__file__).resolve().parents[1]
MOE = "config/h200-schemes-depth-moe.yaml"
MLA = "config/h200-schemes-depth-mla.yaml"
GDN = "config/h200-schemes-depth-gdn.yaml"
SW, SW_SGLANG = "config/h200-schemes-depth-sw.yaml", "config/h200-schemes-depth-sw-sglang.yaml"
DENSE = "config/h200-schemes-depth.yaml"
# What the dense design fixes and every depth config keeps as it is.
DESIGN_KEYS = ("batch_sizes", "corpora", "seeds", "cuda_graphs", "workloads", "meter", "checks", "report")


def _load(*paths: str) -> list[dict]:
    return [yaml.safe_load((REPO / p).read_text()) for p in paths]


def _assert_dense_design(cfg: dict, dense: dict, *more_keys: str) -> None:
    for key in (*DESIGN_KEYS, *more_keys):
        assert cfg[key] == dense[key], key


def test_moe_depth_differs_from_the_dense_depth_only_in_the_target_its_head_and_the_dflash_arm():
    moe, dense = _load(MOE, DENSE)
    _assert_dense_design(moe, dense, "engines", "engine_options", "paper_grade", "device")
    assert {k: v for k, v in moe["protocol"].items() if k not in ("run_order_seed", "engine_start_s")} == {
        k: v for k, v in dense["protocol"].items() if k not in ("run_order_seed", "engine_start_s")
    }
    assert moe["protocol"]["run_order_seed"] != dense["protocol"]["run_order_seed"]
    assert moe["schemes"]["eagle3"] == dense["schemes"]["eagle3"] and "dflash" not in moe["schemes"]
    (pair,) = moe["models"].values()
    assert pair["target"]["model"] == "config/models/qwen3-30b-a3b"
    assert pair["drafters"] == {"eagle3": "config/models/qwen3-30b-a3b-eagle3"}


@pytest.mark.parametrize(
    "path,engines", [(MOE, ("vllm", "sglang")), (MLA, ("sglang",)), (SW, ("vllm",)), (SW_SGLANG, ("sglang",))]
)
def test_eagle3_depth_plans_three_l_at_both_batch_sizes_on_its_engines_and_refuses_nothing(path, engines):
    _, table = config.plan(config.read_yaml(REPO / path), path)
    cells = table.cells
    assert len(cells) == 10 * len(engines) and not [c for c in cells if c.unsupported_reason]
    points = {(c.engine, c.batch_size, c.configured_L) for c in cells if c.role == "point"}
    assert points == {(e, b, L) for e in engines for b in (1, 32) for L in (1.0, 3.0, 4.0)}
    baselines = [c for c in cells if c.role != "point"]
    assert len(baselines) == 4 * len(engines)  # an opening and a closing baseline per engine and batch size


def test_mla_depth_is_the_dense_design_on_sglang_alone_because_vllm_cannot_feed_its_head():
    mla, dense = _load(MLA, DENSE)
    _assert_dense_design(mla, dense)
    assert mla["engines"] == ["sglang"] and mla["engine_options"] == {"sglang": dense["engine_options"]["sglang"]}
    assert mla["schemes"]["eagle3"] == dense["schemes"]["eagle3"]
    # the reason vLLM is left out is the plan's own: with vLLM in the engines, its EAGLE3 arms are refused
    with_vllm = {**mla, "engines": ["vllm", "sglang"], "engine_options": dense["engine_options"]}
    _, table = config.plan(with_vllm, "with-vllm")
    refused = {c.engine for c in table.cells if c.unsupported_reason and "SupportsEagle3" in c.unsupported_reason}
    assert refused == {"vllm"}


def test_gdn_depth_is_the_dense_design_on_the_hybrid_with_one_pinned_block_size():
    gdn, dense = _load(GDN, DENSE)
    _assert_dense_design(gdn, dense, "engines")
    assert gdn["schemes"] == dense["schemes"] and gdn["acceptance"] == dense["acceptance"]
    assert gdn["engine_options"]["sglang"] == dense["engine_options"]["sglang"]
    vllm = dict(gdn["engine_options"]["vllm"])
    # ADR 0217: the largest-k arm's block (DFlash, k 15), computed from the target's shape, for every arm
    from specjoule import models

    target = str(REPO / "config" / "models" / "qwen3.6-35b-a3b")
    assert vllm.pop("block_size") == models.gated_deltanet_attention_block_tokens(target, 15) == 1168
    assert models.gated_deltanet_attention_block_tokens(target, 3) < 1168  # EAGLE3's own block is smaller
    assert vllm == dense["engine_options"]["vllm"]
    (pair,) = gdn["models"].values()
    assert pair["target"]["model"] == "config/models/qwen3.6-35b-a3b"
    assert pair["drafters"] == {
        "eagle3": "config/models/qwen3.6-35b-a3b-eagle3",
        "dflash": "config/models/qwen3.6-35b-a3b-dflash",
    }


def test_gdn_depth_refuses_only_sglangs_eagle3_arms_before_any_gpu_time():
    _, table = config.plan(config.read_yaml(REPO / GDN), GDN)
    refused = {(c.engine, c.scheme, c.batch_size, c.configured_L) for c in table.cells if c.unsupported_reason}
    assert refused == {("sglang", "eagle3", b, L) for b in (1, 32) for L in (1.0, 3.0, 4.0)}
    assert all("set_eagle3_layers_to_capture" in c.unsupported_reason for c in table.cells if c.unsupported_reason)
    points = {(c.engine, c.scheme, c.batch_size, c.configured_L) for c in table.cells if c.role == "point"}
    depth = {(s, L) for s, Ls in (("eagle3", (1.0, 3.0, 4.0)), ("dflash", (1.0, 8.0, 16.0))) for L in Ls}
    assert points == {(e, s, b, L) for e in ("vllm", "sglang") for b in (1, 32) for s, L in depth}


def test_sliding_window_depth_is_the_dense_eagle3_design_on_each_engines_gemma4_shape():
    sw, sws, dense, breadth_mm = _load(SW, SW_SGLANG, DENSE, "config/h200-schemes-sglang-gemma4-mm.yaml")
    for cfg in (sw, sws):
        _assert_dense_design(cfg, dense)
        assert cfg["schemes"] == {k: v for k, v in dense["schemes"].items() if k != "dflash"}
        (pair,) = cfg["models"].values()
        assert pair["drafters"] == {"eagle3": "config/models/gemma-4-26b-a4b-eagle3"}
    assert sw["engines"] == ["vllm"] and sw["engine_options"] == {"vllm": dense["engine_options"]["vllm"]}
    assert next(iter(sw["models"].values()))["target"]["model"] == "config/models/gemma-4-26b-a4b"
    assert sws["engines"] == ["sglang"]
    assert next(iter(sws["models"].values()))["target"] == next(iter(breadth_mm["models"].values()))["target"]
    # the breadth run's SGLang options (triton: SGLang asserts it for Gemma-4) plus the depth design's batch cap
    assert sws["engine_options"]["sglang"] == {**breadth_mm["engine_options"]["sglang"], "max_running_requests": 32}
    assert len({cfg["protocol"]["run_order_seed"] for cfg in (sw, sws, dense)}) == 3


TOKEN_MODE = "config/h200-moe-token-mode.yaml"


def test_the_token_mode_ab_differs_from_the_moe_depth_only_where_it_says_and_its_arms_only_in_the_mode():
    """ADR 0243's A/B: the MoE depth family's target, head, engine options, workload and checks at B = 32, L = 1;
    two schemes equal but for options.simulate_token_mode, each its own engine with its own environment."""
    ab, moe = _load(TOKEN_MODE, MOE)
    for key in ("models", "corpora", "seeds", "cuda_graphs", "workloads", "meter", "checks", "report"):
        assert ab[key] == moe[key], key
    assert ab["engine_options"]["sglang"] == moe["engine_options"]["sglang"] and ab["engines"] == ["sglang"]
    fixed, rt = ab["schemes"]["eagle3_fixed"], ab["schemes"]["eagle3_rt"]
    assert {k: v for k, v in fixed.items() if k != "options"} == {k: v for k, v in rt.items() if k != "options"}
    assert (fixed["options"], rt["options"]) == ({"simulate_token_mode": "fixed"},
                                                 {"simulate_token_mode": "real-draft-token"})
    _, table = config.plan(config.read_yaml(REPO / TOKEN_MODE), TOKEN_MODE)
    points = {c.scheme: c for c in table.cells if c.role == "point"}
    assert set(points) == {"eagle3_fixed", "eagle3_rt"} and len(table.cells) == 3  # no closing baseline
    assert {(c.batch_size, c.configured_L) for c in points.values()} == {(32, 1.0)}
    envs = {s: sg.engine_env(c.spec, {"PYTHONPATH": "/x"})["SGLANG_SIMULATE_ACC_TOKEN_MODE"] for s, c in points.items()}
    assert envs == {"eagle3_fixed": "fixed", "eagle3_rt": "real-draft-token"}
    assert sg.engine_kwargs(points["eagle3_fixed"].spec) == sg.engine_kwargs(points["eagle3_rt"].spec)


def test_the_plan_warns_when_an_moe_targets_synthetic_sglang_arms_leave_the_token_mode_to_sglang(caplog):
    """ADR 0244: the A/B measured the default token mode setting the MoE L = 1 round, so a config that leaves the mode
    unset on an MoE target's synthetic SGLang arms hears it at plan time, naming the target, the arms and their B."""
    raw = config.read_yaml(REPO / MOE)
    with caplog.at_level("WARNING", logger="specjoule.config"):
        _, table = config.plan(raw, MOE)
    warned = [r.getMessage() for r in caplog.records if "simulate_token_mode unset" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].startswith("config/models/qwen3-30b-a3b is MoE") and "(eagle3 at B = 1, 32)" in warned[0]
    assert config.moe_token_mode_warnings(table) == warned
    # the vLLM arms of the same config are not named (vLLM commits drafted tokens; the option is SGLang's)
    assert any(c.engine == "vllm" and c.synthetic for c in table.cells)


@pytest.mark.parametrize("mode", ["fixed", "real-draft-token"])
def test_a_scheme_that_names_its_token_mode_is_not_warned_about_either_way(mode):
    raw = config.read_yaml(REPO / MOE)
    raw["engines"] = ["sglang"]  # vLLM refuses `fixed` at parse time (ADR 0243)
    raw["schemes"]["eagle3"]["options"] = {"simulate_token_mode": mode}
    _, table = config.plan(raw, MOE)
    assert table.cells and config.moe_token_mode_warnings(table) == []
    _, ab = config.plan(config.read_yaml(REPO / TOKEN_MODE), TOKEN_MODE)
    assert config.moe_token_mode_warnings(ab) == []


def test_no_token_mode_warning_for_a_dense_target_or_a_vllm_only_moe_config():
    _, dense = config.plan(config.read_yaml(REPO / DENSE), DENSE)
    assert any(c.engine == "sglang" and c.synthetic for c in dense.cells)  # the rule was read, and found dense
    assert config.moe_token_mode_warnings(dense) == []
    raw = config.read_yaml(REPO / MOE)
    raw["engines"] = ["vllm"]
    _, vllm_only = config.plan(raw, MOE)
    assert config.moe_token_mode_warnings(vllm_only) == []


def test_the_shipped_configs_that_hear_the_token_mode_warning_are_the_six_adr_0244_counts():
    """Every shipped config with an MoE target on synthetic SGLang arms that leave the mode unset, and no other."""
    from specjoule import cells

    warned = set()
    for path in sorted((REPO / "config").glob("*.yaml")):
        if path.name == "schema.yaml":
            continue
        if cells_warned := config.moe_token_mode_warnings(cells.build(config.validate(config.read_yaml(path)))):
            warned.add(path.name)
            assert all(" is MoE and its synthetic SGLang arms " in w for w in cells_warned)
    assert warned == {
        "h200-schemes-depth-gdn.yaml",
        "h200-schemes-depth-mla.yaml",
        "h200-schemes-depth-moe.yaml",
        "h200-schemes-depth-sw-sglang.yaml",
        "h200-schemes-sglang-families.yaml",
        "h200-schemes-sglang-gemma4-mm.yaml",
    }


MOE_RT = "config/h200-schemes-depth-moe-sglang-rt.yaml"


def _assert_a_token_mode_companion(rt_path: str, fixed_path: str, rt: dict, fixed: dict) -> None:
    """What makes ``rt_path`` a real-draft-token companion of ``fixed_path``'s SGLang family (ADR 0244): the same
    protocol but its run-order seed and name; ten cells, none unsupported, L 1/3/4 at B 1 and 32, every point's
    engine told real-draft-token; no token-mode warning where the registered family hears one; cells of its own, whose
    engines get the same arguments as their fixed-mode twins."""
    assert {k: v for k, v in rt["protocol"].items() if k != "run_order_seed"} == {
        k: v for k, v in fixed["protocol"].items() if k != "run_order_seed"
    }
    assert rt["protocol"]["run_order_seed"] != fixed["protocol"]["run_order_seed"] and rt["name"] != fixed["name"]
    _, table = config.plan(config.read_yaml(REPO / rt_path), rt_path)
    _, registered = config.plan(config.read_yaml(REPO / fixed_path), fixed_path)
    points = [c for c in table.cells if c.role == "point"]
    assert len(table.cells) == 10 and not [c for c in table.cells if c.unsupported_reason]
    assert {(c.batch_size, c.configured_L) for c in points} == {(b, L) for b in (1, 32) for L in (1.0, 3.0, 4.0)}
    assert {sg.engine_env(c.spec, {"PYTHONPATH": "/x"})["SGLANG_SIMULATE_ACC_TOKEN_MODE"] for c in points} == {
        "real-draft-token"
    }
    # it names its mode: no warning; the family it accompanies left the mode unset and hears one
    assert config.moe_token_mode_warnings(table) == [] and config.moe_token_mode_warnings(registered) != []
    twins = {(c.batch_size, c.configured_L): c for c in registered.cells if c.engine == "sglang" and c.role == "point"}
    for c in points:
        twin = twins[(c.batch_size, c.configured_L)]
        assert c.cell_id != twin.cell_id and sg.engine_kwargs(c.spec) == sg.engine_kwargs(twin.spec)


def test_the_moe_depth_companion_differs_from_the_moe_depth_only_in_its_engine_its_seed_and_the_token_mode():
    """ADR 0244's follow-up (pre-registered 2026-12-05g): depth-moe's SGLang family with real-draft-token commits,
    judged by the same checks, so each of its rounds reads against the fixed-mode family's."""
    rt, moe = _load(MOE_RT, MOE)
    for key in ("models", "acceptance", "paper_grade", "device", *DESIGN_KEYS):
        assert rt[key] == moe[key], key
    assert rt["engines"] == ["sglang"] and rt["engine_options"] == {"sglang": moe["engine_options"]["sglang"]}
    assert rt["schemes"]["baseline"] == moe["schemes"]["baseline"]
    assert rt["schemes"]["eagle3"] == {**moe["schemes"]["eagle3"], "options": {"simulate_token_mode": "real-draft-token"}}
    _assert_a_token_mode_companion(MOE_RT, MOE, rt, moe)


SW_SGLANG_RT = "config/h200-schemes-depth-sw-sglang-rt.yaml"


def test_the_sliding_window_companion_differs_from_its_family_only_in_its_name_seed_and_token_mode():
    """Pre-registered 2026-12-06 after depth-sw-sglang's H100 run: the same family with real-draft-token commits,
    judged by the same checks and read by the MoE companion's rule, so each round reads against the fixed mode's."""
    rt, fixed = _load(SW_SGLANG_RT, SW_SGLANG)
    for key in ("models", "acceptance", "paper_grade", "device", "engines", "engine_options", *DESIGN_KEYS):
        assert rt[key] == fixed[key], key
    assert rt["schemes"] == {**fixed["schemes"],
                             "eagle3": {**fixed["schemes"]["eagle3"], "options": {"simulate_token_mode": "real-draft-token"}}}
    # the reading rule is the MoE companion's, word for word where it states the thresholds
    rule = "the token mode changes the round if the two rounds differ by at least 10 %, does not if they are within 5 %"
    for path in (SW_SGLANG_RT, MOE_RT):
        assert rule in " ".join(line.lstrip("# ") for line in (REPO / path).read_text().splitlines() if line.startswith("#"))
    _assert_a_token_mode_companion(SW_SGLANG_RT, SW_SGLANG, rt, fixed)


NGRAM_SGLANG = "config/h200-schemes-ngram-sglang.yaml"


def test_the_sglang_ngram_config_is_validation_bs_ngram_arm_on_both_engines_and_plans_its_header():
    """Pre-registered 2026-12-06f: SGLang's host-side n-gram, never run on a GPU, with vLLM's on the same board. The
    arm, model, workload and thresholds are h200-validation-b's; each engine family carries its own baselines; the
    header's planned seconds and starts are the plan's."""
    ngram, b = _load(NGRAM_SGLANG, "config/h200-validation-b.yaml")
    assert ngram["engines"] == ["sglang", "vllm"] and ngram["models"]["qwen3b"]["target"] == b["models"]["qwen3b"]["target"]
    assert ngram["schemes"]["ngram"] == b["schemes"]["ngram"] and set(ngram["schemes"]) == {"baseline", "ngram"}
    for key in ("batch_sizes", "corpora", "seeds", "cuda_graphs", "workloads", "meter"):
        assert ngram[key] == b[key], key
    for key, value in b["checks"].items():
        if key != "engine_config_may_differ":
            assert ngram["checks"][key] == value, key
    _assert_ngram_header_is_the_plan(NGRAM_SGLANG)


def _assert_ngram_header_is_the_plan(path: str) -> None:
    """Every cell plans as supported, each engine family has both baselines, and the header's planned seconds,
    starts and 1.2 × gate per family are the plan's."""
    table = cells.build(config.load(REPO / path))
    assert not any(c.unsupported_reason for c in table.cells)
    header = " ".join((REPO / path).read_text().split())
    for engine in ("sglang", "vllm"):
        groups = [g for g in table.engine_groups().values() if g.cells[0].engine == engine]
        planned = round(sum(table.group_estimated_s(g, warm_cache=False) for g in groups))
        roles = {c.role for g in groups for c in g.cells}
        assert {"opening_baseline", "closing_baseline", "point"} <= roles, engine
        assert f"{engine}-qwen3b-closed-cg1 {planned} s ({len(groups)} engine starts) gate {round(1.2 * planned)} s" in header


NGRAM_L4 = "config/h200-schemes-ngram-l4.yaml"


def test_the_ngram_l4_config_is_the_ngram_config_with_l4_for_l6_and_plans_its_header():
    """Pre-registered 2026-12-06i (ADR 0250 addendum 4): h200-schemes-ngram-sglang.yaml with its high-acceptance arm at
    L = 4 instead of 6 and nothing else changed (name aside); the header's planned seconds and starts are the plan's."""
    l4, ngram = _load(NGRAM_L4, NGRAM_SGLANG)
    assert l4["schemes"]["ngram"]["acceptance"] == ["mv1", "mv4"] and l4["acceptance"] == {
        "mv1": {"minvar": 1.0}, "mv4": {"minvar": 4.0}}
    for key in ("name", "schemes", "acceptance"):
        l4.pop(key), ngram.pop(key)
    assert l4 == ngram
    _assert_ngram_header_is_the_plan(NGRAM_L4)


def test_vllms_measured_draft_lengths_put_the_l4_arm_inside_the_tolerance_and_the_l6_arm_outside():
    """Why L = 4: the committed L = 6 arms (two H100s, both B) say how long vLLM's n-gram drafts were (accepted per
    position, every draft accepted there); under rates [1, 1, 1, 0, 0] those drafts commit the header's 3.976, inside
    the registered tolerance, where L = 6's 5.906 is outside it."""
    from specjoule.analysis import aggregate, packed

    tolerance = config.load(REPO / NGRAM_L4)["checks"]["acceptance_length_tolerance"]
    rates = [1.0, 1.0, 1.0, 0.0, 0.0]
    expected = {}
    for folder in ("validation/h100-2026-12/session-2026-12-06h/ngram-both", "validation/h100-2026-12/session-2026-12-06i/ngram-vllm"):
        df = aggregate.aggregate(packed.tree_files(REPO / folder / "results" / "cells", "*/*.parquet"))
        for r in df.filter(df["engine"] == "vllm", df["cell_name"] == "ngram--mv6").iter_rows(named=True):
            at_least = [a / r["drafts"] for a in r["accepted_per_position"]]  # share of drafts at least i + 1 long
            assert at_least == sorted(at_least, reverse=True) and r["realized_L"] == pytest.approx(1 + sum(at_least))
            # a draft commits the leading accepted run of its drafted tokens: with 0/1 rates, the first r ones it has
            accepted = sum(p for p, rate in zip(at_least, rates) if rate == 1.0)
            expected[(folder, r["batch_size"])] = 1 + accepted
    assert len(expected) == 4 and max(expected.values()) - min(expected.values()) < 1e-3
    l4 = sum(expected.values()) / 4
    assert abs(l4 - 4.0) < tolerance and f"expected at {l4:.3f}, inside the 0.05" in " ".join(
        (REPO / NGRAM_L4).read_text().split())
