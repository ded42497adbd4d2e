"""SGLang 0.5.17's EAGLE3 on a Qwen3.5/Qwen3.6 target dies at start (H200, 2026-12-04e, ``ValueError: too many
values to unpack (expected 2)``): the wrappers inherit Qwen3-VL's set_eagle3_layers_to_capture, which flags no
decoder layer ``_is_layer_to_capture``, so no aux hidden state is collected. The plan says so before any GPU time,
for SGLang only, and the cell ids stay those pre-registered (the vLLM half's ids are those of its committed records,
2026-12-04d; the SGLang half never wrote a record, so its ids are pinned as planned before this change)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from specjoule import cells, support
from specjoule import config as sj_config
from tools import check_sglang_config as CSC

ROOT = Path(__file__).resolve().parents[1]
GDN_EAGLE3 = ROOT / "config" / "h200-schemes-gdn-eagle3.yaml"
VLLM_RECORDS = (
    ROOT / "validation" / "h200-2026-12" / "session-2026-12-04d" / "gdn-eagle3" / "results" / "records.parquet"
)
SGLANG = "sglang-qwen36_35b_a3b-closed-b1-random-s0-cg1"
VLLM = "vllm-qwen36_35b_a3b-closed-b1-random-s0-cg1"
# As planned before SGLANG_EAGLE3_TARGET_BROKEN existed (and in tests/data/golden_cells.json).
SGLANG_IDS = {
    f"{SGLANG}/baseline--open": "a0b64d0e41ad",
    f"{SGLANG}/eagle3--mv4": "158248f36e8a",
    f"{SGLANG}/eagle3--mv1": "8d10e21f6f78",
    f"{SGLANG}/baseline--close": "a04e8e5ab2f3",
}
needs_wheel = pytest.mark.skipif(not CSC.SGLANG_WHEEL.is_file(), reason="SGLang 0.5.17 wheel not on this machine")


def _cells() -> dict[str, cells.Cell]:
    _, table = sj_config.plan(yaml.safe_load(GDN_EAGLE3.read_text()), GDN_EAGLE3.name)
    return {f"{c.campaign_id}/{c.name}": c for c in table}


def test_sglang_eagle3_on_qwen36_is_planned_unsupported_with_the_engines_words():
    planned = _cells()
    for name in ("eagle3--mv4", "eagle3--mv1"):
        cell = planned[f"{SGLANG}/{name}"]
        reason = cell.unsupported_reason
        assert reason and reason.startswith("sglang 0.5.17: EAGLE3 target 'Qwen3_5MoeForConditionalGeneration': ")
        assert "_is_layer_to_capture" in reason and "set_eagle3_layers_to_capture" in reason
        assert "ValueError: too many values to unpack (expected 2)" in reason
        assert "(H200, 2026-12-04e)" in reason and "sgl-project/sglang#38307" in reason
        assert cell.estimated_s == 0.0  # written without a GPU
    # the SGLang baselines and every vLLM cell of the config are not touched
    for cid in (f"{SGLANG}/baseline--open", f"{SGLANG}/baseline--close"):
        assert planned[cid].unsupported_reason is None, cid
    vllm = [c for c in planned.values() if c.engine == "vllm"]
    assert len(vllm) == 4 and all(c.unsupported_reason is None for c in vllm)


def test_cell_ids_are_those_pre_registered():
    planned = {cid: c.cell_id for cid, c in _cells().items()}
    records = pl.read_parquet(VLLM_RECORDS, columns=["campaign_id", "cell_name", "cell_id"])
    committed = {f"{r['campaign_id']}/{r['cell_name']}": r["cell_id"] for r in records.iter_rows(named=True)}
    assert len(committed) == 4 and all(cid.startswith(f"{VLLM}/") for cid in committed)
    assert planned == {**committed, **SGLANG_IDS}


def test_only_sglang_and_only_the_qwen35_wrappers_are_refused():
    for arch in ("Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration"):
        assert arch in support.SGLANG_EAGLE3_TARGETS  # the hook exists: the tables alone would have said yes
        ok, reason = support.eagle3_target_supported("sglang", arch)
        assert not ok and reason.startswith(f"sglang 0.5.17: EAGLE3 target {arch!r}: ") and "ValueError" in reason
        ok, _ = support.eagle3_target_supported("vllm", arch)
        assert ok  # vLLM ran EAGLE3 on Qwen3.6-35B-A3B (2026-12-04d)
    # other SGLang EAGLE3 targets keep their answer and its words
    assert support.eagle3_target_supported("sglang", "Qwen3MoeForCausalLM") == (
        True,
        "sglang 0.5.17: 'Qwen3MoeForCausalLM' provides EAGLE3 auxiliary hidden states",
    )
    ok, _ = support.eagle3_target_supported("sglang", "Glm4MoeLiteForCausalLM")
    assert ok


@needs_wheel
def test_the_cited_lines_are_the_wheels():
    with zipfile.ZipFile(CSC.SGLANG_WHEEL) as whl:
        vl = whl.read("sglang/srt/models/qwen3_vl.py").decode().splitlines()
        q35 = whl.read("sglang/srt/models/qwen3_5.py").decode().splitlines()
    assert vl[1428 - 1].strip() == "hidden_states, aux_hidden_states = hidden_states"
    assert vl[1542 - 1].strip().startswith("def set_eagle3_layers_to_capture(")
    assert q35[1394 - 1].strip().startswith("def set_dflash_layers_to_capture(")
    assert '"_is_layer_to_capture", True' in q35[1397 - 1]
    assert q35[1771 - 1].startswith("class Qwen3_5ForConditionalGeneration(Qwen3VLForConditionalGeneration)")
    assert q35[1928 - 1].startswith("class Qwen3_5MoeForConditionalGeneration(Qwen3VLForConditionalGeneration)")
    # nothing in qwen3_5.py sets the flag for EAGLE3 or overrides Qwen3-VL's hook
    assert not any("def set_eagle3_layers_to_capture" in line for line in q35)
    assert sum('"_is_layer_to_capture", True' in line for line in q35) == 1
