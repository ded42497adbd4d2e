"""gemma-4-26B-A4B on SGLang 0.5.17 in its published multimodal form (ADR 0225).

The text-only shape (``gemma4_text``) died at start on the H200 (2026-12-03b): SGLang remaps Gemma-4's sliding/full
attention attributes only for the multimodal model types. ``config/h200-schemes-sglang-gemma4-mm.yaml`` is the
triton config with the target switched to ``config/models/gemma-4-26b-a4b-mm``. Expected values come from the two
configs and the published config.json, read here directly; the wheel tests read SGLang 0.5.17's own sources and
run its own config path (tools/check_sglang_config.py) under the transformers its bundle ships.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import zipfile
from pathlib import Path, PurePath

import pytest

from specjoule import cells, config, support
from specjoule.engines import sglang as sglang_adapter
from tools import check_sglang_config as CSC

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "config" / "models"
GEMMA4 = REPO / "config" / "h200-schemes-sglang-gemma4.yaml"
GEMMA4_MM = REPO / "config" / "h200-schemes-sglang-gemma4-mm.yaml"
MM_DIR = MODELS / "gemma-4-26b-a4b-mm"
SGLANG0517 = json.loads((REPO / "tests" / "data" / "sglang" / "speculative-0.5.17.json").read_text())
SGLANG_WHEEL = CSC.SGLANG_WHEEL
# A folder with the companions transformers 5.12.1 needs beside this interpreter (huggingface-hub < 2, tokenizers):
# SPECJOULE_WHEEL_CACHE, else the repository's bundle cache; the test runs offline and skips without them.
WHEEL_CACHE = Path(os.environ.get("SPECJOULE_WHEEL_CACHE", str(REPO / ".bundle" / "cache")))
needs_wheel = pytest.mark.skipif(not SGLANG_WHEEL.is_file(), reason="SGLang 0.5.17 wheel not on this machine")


def _raw(path: Path) -> dict:
    return config.read_yaml(path)


def _plan(path: Path) -> list[cells.Cell]:
    return list(cells.build(config.load(path)))


def test_the_config_is_the_triton_config_with_the_target_switched():
    """Same drafter, engine options, workload, protocol and pre-registered checks as h200sgf2; a new name, seed,
    pair key (its campaign ids differ from the text-only run's) and target."""
    old, new = _raw(GEMMA4), _raw(GEMMA4_MM)
    assert (old["name"], new["name"]) == ("h200sgf2", "h200sgf3")
    assert new["protocol"]["run_order_seed"] != old["protocol"]["run_order_seed"]
    assert new["checks"] == old["checks"] and new["engine_options"] == old["engine_options"]
    (old_pair,), (new_pair,) = old["models"].values(), new["models"].values()
    assert old_pair["target"]["model"] == "config/models/gemma-4-26b-a4b"
    assert new_pair["target"]["model"] == "config/models/gemma-4-26b-a4b-mm"
    assert new_pair["drafters"] == old_pair["drafters"] == {"eagle3": "config/models/gemma-4-26b-a4b-eagle3"}
    same_old, same_new = copy.deepcopy(old), copy.deepcopy(new)
    for raw in (same_old, same_new):
        del raw["name"], raw["protocol"]["run_order_seed"]
        (pair,) = raw.pop("models").values()
        del pair["target"]["model"]
        raw["pair"] = pair
    assert same_new == same_old


def test_the_eagle3_head_fits_the_wrapped_text_model():
    """The head reads the target's hidden states (hidden_size) and shares its vocabulary: both as the text_config."""
    head = json.loads((MODELS / "gemma-4-26b-a4b-eagle3" / "config.json").read_text())
    text = json.loads((MM_DIR / "config.json").read_text())["text_config"]
    assert (head["hidden_size"], head["vocab_size"], head["draft_vocab_size"]) == (
        text["hidden_size"],
        text["vocab_size"],
        text["vocab_size"],
    )
    assert max(head["eagle_config"]["eagle_aux_hidden_state_layer_ids"]) < text["num_hidden_layers"]


def test_four_supported_cells_are_planned_on_sglang():
    planned = _plan(GEMMA4_MM)
    assert [(c.role, c.scheme, c.configured_L) for c in sorted(planned, key=lambda c: c.run_order_index)] == [
        (cells.ROLE_OPENING, "baseline", None),
        (cells.ROLE_POINT, "eagle3", 4.0),
        (cells.ROLE_POINT, "eagle3", 1.0),
        (cells.ROLE_CLOSING, "baseline", None),
    ]
    assert not [c.name for c in planned if c.unsupported_reason]
    # and the text-only config keeps its H200 reason (ADR 0194 addendum 2): nothing there changed
    assert all("'gemma4_text'" in (c.unsupported_reason or "") for c in _plan(GEMMA4))


def test_the_support_tables_leave_the_multimodal_form_supported():
    arch, model_type = "Gemma4ForConditionalGeneration", "gemma4"
    raw = json.loads((MM_DIR / "config.json").read_text())
    assert (raw["architectures"], raw["model_type"]) == ([arch], model_type)
    assert support.supported("sglang", arch)[0]
    assert support.eagle3_target_supported("sglang", arch)[0]
    assert support.model_type_supported("sglang", model_type)[0]
    assert support.attention_backend_supported("sglang", arch, {"attention_backend": "triton"})[0]
    assert not support.attention_backend_supported("sglang", arch, {"attention_backend": "fa3"})[0]
    scheme = {"method": "eagle3", "drafter": "config/models/gemma-4-26b-a4b-eagle3"}
    options = _raw(GEMMA4_MM)["engine_options"]["sglang"]
    assert cells.planned_unsupported("sglang", str(MM_DIR), scheme, options, "dummy") is None
    assert "'gemma4_text'" in cells.planned_unsupported(
        "sglang", str(MODELS / "gemma-4-26b-a4b"), scheme, options, "dummy"
    )


def test_adapter_asks_sglang_for_each_cells_settings():
    """The arguments the 2026-12-02b check compares against SGLang's /server_info, built for each cell of the new
    config: EAGLE3 k = 3 on the shipped head with dummy weights, triton, and multimodal off (ADR 0211: the dir holds
    no processor); every argument a ServerArgs field of 0.5.17. Expectations from the config."""
    raw = _raw(GEMMA4_MM)
    fields = set(SGLANG0517["server_args_fields"])
    scheme = raw["schemes"]["eagle3"]
    seen = []
    for cell in _plan(GEMMA4_MM):
        whole = sglang_adapter.engine_kwargs(cell.setup)
        assert set(whole) <= fields, set(whole) - fields
        assert PurePath(whole["model_path"]).name == "gemma-4-26b-a4b-mm"
        assert whole["enable_multimodal"] is False and whole["skip_tokenizer_init"] is True
        assert whole["attention_backend"] == "triton" and whole["load_format"] == "dummy"
        if cell.role != cells.ROLE_POINT:
            assert "speculative_algorithm" not in whole
            continue
        kw = sglang_adapter.speculative_kwargs(cell.setup)
        assert kw["speculative_algorithm"] == "EAGLE3"
        assert (kw["speculative_num_steps"], kw["speculative_eagle_topk"]) == (scheme["k"], 1)
        assert kw["speculative_num_draft_tokens"] == scheme["k"] + 1
        assert PurePath(kw["speculative_draft_model_path"]).name == "gemma-4-26b-a4b-eagle3"
        assert kw["speculative_draft_load_format"] == "dummy"
        assert sglang_adapter.configured_length(cell.setup) == cell.configured_L
        assert {k: whole[k] for k in kw} == kw
        seen.append(cell.configured_L)
    assert sorted(seen) == [1.0, 4.0]


# ------------------------------------------------------------------------------- SGLang 0.5.17's own sources


@needs_wheel
def test_sglang_0517_sources_say_what_adr_0225_cites():
    with zipfile.ZipFile(SGLANG_WHEEL) as whl:

        def src(path: str) -> str:
            return whl.read("sglang/srt/" + path).decode()

        # the remap covers the multimodal model type, not the text one
        remapped = CSC.remapped_model_types(SGLANG_WHEEL)
        assert "gemma4" in remapped and "gemma4_text" not in remapped
        # Gemma4ForConditionalGeneration feeds EAGLE3 itself (a method of its own class, models/gemma4_mm.py)
        tree = ast.parse(src("models/gemma4_mm.py"))
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Gemma4ForConditionalGeneration"]
        assert "set_eagle3_layers_to_capture" in {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        assert "EntryClass = Gemma4ForConditionalGeneration" in src("models/gemma4_mm.py")
        # ServerArgs asserts the same backends for it as for the text class
        sa = src("server_args.py")
        branch = sa[sa.index('            "Gemma4ForConditionalGeneration",\n            "Gemma4ForCausalLM",') :][:900]
        assert 'accepted_backends = ("trtllm_mha", "triton", "ascend", "intel_xpu")' in branch
        # a multimodal arch: is_multimodal is gated on enable_multimodal, which the adapter sets False (ADR 0211)
        mc = src("configs/model_config.py")
        assert '    "Gemma4ForConditionalGeneration",\n' in mc.split("multimodal_model_archs = [", 1)[1]
        assert "self.is_multimodal = enable_multimodal and (" in mc
        # the hybrid-SWA KV pool reads swa_num_key_value_heads from the text config
        assert "self.model_config.hf_text_config.swa_num_key_value_heads" in src("mem_cache/kv_cache_configurator.py")
        # the EAGLE3 head's target_model_type (gemma4_text, as SpecForge writes it) is read nowhere
        assert not [n for n in whl.namelist() if n.endswith(".py") and b"target_model_type" in whl.read(n)]
    # no SGLang config class takes over either model type (the check's empty registry stands in faithfully)
    assert not {"gemma4", "gemma4_text"} & CSC.claimed_model_types(SGLANG_WHEEL)


@needs_wheel
def test_sglang_0517_config_path_remaps_the_multimodal_form_only(tmp_path):
    """SGLang's own parse + get_hf_text_config (cut from the wheel) under transformers 5.12.1: the multimodal form
    gets swa_* for the sliding layers and the global values for the full ones; the text-only shape has no
    swa_num_key_value_heads, the attribute its H200 start died on."""
    if not (SGLANG_WHEEL.parent / f"transformers-{CSC.SGLANG_TRANSFORMERS}-py3-none-any.whl").is_file():
        pytest.skip(f"transformers {CSC.SGLANG_TRANSFORMERS} wheel not beside the SGLang wheel")
    dirs = [MODELS / "gemma-4-26b-a4b", MM_DIR]
    try:
        rows = CSC.probe(dirs, wheel=SGLANG_WHEEL, wheels=WHEEL_CACHE, scratch=tmp_path, offline=True)
    except FileNotFoundError as exc:  # a companion wheel (huggingface-hub < 2) is not cached here
        pytest.skip(f"transformers {CSC.SGLANG_TRANSFORMERS} companions not cached offline: {exc}")
    text, mm = rows
    published = json.loads((MM_DIR / "config.json").read_text())["text_config"]
    layer_types = published["layer_types"]
    sliding = [i for i, t in enumerate(layer_types) if t == "sliding_attention"]
    full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    assert mm["ok"] and mm["transformers"] == CSC.SGLANG_TRANSFORMERS
    assert (mm["model_type"], mm["architectures"]) == ("gemma4", ["Gemma4ForConditionalGeneration"])
    assert (
        (mm["swa_num_key_value_heads"], mm["num_key_value_heads"])
        == (
            published["num_key_value_heads"],
            published["num_global_key_value_heads"],
        )
        == (8, 2)
    )
    assert (mm["swa_head_dim"], mm["head_dim"]) == (published["head_dim"], published["global_head_dim"]) == (256, 512)
    assert (mm["swa_v_head_dim"], mm["v_head_dim"]) == (256, 512)
    assert (mm["swa_layer_ids"], mm["full_layer_ids"]) == (sliding, full)
    assert CSC.starts_hybrid_swa_pool(mm)
    # the text-only shape: read, hybrid, but never remapped (what the H200 start of 2026-12-03b hit)
    assert text["ok"] and text["model_type"] == "gemma4_text" and text["hybrid_swa"]
    assert text["swa_num_key_value_heads"] is None and (text["head_dim"], text["num_key_value_heads"]) == (256, 8)
    assert not CSC.starts_hybrid_swa_pool(text)
    assert re.search(r"swa_num_key_value_heads", support.SGLANG_MODEL_TYPE_BROKEN["gemma4_text"])
