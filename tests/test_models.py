"""Model shapes (specjoule.models), the engine support table (specjoule.support) and the parse-time model checks.

Expected parameter counts are computed here from the published formulae and configs, independently of the
code under test; the published headline sizes (e.g. "25.2B total, 3.8B active") are a second, looser check.
"""

import copy
import json
import os
import shutil
from pathlib import Path

import pytest

from specjoule import config, models, support
from specjoule.models import ModelShapeError, describe, describe_drafter

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "config" / "models"

# Every shipped target dir and the family it must be detected as.
TARGET_FAMILIES = {
    "tiny-target": ("gqa", False),
    "tiny-draft": ("gqa", False),
    # The project's trained pair (real weights, ADR 0120): 2 query heads on 1 KV head; the draft's one head.
    "trained-qwen3-target": ("gqa", False),
    "trained-qwen3-draft": ("mha", False),
    "qwen2.5-0.5b": ("gqa", False),
    "qwen2.5-3b": ("gqa", False),
    "qwen3-8b": ("gqa", False),
    "mimo-7b": ("gqa", False),
    "qwen3-30b-a3b": ("gqa", True),
    "gemma-4-26b-a4b": ("gqa_sliding", True),
    "gemma-4-26b-a4b-mm": ("gqa_sliding", True),  # the same text model in its published multimodal form (ADR 0225)
    "glm-4.7-flash": ("mla", True),
    "qwen3.6-35b-a3b": ("gated_deltanet", True),
}
# Every shipped drafter dir: kind, block size from its config, target it drafts for.
DRAFTERS = {
    "qwen3-8b-eagle3": ("eagle3", None, "qwen3-8b"),
    "qwen3-8b-dflash": ("dflash", 16, "qwen3-8b"),
    "qwen3-8b-dspark": ("dspark", 7, "qwen3-8b"),
    "qwen3-30b-a3b-eagle3": ("eagle3", None, "qwen3-30b-a3b"),
    "gemma-4-26b-a4b-eagle3": ("eagle3", None, "gemma-4-26b-a4b"),
    "glm-4.7-flash-eagle3": ("eagle3", None, "glm-4.7-flash"),
    "qwen3.6-35b-a3b-dflash": ("dflash", 16, "qwen3.6-35b-a3b"),
    "qwen3.6-35b-a3b-eagle3": ("eagle3", None, "qwen3.6-35b-a3b"),
}


def test_every_shipped_model_dir_is_listed_here():
    shipped = {p.name for p in MODELS.iterdir() if (p / "config.json").is_file()}
    assert shipped == set(TARGET_FAMILIES) | set(DRAFTERS)


# ------------------------------------------------------------------------------------ parameter counts


def test_qwen3_8b_parameters_from_the_published_formula():
    # Qwen/Qwen3-8B: H 4096, 36 layers, 32 q heads / 8 kv heads of 128, FFN 12288, vocab 151936, untied.
    H, L, V, I, q, kv, hd = 4096, 36, 151936, 12288, 32, 8, 128
    attention = H * q * hd + 2 * H * kv * hd + q * hd * H + 2 * hd  # q, k, v, o, q_norm, k_norm
    layer = attention + 3 * H * I + 2 * H
    expected = L * layer + 2 * V * H + H
    shape = describe("config/models/qwen3-8b")
    assert shape.params_total == expected
    assert shape.params_active == expected
    assert round(expected / 1e9, 2) == 8.19  # Qwen's model card: 8.2B
    assert shape.weight_bytes() == 2 * expected
    assert shape.weight_bytes(dtype_bytes=1) == expected


def test_qwen3_30b_a3b_parameters_total_and_active():
    # Qwen/Qwen3-30B-A3B: H 2048, 48 layers, 32/4 heads of 128, 128 experts of 768, top 8, no shared expert.
    H, L, V, q, kv, hd, E, k, Ie = 2048, 48, 151936, 32, 4, 128, 128, 8, 768
    attention = H * q * hd + 2 * H * kv * hd + q * hd * H + 2 * hd
    router = H * E
    total = L * (attention + 2 * H + router + E * 3 * H * Ie) + 2 * V * H + H
    active = L * (attention + 2 * H + router + k * 3 * H * Ie) + 2 * V * H + H
    shape = describe("config/models/qwen3-30b-a3b")
    assert (shape.params_total, shape.params_active) == (total, active)
    assert round(total / 1e9, 1) == 30.5 and round(active / 1e9, 1) == 3.4  # card: 30.5B total, 3.3B activated
    assert shape.active_weight_bytes() == 2 * active
    assert shape.moe and (shape.num_experts, shape.experts_per_token, shape.moe_intermediate_size) == (128, 8, 768)


@pytest.mark.parametrize("name, total_b, active_b", [
    ("gemma-4-26b-a4b", 25.2, 3.8),     # Google's model card: 25.2B total, 3.8B active
    ("glm-4.7-flash", 30.0, 3.9),       # "30B-A3B" class; main model without its MTP layer
    ("qwen3.6-35b-a3b", 34.7, 3.5),     # "35B-A3B": 35B with the vision tower, which is not counted here
    ("mimo-7b", 7.6, 7.6),
])
def test_published_headline_sizes(name, total_b, active_b):
    shape = describe(MODELS / name)
    assert shape.params_total / 1e9 == pytest.approx(total_b, abs=0.15)
    assert shape.params_active / 1e9 == pytest.approx(active_b, abs=0.15)
    assert shape.params_total * 2 / 2**30 < 139 - 20  # fits one H200 in bf16 with a drafter and a KV cache


def test_mimo_mtp_layer_is_counted_apart():
    # One Qwen2 decoder layer (q/k/v biases) + eh_proj (2H -> H) + 3 norms.
    H, I, q, kv, hd = 4096, 11008, 32, 8, 128
    layer = H * q * hd + 2 * H * kv * hd + q * hd * H + (q * hd + 2 * kv * hd) + 3 * H * I + 2 * H
    shape = describe("config/models/mimo-7b")
    assert shape.mtp_layers == 1
    assert shape.params_mtp == layer + 2 * H * H + 3 * H


# ---------------------------------------------------------------------------------------- families


@pytest.mark.parametrize("name", sorted(TARGET_FAMILIES))
def test_family_of_every_shipped_model(name):
    family, moe = TARGET_FAMILIES[name]
    shape = describe(MODELS / name)
    assert (shape.family, shape.moe) == (family, moe)
    assert shape.family in models.FAMILIES


def test_gemma4_sliding_layers_and_window():
    shape = describe("config/models/gemma-4-26b-a4b")
    assert (shape.sliding_window, shape.sliding_layers, shape.full_attention_layers) == (1024, 25, 5)
    assert (shape.full_attention_head_dim, shape.full_attention_kv_heads) == (512, 2)


def test_gemma4_multimodal_form_has_the_text_only_shapes_language_model():
    """ADR 0225: the multimodal shape wraps the text-only shape's fields (SGLang needs model_type gemma4); every
    number describe() gives of the language model is the same, and the wrapper only adds the vision tower."""
    text, mm = describe("config/models/gemma-4-26b-a4b"), describe("config/models/gemma-4-26b-a4b-mm")
    assert (text.architecture, mm.architecture) == ("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration")
    for field in ("params_total", "params_active", "sliding_window", "sliding_layers", "full_attention_layers",
                  "full_attention_head_dim", "full_attention_kv_heads", "num_experts", "experts_per_token"):
        assert getattr(mm, field) == getattr(text, field), field
    assert mm.weight_bytes() == text.weight_bytes() and mm.kv_bytes_per_token() == text.kv_bytes_per_token()
    raw_text = json.loads((MODELS / "gemma-4-26b-a4b" / "config.json").read_text())
    raw_mm = json.loads((MODELS / "gemma-4-26b-a4b-mm" / "config.json").read_text())
    # the text-only shape's one change (README: use_bidirectional_attention "vision" -> null) is the only field
    # that differs, besides the architectures the wrapper names at its top level
    differs = {k for k in set(raw_text) | set(raw_mm["text_config"]) if raw_text.get(k) != raw_mm["text_config"].get(k)}
    assert differs == {"architectures", "use_bidirectional_attention"}
    assert raw_mm["text_config"]["model_type"] == "gemma4_text" and raw_text["model_type"] == "gemma4_text"
    assert raw_mm["model_type"] == "gemma4" and models.is_multimodal_wrapper(str(MODELS / "gemma-4-26b-a4b-mm"))


def test_mla_dims_only_on_mla():
    glm = describe("config/models/glm-4.7-flash")
    assert (glm.kv_lora_rank, glm.q_lora_rank, glm.qk_rope_head_dim, glm.qk_nope_head_dim, glm.v_head_dim) == \
        (512, 768, 64, 192, 256)
    assert glm.mtp_layers == 1
    qwen = describe("config/models/qwen3-8b")
    assert qwen.kv_lora_rank is None and qwen.v_head_dim is None


def test_gated_deltanet_layers():
    shape = describe("config/models/qwen3.6-35b-a3b")  # text_config nested in a multimodal config
    assert (shape.linear_attention_layers, shape.full_attention_layers, shape.mtp_layers) == (30, 10, 1)
    assert shape.architecture == "Qwen3_5MoeForConditionalGeneration"


# ---------------------------------------------------------------------------------------- KV cache


def test_kv_bytes_gqa():
    shape = describe("config/models/qwen3-8b")
    per_token = 36 * 2 * 8 * 128 * 2  # layers x (K and V) x kv heads x head dim x bf16
    assert shape.kv_bytes_per_token() == per_token
    assert shape.kv_bytes(1000) == 1000 * per_token
    assert shape.kv_bytes_per_token(dtype_bytes=1) == per_token / 2


def test_kv_bytes_mla_caches_the_latent_once():
    shape = describe("config/models/glm-4.7-flash")
    assert shape.kv_bytes_per_token() == 47 * (512 + 64) * 2


def test_kv_bytes_sliding_layers_stop_at_the_window():
    shape = describe("config/models/gemma-4-26b-a4b")
    full = 5 * 2 * 2 * 512   # full layers: 2 kv heads (k = v) of 512, stored as K and V
    sliding = 25 * 2 * 8 * 256
    assert shape.kv_bytes_per_token() == full * 2
    assert shape.kv_bytes(100) == (full + sliding) * 100 * 2
    assert shape.kv_bytes(4096) == (full * 4096 + sliding * 1024) * 2
    assert shape.kv_bytes_per_token(context_len=4096) == shape.kv_bytes(4096) / 4096


def test_kv_bytes_linear_attention_is_a_constant_state():
    shape = describe("config/models/qwen3.6-35b-a3b")
    full = 10 * 2 * 2 * 256 * 2
    conv_dim = 2 * 16 * 128 + 32 * 128
    state = 30 * (32 * 128 * 128 + conv_dim * 3) * 2
    assert shape.kv_bytes_per_token() == full
    assert shape.kv_bytes(1) == full + state
    assert shape.kv_bytes(2000) - shape.kv_bytes(1000) == 1000 * full


# ---------------------------------------------------------------------------------------- drafters


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_drafter_kind_and_block(name):
    kind, block, target = DRAFTERS[name]
    d = describe_drafter(MODELS / name)
    assert (d.kind, d.block_size) == (kind, block)
    assert d.hidden_size == describe(MODELS / target).hidden_size  # heads and block drafters work at the target's width
    assert d.params > 0


def test_dflash_drafter_counts():
    # z-lab Qwen3-8B-DFlash-b16: 5 Qwen3 layers + fc over 5 target layers; embed and lm_head are the target's.
    H, I, q, kv, hd, V = 4096, 12288, 32, 8, 128, 151936
    layer = H * q * hd + 2 * H * kv * hd + q * hd * H + 2 * hd + 3 * H * I + 2 * H
    d = describe_drafter("config/models/qwen3-8b-dflash")
    assert d.target_layer_ids == (1, 9, 17, 25, 33)
    assert d.params == 5 * layer + 5 * H * H + 2 * H
    assert d.params_shareable == 2 * V * H


def test_eagle3_head_has_its_own_reduced_vocab_head():
    # thoughtworks/GLM-4.7-Flash-Eagle3 is published at 291 MB in bf16.
    d = describe_drafter("config/models/glm-4.7-flash-eagle3")
    assert d.draft_vocab_size == 32000
    assert d.weight_bytes() / 1e6 == pytest.approx(291, abs=1)


def test_qwen36_eagle3_head_is_the_targets_attention_at_the_community_heads_size():
    """Reconstructed (config/models/README.md): the target's attention shape and vocabulary, and 0.654 B with the
    shared embedding, the "0.7 B" a public community head for Qwen3.6-35B-A3B reports."""
    text = json.loads((MODELS / "qwen3.6-35b-a3b" / "config.json").read_text())["text_config"]
    head = json.loads((MODELS / "qwen3.6-35b-a3b-eagle3" / "config.json").read_text())
    for key in ("hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "eos_token_id"):
        assert head[key] == text[key], key
    assert head["rope_theta"] == text["rope_parameters"]["rope_theta"]
    d = describe_drafter(MODELS / "qwen3.6-35b-a3b-eagle3")
    assert d.draft_vocab_size == 32000 and d.num_layers == 1
    assert (d.params + d.params_shareable) / 1e9 == pytest.approx(0.654, abs=0.001)
    assert support.eagle3_target_supported("vllm", describe(MODELS / "qwen3.6-35b-a3b").architecture)[0]
    # SGLang 0.5.17 registers the hook but its Qwen3.5 model never hands the head its hidden states (2026-12-04e)
    ok, reason = support.eagle3_target_supported("sglang", describe(MODELS / "qwen3.6-35b-a3b").architecture)
    assert not ok and "_is_layer_to_capture" in reason


def test_target_with_mtp_layers_is_its_own_mtp_drafter():
    d = describe_drafter("config/models/mimo-7b")
    assert d.kind == "mtp" and d.num_layers == 1
    assert d.params == describe("config/models/mimo-7b").params_mtp


def test_dspark_drafter_without_markov_rank(tmp_path):
    raw = json.loads((MODELS / "qwen3-8b-dspark" / "config.json").read_text())
    del raw["markov_rank"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelShapeError) as info:
        describe_drafter(tmp_path)
    assert info.value.field == "markov_rank" and str(tmp_path) in str(info.value)


# ---------------------------------------------------------------------------------- missing fields


@pytest.mark.parametrize("name, field", [
    ("qwen3-8b", "hidden_size"),
    ("qwen3-8b", "num_hidden_layers"),
    ("qwen3-8b", "vocab_size"),
    ("qwen3-30b-a3b", "moe_intermediate_size"),
    ("glm-4.7-flash", "qk_rope_head_dim"),
    ("qwen3.6-35b-a3b", "linear_num_value_heads"),
    ("gemma-4-26b-a4b", "sliding_window"),
])
def test_missing_field_names_field_and_file(tmp_path, name, field):
    raw = json.loads((MODELS / name / "config.json").read_text())
    holder = raw.get("text_config", raw) if field in raw.get("text_config", {}) else raw
    del holder[field]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelShapeError) as info:
        describe(tmp_path)
    assert info.value.field == field
    assert str(tmp_path / "config.json") in str(info.value)


def test_no_config_json(tmp_path):
    with pytest.raises(ModelShapeError, match="config.json"):
        describe(tmp_path)


def test_no_architectures(tmp_path):
    raw = json.loads((MODELS / "qwen3-8b" / "config.json").read_text())
    del raw["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelShapeError) as info:
        describe(tmp_path)
    assert info.value.field == "architectures"


# ------------------------------------------------------------------------------------ engine support


def test_supported_registered_and_not():
    ok, reason = support.supported("vllm", "Qwen3ForCausalLM")
    assert ok and "vllm 0.26.0" in reason
    ok, reason = support.supported("vllm", "Qwen3_5MoeForCausalLM")  # 0.26.0 has only the multimodal wrapper
    assert not ok and "does not register" in reason and "Qwen3_5MoeForCausalLM" in reason
    ok, reason = support.supported("sglang", "MiMoMTPModel")  # vLLM's MTP class name; SGLang names it MiMoMTP
    assert not ok and "sglang 0.5.17" in reason
    ok, reason = support.supported("tgi", "Qwen3ForCausalLM")
    assert not ok and "unknown engine" in reason


def test_eagle3_targets():
    assert support.eagle3_target_supported("vllm", "Qwen3ForCausalLM")[0]
    ok, reason = support.eagle3_target_supported("vllm", "Glm4MoeLiteForCausalLM")
    assert not ok and "SupportsEagle3" in reason
    assert support.eagle3_target_supported("sglang", "Glm4MoeLiteForCausalLM")[0]
    assert not support.eagle3_target_supported("sglang", "MiMoForCausalLM")[0]


@pytest.mark.parametrize("name", sorted(set(TARGET_FAMILIES) | set(DRAFTERS)))
def test_every_shipped_architecture_is_registered_by_vllm_026(name):
    raw = json.loads((MODELS / name / "config.json").read_text())
    ok, reason = support.supported("vllm", raw["architectures"][0])
    assert ok, reason


# The bundle's wheels: under the repo's .bundle/ (a worktree can point elsewhere with SPECJOULE_BUNDLE_DIR).
BUNDLE = Path(os.environ.get("SPECJOULE_BUNDLE_DIR", REPO / ".bundle"))
VLLM_WHEEL = BUNDLE / "specjoule-bundle" / "wheels" / "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl"
SGLANG_WHEEL = BUNDLE / "sglang" / "specjoule-bundle" / "wheels" / "sglang-0.5.17-cp312-cp312-manylinux_2_34_x86_64.whl"


@pytest.mark.skipif(not (VLLM_WHEEL.exists() and SGLANG_WHEEL.exists()), reason="engine wheels not unpacked here")
def test_support_table_is_what_the_wheels_register(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("extract_support", REPO / "tools" / "extract_support.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    vllm, sglang = tool.vllm_architectures(VLLM_WHEEL), tool.sglang_architectures(SGLANG_WHEEL)
    assert vllm == support.VLLM_ARCHITECTURES
    assert sglang == support.SGLANG_ARCHITECTURES


# ----------------------------------------------------------------------------- parse-time bad input

BASE = {
    "name": "t",
    "device": "cuda",
    "engines": ["vllm"],
    "models": {"q": {"target": {"model": "config/models/qwen3-8b", "load_format": "dummy"}}},
    "schemes": {
        "baseline": {"method": "baseline"},
        "eagle": {"method": "eagle3", "k": 3, "drafter": "config/models/qwen3-8b-eagle3"},
    },
    "batch_sizes": [1],
    "workloads": {"closed": {"kind": "closed_batch"}},
}


def validate_error(cfg) -> config.ConfigError:
    with pytest.raises(config.ConfigError) as info:
        config.validate(cfg)
    return info.value


def test_base_with_local_dirs_is_valid():
    config.validate(BASE)


def test_hub_ids_pass_through():
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"] = {"model": "Qwen/Qwen3-8B"}
    cfg["schemes"]["eagle"]["drafter"] = "AngelSlim/Qwen3-8B_eagle3"
    config.validate(cfg)


@pytest.mark.parametrize("value", ["config/models/qwen3-8", "qwen3-8b", "./Qwen/Qwen3-8B", "/nonexistent/dir"])
def test_missing_local_target(value):
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"]["model"] = value
    err = validate_error(cfg)
    assert err.key == "models.q.target.model"
    assert "no such local model directory" in str(err) and value in str(err)


def test_missing_local_draft_model():
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["draft"] = {"model": "config/models/nope", "load_format": "dummy"}
    err = validate_error(cfg)
    assert err.key == "models.q.draft.model" and "config/models/nope" in str(err)


def test_local_dir_without_config_json(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"]["model"] = str(tmp_path)
    err = validate_error(cfg)
    assert err.key == "models.q.target.model" and "has no config.json" in str(err)


def test_shape_only_dir_without_dummy_load_format():
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"]["load_format"] = "auto"
    err = validate_error(cfg)
    assert err.key == "models.q.target.model"
    assert "no weights" in str(err) and "load_format" in str(err)


def test_dir_with_weights_and_auto_load_format(tmp_path):
    shutil.copy(MODELS / "qwen3-8b" / "config.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"] = {"model": str(tmp_path), "load_format": "auto"}
    cfg["schemes"]["eagle"]["drafter"] = "AngelSlim/Qwen3-8B_eagle3"
    config.validate(cfg)


def test_mtp_on_a_target_without_mtp_layers():
    """Without a drafter of its own, mtp drafts with the target's MTP layers (specjoule.schemes): Qwen3-8B has none."""
    cfg = copy.deepcopy(BASE)
    cfg["schemes"]["mtp"] = {"method": "mtp", "k": 1}
    err = validate_error(cfg)
    assert err.key == "models.q.target.model"
    assert "config/models/qwen3-8b" in str(err) and "declares none" in str(err)


def test_mtp_on_a_target_with_mtp_layers():
    cfg = copy.deepcopy(BASE)
    cfg["models"]["q"]["target"]["model"] = "config/models/mimo-7b"
    cfg["schemes"] = {"baseline": {"method": "baseline"},
                      "mtp": {"method": "mtp", "k": 1, "drafter": "config/models/mimo-7b"}}
    config.validate(cfg)


@pytest.mark.parametrize("method, drafter, named", [
    ("eagle3", "config/models/qwen3-8b-dflash", "dflash"),
    ("dflash", "config/models/qwen3-8b-eagle3", "eagle3"),
    ("dspark", "config/models/qwen3-8b-dflash", "dflash"),
    ("dflash", "config/models/qwen3-8b-dspark", "dspark"),
    ("eagle3", "config/models/qwen3-8b", "draft_model"),
])
def test_drafter_of_the_wrong_kind(method, drafter, named):
    cfg = copy.deepcopy(BASE)
    cfg["schemes"]["x"] = {"method": method, "k": 3, "drafter": drafter}
    err = validate_error(cfg)
    assert err.key == "schemes.x.drafter"
    assert f"a {named} model, not a {method} drafter" in str(err)


def test_missing_drafter_dir():
    cfg = copy.deepcopy(BASE)
    cfg["schemes"]["eagle"]["drafter"] = "config/models/qwen3-8b-eagle"
    err = validate_error(cfg)
    assert err.key == "schemes.eagle.drafter" and "no such local model directory" in str(err)


def test_classify_model_ref():
    assert models.classify_model_ref("Qwen/Qwen3-8B") == ("hub", None)
    assert models.classify_model_ref("config/models/qwen3-8b")[0] == "local"
    assert models.classify_model_ref("a/b/c")[0] == "missing"
    assert models.classify_model_ref("/abs/x")[0] == "missing"
    assert models.classify_model_ref("name")[0] == "missing"


def test_local_shape_for_records():
    assert models.local_shape("Qwen/Qwen3-8B") is None
    assert models.local_shape("config/models/glm-4.7-flash").family == "mla"
    with pytest.raises(ModelShapeError):
        models.local_shape("config/models/not-there")
