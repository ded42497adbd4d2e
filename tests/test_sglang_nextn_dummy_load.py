"""SGLang 0.5.17's NEXTN draft for GLM-4.7-Flash does not start under dummy weights (H200, 2026-12-03): the plan says
so before any GPU time, for that draft and that load format only, and the cell ids stay those pre-registered."""

from __future__ import annotations

from pathlib import Path

import yaml

from specjoule import cells, support
from specjoule import config as sj_config

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ROOT / "config" / "h200-schemes-sglang-families.yaml"


def _cells(cfg: dict) -> dict[str, cells.Cell]:
    _, table = sj_config.plan(cfg, FAMILIES.name)
    return {f"{c.campaign_id}/{c.name}": c for c in table}


def test_glm_mtp_under_dummy_weights_is_planned_unsupported_with_the_engines_words():
    planned = _cells(yaml.safe_load(FAMILIES.read_text()))
    for name in ("mtp--mv1", "mtp--mv4"):
        reason = planned[f"sglang-glm47_flash-closed-b1-random-s0-cg1/{name}"].unsupported_reason
        assert reason and "Glm4MoeLiteForCausalLMNextN" in reason and "start_layer" in reason
    # the other NEXTN targets of the same config, and GLM's baseline and EAGLE3, are not touched
    for cid in (
        "sglang-glm47_flash-closed-b1-random-s0-cg1/baseline--open",
        "sglang-glm47_flash-closed-b1-random-s0-cg1/eagle3--mv4",
        "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1/mtp--mv4",
        "sglang-mimo_7b-closed-b1-random-s0-cg1/mtp--mv4",
    ):
        assert planned[cid].unsupported_reason is None, cid


def test_only_dummy_weights_and_only_sglang_are_refused():
    cfg = yaml.safe_load(FAMILIES.read_text())
    options = cfg["engine_options"]["sglang"]
    target, scheme = str(ROOT / "config" / "models" / "glm-4.7-flash"), {"method": "mtp", "k": 3}
    assert "start_layer" in (cells.planned_unsupported("sglang", target, scheme, options, "dummy") or "")
    assert cells.planned_unsupported("sglang", target, scheme, options, "auto") is None  # real weights: load_weights
    ok, _ = support.mtp_dummy_load_supported("vllm", "Glm4MoeLiteForCausalLM", "dummy")
    assert ok  # an SGLang defect: vLLM's MTP on GLM ran on dummy weights (2026-12-02c)
    ok, _ = support.mtp_dummy_load_supported("sglang", "MiMoForCausalLM", "dummy")
    assert ok
