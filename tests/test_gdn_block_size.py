"""ADR 0217: on a Gated-DeltaNet hybrid target vLLM 0.26.0 sizes the attention block to hold one layer's recurrent
state, and a speculative arm's state keeps k more convolution positions, so its block is larger than the baseline's.
specjoule.models.gated_deltanet_attention_block_tokens reproduces the sizes the H200 engines chose (read from the
committed records), and config/h200-schemes-gdn-pinned.yaml gives every arm one block size no arm would grow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specjoule import config, models
from specjoule.analysis import packed
from specjoule.engines import vllm as V

REPO = Path(__file__).resolve().parent.parent
QWEN36 = "config/models/qwen3.6-35b-a3b"
EVIDENCE = REPO / "validation/h200-2026-12/session-2026-12-02f/gdn/results/cells/vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"
PINNED = "config/h200-schemes-gdn-pinned.yaml"


def _measured_block_sizes() -> dict[int, int]:
    """{k: block_size the engine reported} for every committed record of the 2026-12-02f GDN campaign."""
    out = {}
    for path in packed.tree_files(EVIDENCE.parent, f"{EVIDENCE.name}/*.parquet"):
        rec = packed.read_frame(path).row(0, named=True)
        out[int(rec["k"] or 0)] = int(json.loads(rec["engine_config"])["block_size"])
    return out


def test_the_rule_gives_the_block_sizes_the_h200_engines_chose():
    measured = _measured_block_sizes()
    assert measured == {0: 1056, 15: 1168}, measured  # baseline, DFlash k = 15
    for k, block in measured.items():
        assert models.gated_deltanet_attention_block_tokens(QWEN36, k) == block


def test_the_block_grows_with_k_by_whole_alignment_steps():
    sizes = [models.gated_deltanet_attention_block_tokens(QWEN36, k) for k in range(0, 17)]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    assert all(s % 16 == 0 for s in sizes)
    assert models.gated_deltanet_attention_block_tokens(QWEN36, 3) == 1072  # MTP, k = 3


@pytest.mark.parametrize("model", ["config/models/qwen3-8b", "config/models/glm-4.7-flash"])
def test_a_target_without_gated_deltanet_layers_is_refused(model):
    with pytest.raises(ValueError, match="not a local Gated-DeltaNet hybrid"):
        models.gated_deltanet_attention_block_tokens(model, 0)


def test_a_negative_k_is_refused():
    with pytest.raises(ValueError, match="num_speculative_tokens must be >= 0, got -1"):
        models.gated_deltanet_attention_block_tokens(QWEN36, -1)


def _arms(path: str):
    _, table = config.plan(config.read_yaml(REPO / path), path)
    return [c for c in table.cells if not c.unsupported_reason]


def test_the_pinned_config_gives_every_arm_a_block_no_arm_would_grow():
    arms = _arms(PINNED)
    assert {c.spec["scheme"]["method"] for c in arms} == {"baseline", "mtp", "dflash"}
    for cell in arms:
        kw = V.engine_kwargs(cell.spec)
        k = int(kw["speculative_config"]["num_speculative_tokens"]) if "speculative_config" in kw else 0
        assert kw["block_size"] == 1168
        assert kw["block_size"] >= models.gated_deltanet_attention_block_tokens(QWEN36, k)


def test_the_unpinned_config_lets_vllm_choose_per_arm():
    """The config that ran on 2026-12-02f: no block_size, so vLLM's own choice differs between its arms."""
    arms = _arms("config/h200-schemes-gdn.yaml")
    assert all("block_size" not in V.engine_kwargs(c.spec) for c in arms)
    ks = {int(c.spec["scheme"].get("k") or 0) for c in arms}
    assert len({models.gated_deltanet_attention_block_tokens(QWEN36, k) for k in ks}) == len(ks) == 3


def test_the_pinned_config_keeps_the_preregistered_thresholds():
    pinned = config.read_yaml(REPO / PINNED)["checks"]
    original = config.read_yaml(REPO / "config/h200-schemes-gdn.yaml")["checks"]
    assert pinned == original
    assert "block_size" not in pinned["engine_config_may_differ"]


def test_the_plan_warns_before_any_gpu_time_when_a_hybrid_campaign_leaves_the_block_to_vllm(caplog):
    raw = config.read_yaml(REPO / "config/h200-schemes-gdn.yaml")
    with caplog.at_level("WARNING", logger="specjoule.config"):
        cfg, table = config.plan(raw, "config/h200-schemes-gdn.yaml")
    warned = [r.getMessage() for r in caplog.records if "Gated-DeltaNet hybrid" in r.getMessage()]
    assert len(warned) == 1 and "engine_options.vllm.block_size is not set" in warned[0]
    assert "1056 (k = 0), 1072 (k = 3), 1168 (k = 15)" in warned[0] and "pin block_size: 1168" in warned[0]
    # silent when pinned, or when the difference is pre-registered as accepted
    _, pinned_table = config.plan(config.read_yaml(REPO / PINNED), PINNED)
    assert config.hybrid_block_size_warnings(config.read_yaml(REPO / PINNED), pinned_table) == []
    excused = {**cfg, "checks": {**cfg["checks"], "engine_config_may_differ": ["block_size"]}}
    assert config.hybrid_block_size_warnings(excused, table) == []


def test_the_plan_does_not_warn_for_a_target_without_gated_deltanet_layers():
    for path in ("config/h200-schemes-sglang-families.yaml", "config/config.yaml"):
        cfg, table = config.plan(config.read_yaml(REPO / path), path)
        assert config.hybrid_block_size_warnings(cfg, table) == []


def test_the_eagle3_config_pins_its_arms_block_on_vllm_and_plans_both_engines():
    """config/h200-schemes-gdn-eagle3.yaml (2026-12-04b): EAGLE3 k = 3 on Qwen3.6, every vLLM arm at the EAGLE3
    arm's own block (1072), the SGLang arms planned too, no block warning. Nothing was unsupported at plan until
    2026-12-04e, when SGLang's EAGLE3 start on this target failed on an engine defect (ADR 0194 addendum 3): its two
    EAGLE3 arms are now refused at plan, and only they."""
    path = "config/h200-schemes-gdn-eagle3.yaml"
    raw = config.read_yaml(REPO / path)
    _, table = config.plan(raw, path)
    refused = {(c.spec["engine"], c.name) for c in table.cells if c.unsupported_reason}
    assert refused == {("sglang", "eagle3--mv1"), ("sglang", "eagle3--mv4")}
    arms = _arms(path)  # the runnable ones
    assert {(c.spec["engine"], c.spec["scheme"]["method"]) for c in arms} == {
        ("vllm", "baseline"),
        ("vllm", "eagle3"),
        ("sglang", "baseline"),
    }
    for cell in (c for c in arms if c.spec["engine"] == "vllm"):
        kw = V.engine_kwargs(cell.spec)
        assert kw["block_size"] == 1072 == models.gated_deltanet_attention_block_tokens(QWEN36, 3)
        if "speculative_config" in kw:
            assert kw["speculative_config"]["method"] == "eagle3"
            assert kw["speculative_config"]["model"].endswith("config/models/qwen3.6-35b-a3b-eagle3")
    assert config.hybrid_block_size_warnings(raw, table) == []
    assert raw["checks"] == {
        **config.read_yaml(REPO / PINNED)["checks"],
        "engine_config_may_differ": [*config.read_yaml(REPO / PINNED)["checks"]["engine_config_may_differ"],
                                     "cuda_graph_decode_bs"],
    }
