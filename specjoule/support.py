"""What each bundled engine can run: ``supported(engine, architecture)`` and the scheme-specific checks.

The registries (which architectures each engine version registers, which targets feed an EAGLE3 head or a DFlash
drafter, SGLang's NEXTN drafts and attention-backend limits) are extracted from the wheels into
``specjoule.support_tables`` by ``tools/extract_support.py``; this module holds what the tool cannot read from a
registry: the engines' defects, each written by hand from the engine's source and an H200 start, and the answers
built from both. An architecture an engine does not register becomes a planned ``unsupported`` record, not a
config error (an engine may still run it through a generic backend, which this project does not measure).
"""

from __future__ import annotations

from specjoule.support_tables import (
    SGLANG_ARCHITECTURES,
    SGLANG_ATTENTION_BACKENDS,
    SGLANG_DFLASH_TARGETS,
    SGLANG_EAGLE3_TARGETS,
    SGLANG_NEXTN_DRAFTS,
    VERSIONS,
    VLLM_ARCHITECTURES,
    VLLM_EAGLE3_TARGETS,
)

# SGLang NEXTN draft classes that do not start under dummy weights (found on the H200, 2026-12-03; hand-written,
# not extracted): the dummy loader calls ``post_load_weights()`` itself (model_loader/loader.py:333-339, "NextN
# subclasses override the method to fill in is_nextn=True"), and these inherit the target's instead, which walks
# ``self.model.start_layer..end_layer``, attributes their NextN module lacks. Real weights load through
# ``load_weights`` and never reach that line.
SGLANG_NEXTN_DUMMY_LOAD_BROKEN: dict[str, str] = {
    "Glm4MoeLiteForCausalLMNextN": (
        "does not override post_load_weights, so the dummy loader runs the target's "
        "(deepseek_common/deepseek_weight_loader.py:494) and start fails with AttributeError: "
        "'Glm4MoeLiteModelNextN' object has no attribute 'start_layer' (H200, 2026-12-03)"
    ),
}

# Model types whose config.json SGLang 0.5.17 cannot start from, written by hand from its source (not extracted)
# and an H200 start. Gemma-4 names its sliding layers' attention shape plainly (num_key_value_heads, head_dim) and
# its full layers' as num_global_key_value_heads / global_head_dim; SGLang wants the opposite (swa_* for sliding)
# and remaps only the published multimodal model types (utils/hf_transformers/config.py:159-186). A text-only
# config (gemma4_text, as config/models/gemma-4-26b-a4b) keeps the HF names, and its hybrid-SWA KV pool reads the
# missing attribute (mem_cache/kv_cache_configurator.py:1259-1263, gated by model_config.py:723-731). The same
# model in its published multimodal form (model_type gemma4, config/models/gemma-4-26b-a4b-mm) is remapped: ADR 0225,
# checked on CPU with SGLang's own config path by tools/check_sglang_config.py.
SGLANG_MODEL_TYPE_BROKEN: dict[str, str] = {
    "gemma4_text": (
        "remaps Gemma-4's sliding/full attention attributes only for model_type gemma4, gemma4_assistant, "
        "gemma4_unified and gemma4_unified_assistant (utils/hf_transformers/config.py:159-186), so a text-only "
        "config reaches the hybrid-SWA KV pool without swa_num_key_value_heads and start fails with "
        "AttributeError: 'Gemma4TextConfig' object has no attribute 'swa_num_key_value_heads' (H200, 2026-12-03b)"
    ),
}

# SGLang EAGLE3 targets that define set_eagle3_layers_to_capture (so they are in SGLANG_EAGLE3_TARGETS) yet cannot
# feed an EAGLE3 head. Hand-written from SGLang 0.5.17's source and an H200 start, not extracted (the tool writes
# only specjoule/support_tables.py, so a regeneration keeps this table and the two above). The Qwen3.5/3.6 wrappers (models/qwen3_5.py:1771, 1928) inherit
# Qwen3VLForConditionalGeneration's set_eagle3_layers_to_capture (models/qwen3_vl.py:1542-1553), which sets
# capture_aux_hidden_states and writes self.model.layers_to_capture; their inner Qwen3_5ForCausalLM collects aux
# hidden states only from decoder layers flagged _is_layer_to_capture (models/qwen3_5.py:1429-1478), which only
# set_dflash_layers_to_capture sets (models/qwen3_5.py:1394-1397). So the inner forward returns a bare tensor and
# the wrapper's unpack (models/qwen3_vl.py:1428) fails in every forward, whatever the load format or CUDA graphs.
# DFlash on the same targets flags the layers and runs (2026-12-03f); vLLM's EAGLE3 on Qwen3.6-35B-A3B ran
# (2026-12-04d), so only SGLang is refused.
_SGLANG_QWEN35_EAGLE3 = (
    "inherits Qwen3VLForConditionalGeneration.set_eagle3_layers_to_capture (models/qwen3_vl.py:1542-1553), which "
    "sets capture_aux_hidden_states but flags no decoder layer _is_layer_to_capture, the only flag Qwen3_5ForCausalLM "
    "collects aux hidden states from (models/qwen3_5.py:1394-1397, 1429-1478; only set_dflash_layers_to_capture "
    "sets it), so the inner forward returns a bare tensor and 'hidden_states, aux_hidden_states = hidden_states' "
    "(models/qwen3_vl.py:1428) fails at start with ValueError: too many values to unpack (expected 2) "
    "(H200, 2026-12-04e); upstream sgl-project/sglang#38307 (open), #25408 (closed)"
)
SGLANG_EAGLE3_TARGET_BROKEN: dict[str, str] = {
    "Qwen3_5ForConditionalGeneration": _SGLANG_QWEN35_EAGLE3,
    "Qwen3_5MoeForConditionalGeneration": _SGLANG_QWEN35_EAGLE3,
}

_TABLES = {"vllm": VLLM_ARCHITECTURES, "sglang": SGLANG_ARCHITECTURES}
_EAGLE3 = {"vllm": VLLM_EAGLE3_TARGETS, "sglang": SGLANG_EAGLE3_TARGETS}


def supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine``'s bundled version registers ``architecture``; the reason in words either way."""
    table = _TABLES.get(engine)
    if table is None:
        return False, f"unknown engine {engine!r}; known: {', '.join(sorted(_TABLES))}"
    where = table.get(architecture)
    version = VERSIONS[engine]
    if where is None:
        return False, f"{engine} {version} does not register architecture {architecture!r} in its model registry"
    return True, f"{engine} {version} registers {architecture!r} ({where})"


def eagle3_target_supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine`` can run an EAGLE3 head on a target of ``architecture`` (aux hidden states)."""
    ok, reason = supported(engine, architecture)
    if not ok:
        return ok, reason
    version = VERSIONS[engine]
    broken = SGLANG_EAGLE3_TARGET_BROKEN.get(architecture) if engine == "sglang" else None
    if broken:
        return False, f"{engine} {version}: EAGLE3 target {architecture!r}: {broken}"
    if architecture in _EAGLE3[engine]:
        return True, f"{engine} {version}: {architecture!r} provides EAGLE3 auxiliary hidden states"
    hook = "implement SupportsEagle3" if engine == "vllm" else "define set_eagle3_layers_to_capture"
    return False, (
        f"{engine} {version}: target {architecture!r} does not {hook}, so it cannot feed an "
        f"EAGLE3 head (vLLM raises 'Model does not support EAGLE3 interface')"
        if engine == "vllm"
        else f"{engine} {version}: target {architecture!r} does not {hook}, so it cannot feed an EAGLE3 head"
    )


def mtp_target_supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine`` can draft with the MTP layers a target of ``architecture`` carries (SGLang: NEXTN).
    vLLM has no table here: whether the target carries MTP layers is checked at parse (specjoule.config)."""
    ok, reason = supported(engine, architecture)
    if not ok:
        return ok, reason
    version = VERSIONS[engine]
    if engine != "sglang":
        return True, f"{engine} {version}: no MTP table; the target's MTP layers are checked at parse"
    draft = SGLANG_NEXTN_DRAFTS.get(architecture)
    if draft is None:
        return False, (
            f"sglang {version} maps no NextN/MTP draft architecture for target {architecture!r} "
            f"(ModelConfig._config_draft_model), so NEXTN would load the whole target as its draft"
        )
    ok, reason = supported(engine, draft)
    if not ok:
        return False, f"sglang {version}: NEXTN draft {draft!r} of target {architecture!r}: {reason}"
    return True, f"sglang {version}: NEXTN drafts for {architecture!r} with {draft!r} ({SGLANG_ARCHITECTURES[draft]})"


def mtp_dummy_load_supported(engine: str, architecture: str, load_format: str) -> tuple[bool, str]:
    """Whether the NEXTN draft of a target of ``architecture`` starts with ``load_format`` (SGLANG_NEXTN_DUMMY_LOAD_BROKEN)."""
    draft = SGLANG_NEXTN_DRAFTS.get(architecture) if engine == "sglang" else None
    broken = SGLANG_NEXTN_DUMMY_LOAD_BROKEN.get(draft or "")
    if broken and load_format == "dummy":
        return (
            False,
            f"sglang {VERSIONS[engine]}: NEXTN draft {draft!r} of target {architecture!r} with load_format dummy: {broken}",
        )
    return True, f"{engine}: no known load_format {load_format!r} defect for the MTP draft of {architecture!r}"


def model_type_supported(engine: str, model_type: str | None) -> tuple[bool, str]:
    """Whether ``engine`` starts from a config.json of ``model_type`` (SGLANG_MODEL_TYPE_BROKEN); vLLM has no table."""
    broken = SGLANG_MODEL_TYPE_BROKEN.get(model_type or "") if engine == "sglang" else None
    if broken:
        return False, f"sglang {VERSIONS[engine]}: config.json model_type {model_type!r}: SGLang {broken}"
    return True, f"{engine}: no known defect for model_type {model_type!r}"


def dflash_target_supported(engine: str, architecture: str) -> tuple[bool, str]:
    """Whether ``engine`` can hand a DFlash drafter the target hidden states it conditions on (SGLang:
    set_dflash_layers_to_capture). vLLM has no table here."""
    ok, reason = supported(engine, architecture)
    if not ok:
        return ok, reason
    version = VERSIONS[engine]
    if engine != "sglang":
        return True, f"{engine} {version}: no DFlash target table"
    if architecture in SGLANG_DFLASH_TARGETS:
        return True, f"sglang {version}: {architecture!r} captures DFlash target hidden states"
    return False, (
        f"sglang {version}: target {architecture!r} does not define set_dflash_layers_to_capture, "
        f"so it cannot feed a DFlash drafter"
    )


def attention_backend_supported(engine: str, architecture: str, options: dict) -> tuple[bool, str]:
    """Whether the engine options' attention backends are ones ``engine`` accepts for ``architecture``: SGLang
    asserts a fixed list for some (Gemma-4) at start. A backend not given is SGLang's own default for the
    architecture, which is in the list."""
    version = VERSIONS.get(engine)
    allowed = SGLANG_ATTENTION_BACKENDS.get(architecture) if engine == "sglang" else None
    if not allowed:
        return True, f"{engine} {version}: no attention backend restriction for {architecture!r}"
    general = options.get("attention_backend")
    chosen = {
        "prefill_attention_backend": options.get("prefill_attention_backend") or general,
        "decode_attention_backend": options.get("decode_attention_backend") or general,
    }
    refused = {key: value for key, value in chosen.items() if value is not None and value not in allowed}
    if not refused:
        return True, f"sglang {version}: {architecture!r} runs on attention backends {', '.join(allowed)}"
    given = ", ".join(f"{key} resolves to {value!r}" for key, value in refused.items())
    return False, (
        f"sglang {version} accepts only {', '.join(allowed)} attention backends for {architecture!r} "
        f"(ServerArgs asserts it at start); engine_options.sglang: {given}"
    )
