"""Model shapes read from a local ``config.json``: attention family, MoE, parameter and KV-cache counts.

``describe(dir)`` gives a target's :class:`ModelShape`; ``describe_drafter(dir)`` a drafter's
:class:`DrafterShape`; ``check_models(config)`` is the parse-time check of the ``models`` and ``schemes``
sections that can be known without an engine (called from ``config._check_semantics``).

Counting conventions (the roofline of issue 18 builds on these names; keep them):

- ``params_total`` counts the tensors of the published checkpoint's main model: embeddings, every decoder
  layer, final norm, and the lm_head unless ``tie_word_embeddings``. Norm weights and biases are counted
  where the architecture has them. MTP layers the target carries are *not* in ``params_total``; they are
  ``params_mtp`` (a method-``mtp`` engine loads them as its drafter).
- ``params_active`` is what one token touches: everything dense plus, per MoE layer, the router, the top-k
  routed experts and the shared expert(s). Embedding and lm_head are included (as Qwen's "A3B" counts them).
- ``kv_bytes(context_len)`` is what one sequence of that many tokens stores in the target's cache:
  full-attention layers ``2 × kv_heads × head_dim`` per token (MLA: the latent ``kv_lora_rank +
  qk_rope_head_dim``, one copy, as vLLM's MLA backends cache it); sliding-window layers the same per token
  but at most ``sliding_window`` tokens; Gated-DeltaNet (linear-attention) layers a constant recurrent
  state plus convolution state, whatever the length. ``kv_bytes_per_token(context_len=None)`` is the
  marginal cost of one more token of long context (full-attention layers only, because sliding and linear
  layers stop growing); with a ``context_len`` it is the mean ``kv_bytes(context_len) / context_len``.

A field these counts need that the config lacks raises :class:`ModelShapeError` naming the field and the
file: a shape is never silently zero.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specjoule.schemes import read_model_config

REPO_ROOT = Path(__file__).resolve().parents[1]

FAMILIES = ("gqa", "gqa_sliding", "mla", "gated_deltanet", "mha", "other")
DRAFTER_KINDS = ("eagle3", "dflash", "dspark", "eagle", "mtp", "draft_model")

# Keys a config uses for its MTP layer count (DeepSeek/GLM/MiMo, Qwen3.5/Next, gemma-4 assistant, ...).
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "mtp_num_layers")


class ModelShapeError(ValueError):
    """A config.json lacks (or has a malformed) field the shape counts need."""

    def __init__(self, field_name: str, path: str | Path, reason: str = "missing"):
        self.field = field_name
        self.path = str(path)
        super().__init__(f"{self.path}: field {field_name!r} {reason}")


@dataclass(frozen=True)
class ModelShape:
    path: str
    architecture: str
    model_type: str
    family: str
    moe: bool
    num_layers: int
    hidden_size: int
    intermediate_size: int | None
    vocab_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int | None
    experts_per_token: int | None
    moe_intermediate_size: int | None
    shared_expert_intermediate_size: int | None
    sliding_window: int | None
    sliding_layers: int
    kv_lora_rank: int | None
    q_lora_rank: int | None
    qk_rope_head_dim: int | None
    qk_nope_head_dim: int | None
    v_head_dim: int | None
    linear_attention_layers: int
    mtp_layers: int
    tie_word_embeddings: bool
    params_total: int
    params_active: int
    params_mtp: int = 0
    # Full-attention layers of gemma-4 use their own head size and KV-head count (global_head_dim,
    # num_global_key_value_heads with attention_k_eq_v); elsewhere these equal head_dim / num_kv_heads.
    full_attention_head_dim: int | None = None
    full_attention_kv_heads: int | None = None
    # Gated-DeltaNet recurrent + conv state of one linear-attention layer, in elements (not bytes).
    linear_state_elements_per_layer: int = 0

    @property
    def full_attention_layers(self) -> int:
        return self.num_layers - self.sliding_layers - self.linear_attention_layers

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        return self.params_total * dtype_bytes

    def active_weight_bytes(self, dtype_bytes: int = 2) -> int:
        return self.params_active * dtype_bytes

    def _kv_elements_per_token_per_layer(self, full: bool) -> int:
        if self.family == "mla":
            return int(self.kv_lora_rank) + int(self.qk_rope_head_dim)
        if full and self.full_attention_head_dim is not None:
            return 2 * int(self.full_attention_kv_heads) * int(self.full_attention_head_dim)
        return 2 * self.num_kv_heads * self.head_dim

    def kv_bytes(self, context_len: int, dtype_bytes: int = 2) -> int:
        """Cache bytes one sequence of ``context_len`` tokens holds (see the module docstring)."""
        full = self.full_attention_layers * self._kv_elements_per_token_per_layer(True) * context_len
        window = min(context_len, self.sliding_window or 0)
        sliding = self.sliding_layers * self._kv_elements_per_token_per_layer(False) * window
        linear = self.linear_attention_layers * self.linear_state_elements_per_layer
        return (full + sliding + linear) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2, context_len: int | None = None) -> float:
        """Marginal bytes per extra token of long context (context_len None), else the mean at that length."""
        if context_len is None:
            return self.full_attention_layers * self._kv_elements_per_token_per_layer(True) * dtype_bytes
        if context_len <= 0:
            raise ValueError(f"context_len must be positive, got {context_len}")
        return self.kv_bytes(context_len, dtype_bytes) / context_len


@dataclass(frozen=True)
class DrafterShape:
    path: str
    kind: str
    architecture: str
    block_size: int | None
    target_layer_ids: tuple[int, ...] | None
    num_layers: int
    hidden_size: int
    draft_vocab_size: int | None
    params: int
    # Embedding and full-vocabulary lm_head tensors the engine shares with the target when their shapes
    # match (vLLM 0.26.0 spec_decode/{eagle,dflash}/utils.py); a published checkpoint may still store them.
    params_shareable: int = 0
    # What one drafter pass reads and multiplies (the roofline of issue 18, ADR 0176). The part of
    # params_shareable that is the target's full-vocabulary lm_head, read whole every pass (0 with a head of
    # its own); the rest of params_shareable is the embedding, of which a pass reads only its tokens' rows.
    shared_lm_head_params: int = 0
    # Tensors in ``params`` read only by row (DSpark's markov_w1 token table): not a matmul, not read whole.
    lookup_params: int = 0
    # Tensors in ``params`` applied once per round to the target's hidden states, not on every pass
    # (EAGLE3's fc over the auxiliary layers; vLLM 0.26.0 combine_hidden_states before the first step).
    params_once_per_round: int = 0
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None

    def kv_bytes(self, context_len: int, dtype_bytes: int = 2) -> int:
        """Cache bytes one sequence of ``context_len`` tokens holds in the drafter's own layers."""
        if self.num_kv_heads is None or self.head_dim is None:
            raise ModelShapeError("num_key_value_heads/head_dim", self.path, "unknown for this drafter")
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * context_len * dtype_bytes

    def weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes the drafter adds beyond the target (its own tensors, not the shareable ones)."""
        return self.params * dtype_bytes


# ----------------------------------------------------------------------------------------------- reading


def resolve_model_dir(model: str | Path) -> Path:
    """A local model dir: absolute, else relative to the cwd, else relative to the repo."""
    p = Path(model)
    if p.is_absolute():
        return p
    if p.exists():
        return p.resolve()
    return REPO_ROOT / p


def read_config(model: str | Path) -> tuple[dict, Path]:
    path = resolve_model_dir(model) / "config.json"
    if not path.is_file():
        raise ModelShapeError("config.json", path.parent, "not found (no config.json in the model dir)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ModelShapeError("config.json", path, f"is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ModelShapeError("config.json", path, "is not a JSON object")
    return raw, path


class _Fields:
    """Reads fields from a text config with the file named in every error."""

    def __init__(self, cfg: dict, path: Path):
        self.cfg, self.path = cfg, path

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, *alternatives: str) -> int:
        for k in (key, *alternatives):
            v = self.cfg.get(k)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise ModelShapeError(k, self.path, f"must be a non-negative integer, got {v!r}")
                return v
        names = " / ".join(repr(k) for k in (key, *alternatives))
        raise ModelShapeError(key, self.path, f"missing (looked for {names})")

    def opt_int(self, key: str, *alternatives: str) -> int | None:
        return self.int(key, *alternatives) if any(self.has(k) for k in (key, *alternatives)) else None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.cfg.get(key)
        return default if v is None else v


def _text_config(raw: dict) -> dict:
    """The language-model config: nested ``text_config`` (multimodal wrappers) merged over the top level."""
    text = raw.get("text_config")
    if isinstance(text, dict):
        merged = {k: v for k, v in raw.items() if k != "text_config"}
        merged.update(text)
        return merged
    return raw


def _architecture(raw: dict, path: Path) -> str:
    archs = raw.get("architectures")
    if not archs or not isinstance(archs, list) or not isinstance(archs[0], str):
        raise ModelShapeError("architectures", path, "missing (a list naming the model class)")
    return archs[0]


def mtp_layer_count(cfg: dict) -> int:
    text = _text_config(cfg)
    for key in _MTP_KEYS:
        for source in (text, cfg):
            v = source.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return 0


# ----------------------------------------------------------------------------------------------- targets


def describe(model: str | Path) -> ModelShape:
    raw, path = read_config(model)
    arch = _architecture(raw, path)
    cfg = _text_config(raw)
    f = _Fields(cfg, path)
    model_type = str(f.get("model_type", raw.get("model_type", "")))
    if f.has("kv_lora_rank"):
        return _describe_mla(f, path, arch, model_type)
    if _declares_gated_deltanet(cfg):
        return _describe_gated_deltanet(f, path, arch, model_type)
    return _describe_gqa(f, path, arch, model_type)


def _declares_gated_deltanet(text: dict) -> bool:
    """Whether a (text) config has Gated-DeltaNet layers: Qwen3.5/3.6 list ``linear_attention`` in ``layer_types``,
    Qwen3-Next declares only ``full_attention_interval`` beside its ``linear_*`` head counts."""
    return "linear_attention" in (text.get("layer_types") or []) or text.get("linear_num_value_heads") is not None


def _common(f: _Fields) -> dict:
    return dict(
        num_layers=f.int("num_hidden_layers"),
        hidden_size=f.int("hidden_size"),
        vocab_size=f.int("vocab_size"),
        num_attention_heads=f.int("num_attention_heads"),
        tie_word_embeddings=bool(f.get("tie_word_embeddings", False)),
    )


def _embedding_params(c: dict) -> int:
    embed = c["vocab_size"] * c["hidden_size"]
    return embed + (0 if c["tie_word_embeddings"] else embed)


def _has_qkv_bias(f: _Fields, model_type: str) -> bool:
    # Qwen2 (and MiMo, which is Qwen2 with MTP) always put a bias on q/k/v; others say attention_bias.
    return model_type in ("qwen2", "qwen2_moe", "mimo") or bool(f.get("attention_bias", False))


def _gqa_attention_params(
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    *,
    bias: bool,
    qk_norm: bool,
    k_eq_v: bool = False,
    q_gate: bool = False,
) -> int:
    q = hidden * heads * head_dim * (2 if q_gate else 1)
    kv = hidden * kv_heads * head_dim * (1 if k_eq_v else 2)
    o = heads * head_dim * hidden
    b = (heads * head_dim + kv_heads * head_dim * (1 if k_eq_v else 2)) if bias else 0
    return q + kv + o + b + (2 * head_dim if qk_norm else 0)


def _mlp_params(hidden: int, intermediate: int) -> int:
    return 3 * hidden * intermediate  # gate, up, down (SwiGLU / GeGLU)


def _sliding_layers(f: _Fields, num_layers: int) -> tuple[int | None, int]:
    layer_types = f.get("layer_types") or []
    window = f.opt_int("sliding_window")
    if layer_types:
        n = sum(t == "sliding_attention" for t in layer_types)
        if n and window is None:
            raise ModelShapeError("sliding_window", f.path, "missing (layer_types names sliding_attention layers)")
        return (window if n else None), n
    if f.get("use_sliding_window", False) and window:
        # Qwen2-style: layers from max_window_layers on use the window.
        first = f.int("max_window_layers")
        return window, max(0, num_layers - first)
    return None, 0


def _describe_gqa(f: _Fields, path: Path, arch: str, model_type: str) -> ModelShape:
    c = _common(f)
    H, L, nh = c["hidden_size"], c["num_layers"], c["num_attention_heads"]
    kvh = f.int("num_key_value_heads") if f.has("num_key_value_heads") else nh
    hd = f.int("head_dim") if f.has("head_dim") else H // nh
    window, n_sliding = _sliding_layers(f, L)
    layer_types = f.get("layer_types") or ["full_attention"] * L
    is_gemma4 = model_type.startswith("gemma4")
    qk_norm = model_type.startswith(("qwen3", "gemma3", "gemma4", "olmo2"))
    bias = _has_qkv_bias(f, model_type)

    full_hd = f.int("global_head_dim") if is_gemma4 and f.has("global_head_dim") else None
    k_eq_v = is_gemma4 and bool(f.get("attention_k_eq_v", False))
    full_kvh = (
        (f.int("num_global_key_value_heads") if k_eq_v and f.has("num_global_key_value_heads") else kvh)
        if is_gemma4
        else None
    )

    num_experts = f.opt_int("num_experts", "n_routed_experts", "num_local_experts")
    moe = bool(num_experts) and (not is_gemma4 or bool(f.get("enable_moe_block", False)))
    topk = f.int("num_experts_per_tok", "top_k_experts") if moe else None
    moe_i = f.int("moe_intermediate_size", "expert_intermediate_size") if moe else None
    shared_i = f.opt_int("shared_expert_intermediate_size") if moe else None
    dense_i = (
        f.int("intermediate_size")
        if (not moe or is_gemma4 or f.get("mlp_only_layers"))
        else f.opt_int("intermediate_size")
    )
    mlp_only = set(f.get("mlp_only_layers") or [])
    sparse_step = f.get("decoder_sparse_step", 1) or 1

    total = active = _embedding_params(c) + H  # embeddings (+ lm_head) + final norm
    for i in range(L):
        full = layer_types[i] != "sliding_attention"
        a_hd = full_hd if (full and full_hd) else hd
        a_kvh = full_kvh if (full and full_kvh is not None) else kvh
        attn = _gqa_attention_params(H, nh, a_kvh, a_hd, bias=bias, qk_norm=qk_norm, k_eq_v=(full and k_eq_v))
        norms = (4 if is_gemma4 else 2) * H
        layer_total = layer_active = attn + norms
        is_moe_layer = moe and i not in mlp_only and (i + 1) % sparse_step == 0
        if is_gemma4:
            # gemma-4 runs a dense GeGLU MLP *and*, with enable_moe_block, an expert block in every layer.
            layer_total += _mlp_params(H, dense_i)
            layer_active += _mlp_params(H, dense_i)
            if moe:
                router = H * num_experts + H + num_experts  # proj, scale, per-expert scale
                extra_norms = 3 * H
                layer_total += router + extra_norms + num_experts * _mlp_params(H, moe_i)
                layer_active += router + extra_norms + topk * _mlp_params(H, moe_i)
            layer_total += 1  # layer_scalar
            layer_active += 1
        elif is_moe_layer:
            router = H * num_experts
            shared = (_mlp_params(H, shared_i) + H) if shared_i else 0  # shared expert + its gate
            layer_total += router + shared + num_experts * _mlp_params(H, moe_i)
            layer_active += router + shared + topk * _mlp_params(H, moe_i)
        else:
            layer_total += _mlp_params(H, dense_i)
            layer_active += _mlp_params(H, dense_i)
        total += layer_total
        active += layer_active
    ple = f.opt_int("hidden_size_per_layer_input") if is_gemma4 else None
    if ple:
        ple_vocab = f.int("vocab_size_per_layer_input")
        extra = ple_vocab * L * ple + H * L * ple + L * ple + L * (2 * H * ple + H)
        total += extra
        active += extra

    n_mtp = mtp_layer_count(f.cfg)
    # A MiMo/Qwen2-style MTP layer: one decoder layer (dense) + eh_proj (2H -> H) + 3 norms.
    mtp = (
        n_mtp
        * (
            _gqa_attention_params(H, nh, kvh, hd, bias=bias, qk_norm=qk_norm)
            + 2 * H
            + _mlp_params(H, dense_i or 0)
            + 2 * H * H
            + 3 * H
        )
        if n_mtp
        else 0
    )

    family = "gqa_sliding" if n_sliding else ("mha" if kvh == nh else "gqa")
    return ModelShape(
        path=str(path.parent),
        architecture=arch,
        model_type=model_type,
        family=family,
        moe=moe,
        intermediate_size=dense_i,
        num_kv_heads=kvh,
        head_dim=hd,
        num_experts=num_experts if moe else None,
        experts_per_token=topk,
        moe_intermediate_size=moe_i,
        shared_expert_intermediate_size=shared_i,
        sliding_window=window,
        sliding_layers=n_sliding,
        kv_lora_rank=None,
        q_lora_rank=None,
        qk_rope_head_dim=None,
        qk_nope_head_dim=None,
        v_head_dim=None,
        linear_attention_layers=0,
        mtp_layers=n_mtp,
        params_total=total,
        params_active=active,
        params_mtp=mtp,
        full_attention_head_dim=full_hd,
        full_attention_kv_heads=full_kvh,
        **c,
    )


def _describe_mla(f: _Fields, path: Path, arch: str, model_type: str) -> ModelShape:
    c = _common(f)
    H, L, nh = c["hidden_size"], c["num_layers"], c["num_attention_heads"]
    kvr, qr = f.int("kv_lora_rank"), f.opt_int("q_lora_rank")
    rope, nope, vhd = f.int("qk_rope_head_dim"), f.int("qk_nope_head_dim"), f.int("v_head_dim")
    qk = rope + nope
    q = (H * qr + qr + qr * nh * qk) if qr else H * nh * qk
    attn = q + H * (kvr + rope) + kvr + kvr * nh * (nope + vhd) + nh * vhd * H
    num_experts = f.opt_int("n_routed_experts", "num_experts")
    moe = bool(num_experts)
    dense_i = f.int("intermediate_size")
    topk = f.int("num_experts_per_tok") if moe else None
    moe_i = f.int("moe_intermediate_size") if moe else None
    n_shared = f.get("n_shared_experts", 0) or 0
    shared_i = n_shared * moe_i if moe and n_shared else None
    first_dense = f.get("first_k_dense_replace", 0) or 0
    freq = f.get("moe_layer_freq", 1) or 1

    def layer(i: int) -> tuple[int, int]:
        base = attn + 2 * H
        if moe and i >= first_dense and i % freq == 0:
            router = H * num_experts + (num_experts if f.get("topk_method") == "noaux_tc" else 0)
            shared = _mlp_params(H, shared_i) if shared_i else 0
            return (
                base + router + shared + num_experts * _mlp_params(H, moe_i),
                base + router + shared + topk * _mlp_params(H, moe_i),
            )
        return base + _mlp_params(H, dense_i), base + _mlp_params(H, dense_i)

    total = active = _embedding_params(c) + H
    for i in range(L):
        t, a = layer(i)
        total, active = total + t, active + a
    n_mtp = mtp_layer_count(f.cfg)
    # DeepSeek-style MTP layer: enorm, hnorm, eh_proj (2H -> H), one (MoE) decoder layer, shared_head.norm.
    mtp = n_mtp * (layer(L)[0] + 2 * H * H + 3 * H) if n_mtp else 0
    return ModelShape(
        path=str(path.parent),
        architecture=arch,
        model_type=model_type,
        family="mla",
        moe=moe,
        intermediate_size=dense_i,
        num_kv_heads=f.opt_int("num_key_value_heads") or nh,
        head_dim=qk,
        num_experts=num_experts,
        experts_per_token=topk,
        moe_intermediate_size=moe_i,
        shared_expert_intermediate_size=shared_i,
        sliding_window=None,
        sliding_layers=0,
        kv_lora_rank=kvr,
        q_lora_rank=qr,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
        v_head_dim=vhd,
        linear_attention_layers=0,
        mtp_layers=n_mtp,
        params_total=total,
        params_active=active,
        params_mtp=mtp,
        **c,
    )


def _describe_gated_deltanet(f: _Fields, path: Path, arch: str, model_type: str) -> ModelShape:
    c = _common(f)
    H, L, nh = c["hidden_size"], c["num_layers"], c["num_attention_heads"]
    kvh, hd = f.int("num_key_value_heads"), f.int("head_dim")
    layer_types = f.get("layer_types")
    if not layer_types:
        interval = f.int("full_attention_interval")
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L)]
    if len(layer_types) != L:
        raise ModelShapeError("layer_types", path, f"has {len(layer_types)} entries for {L} layers")
    n_linear = sum(t == "linear_attention" for t in layer_types)
    nk, nv = f.int("linear_num_key_heads"), f.int("linear_num_value_heads")
    dk, dv = f.int("linear_key_head_dim"), f.int("linear_value_head_dim")
    kernel = f.int("linear_conv_kernel_dim")
    conv_dim = 2 * nk * dk + nv * dv
    # in_proj_qkvz + in_proj_ba + conv1d + dt_bias + A_log + gated RMSNorm + out_proj
    linear = H * (conv_dim + nv * dv) + H * 2 * nv + conv_dim * kernel + 2 * nv + dv + nv * dv * H
    # Qwen3-Next / 3.5 full attention: q_proj carries an output gate (2x), q/k norms.
    full = _gqa_attention_params(H, nh, kvh, hd, bias=bool(f.get("attention_bias", False)), qk_norm=True, q_gate=True)
    num_experts = f.opt_int("num_experts")
    moe = bool(num_experts)
    topk = f.int("num_experts_per_tok") if moe else None
    moe_i = f.int("moe_intermediate_size") if moe else None
    shared_i = f.opt_int("shared_expert_intermediate_size") if moe else None
    dense_i = f.opt_int("intermediate_size") if moe else f.int("intermediate_size")

    def mlp() -> tuple[int, int]:
        if not moe:
            return _mlp_params(H, dense_i), _mlp_params(H, dense_i)
        router = H * num_experts
        shared = (_mlp_params(H, shared_i) + H) if shared_i else 0
        return (router + shared + num_experts * _mlp_params(H, moe_i), router + shared + topk * _mlp_params(H, moe_i))

    m_total, m_active = mlp()
    total = active = _embedding_params(c) + H
    for t in layer_types:
        attn = linear if t == "linear_attention" else full
        total += attn + 2 * H + m_total
        active += attn + 2 * H + m_active
    n_mtp = mtp_layer_count(f.cfg)
    # Qwen3-Next/3.5 MTP: pre_fc_norm_embedding, pre_fc_norm_hidden, fc (2H -> H), full-attention layers, norm.
    mtp = (2 * H + 2 * H * H + n_mtp * (full + 2 * H + m_total) + H) if n_mtp else 0
    state = nv * dk * dv + conv_dim * (kernel - 1)  # recurrent state (per value head dk x dv) + conv window
    return ModelShape(
        path=str(path.parent),
        architecture=arch,
        model_type=model_type,
        family="gated_deltanet",
        moe=moe,
        intermediate_size=dense_i,
        num_kv_heads=kvh,
        head_dim=hd,
        num_experts=num_experts,
        experts_per_token=topk,
        moe_intermediate_size=moe_i,
        shared_expert_intermediate_size=shared_i,
        sliding_window=None,
        sliding_layers=0,
        kv_lora_rank=None,
        q_lora_rank=None,
        qk_rope_head_dim=None,
        qk_nope_head_dim=None,
        v_head_dim=None,
        linear_attention_layers=n_linear,
        mtp_layers=n_mtp,
        params_total=total,
        params_active=active,
        params_mtp=mtp,
        linear_state_elements_per_layer=state,
        **c,
    )


# ---------------------------------------------------------------------------------------------- drafters


def drafter_kind(raw: dict) -> str | None:
    """The scheme a drafter config belongs to, from its architecture; None if it names no drafter kind."""
    archs = [a for a in (raw.get("architectures") or []) if isinstance(a, str)]
    for a in archs:
        low = a.lower()
        if "dspark" in low:
            return "dspark"
        if "dflash" in low:
            return "dflash"
        if "eagle3" in low:
            return "eagle3"
        if "mtp" in low:
            return "mtp"
        if "eagle" in low:
            return "eagle"
    if mtp_layer_count(raw) > 0:
        return "mtp"  # a target carrying MTP layers is its own drafter
    if archs and raw.get("dflash_config") is None:
        return "draft_model"
    return None


def describe_drafter(model: str | Path) -> DrafterShape:
    raw, path = read_config(model)
    arch = _architecture(raw, path)
    kind = drafter_kind(raw)
    if kind is None:
        raise ModelShapeError("architectures", path, f"= {arch!r} names no drafter kind ({', '.join(DRAFTER_KINDS)})")
    if kind == "draft_model":
        s = describe(model)
        return DrafterShape(
            path=s.path,
            kind=kind,
            architecture=arch,
            block_size=None,
            target_layer_ids=None,
            num_layers=s.num_layers,
            hidden_size=s.hidden_size,
            draft_vocab_size=s.vocab_size,
            params=s.params_total,  # a separate model shares nothing with the target
            num_attention_heads=s.num_attention_heads,
            num_kv_heads=s.num_kv_heads,
            head_dim=s.head_dim,
        )
    if kind == "mtp":
        s = describe(model)
        return DrafterShape(
            path=s.path,
            kind=kind,
            architecture=arch,
            block_size=None,
            target_layer_ids=None,
            num_layers=s.mtp_layers,
            hidden_size=s.hidden_size,
            draft_vocab_size=s.vocab_size,
            params=s.params_mtp,
            # The MTP module embeds its input token and scores with the target's embedding and
            # lm_head (vLLM 0.26.0 mimo_mtp.py loads both from the checkpoint: "the shared
            # embedding/head"); a tied checkpoint has one matrix for both.
            params_shareable=(1 if s.tie_word_embeddings else 2) * s.vocab_size * s.hidden_size,
            shared_lm_head_params=s.vocab_size * s.hidden_size,
            num_attention_heads=s.num_attention_heads,
            num_kv_heads=s.num_kv_heads,
            head_dim=s.head_dim,
        )
    cfg = _text_config(raw)
    f = _Fields(cfg, path)
    H, L, V = f.int("hidden_size"), f.int("num_hidden_layers"), f.int("vocab_size")
    nh = f.int("num_attention_heads")
    kvh = f.int("num_key_value_heads") if f.has("num_key_value_heads") else nh
    hd = f.int("head_dim") if f.has("head_dim") else H // nh
    inter = f.int("intermediate_size")
    target_h = f.opt_int("target_hidden_size") or H
    dflash_cfg = f.get("dflash_config") or {}
    eagle_cfg = f.get("eagle_config") or {}
    ids = (
        dflash_cfg.get("target_layer_ids")
        or f.get("target_layer_ids")
        or eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    )
    ids = tuple(int(i) for i in ids) if ids else None
    block = dflash_cfg.get("block_size") or f.get("block_size")
    draft_vocab = f.opt_int("draft_vocab_size") or V
    bias = bool(f.get("attention_bias", False))

    if kind in ("eagle3", "eagle"):
        n_aux = len(ids) if ids else (3 if kind == "eagle3" else 1)
        # EAGLE3: the first layer's q/k/v read [embedding ; hidden] (2H); fc fuses the aux hidden states.
        first_in = 2 * H if kind == "eagle3" else H
        layer0 = first_in * nh * hd + 2 * first_in * kvh * hd + nh * hd * H + _mlp_params(H, inter) + 3 * H
        rest = (L - 1) * (
            _gqa_attention_params(H, nh, kvh, hd, bias=bias, qk_norm=False) + _mlp_params(H, inter) + 2 * H
        )
        fc = (n_aux * target_h * H) if kind == "eagle3" else 2 * H * H
        params = layer0 + rest + fc + H
        once = fc if kind == "eagle3" else 0
        lookup = 0
        block = None
    else:  # dflash / dspark: Qwen3 layers over [context KV ; block]; embed and lm_head are the target's.
        if not ids:
            raise ModelShapeError("dflash_config.target_layer_ids", path, "missing (the fc input is len(ids) x hidden)")
        per_layer = _gqa_attention_params(H, nh, kvh, hd, bias=bias, qk_norm=True) + _mlp_params(H, inter) + 2 * H
        params = L * per_layer + len(ids) * target_h * H + 2 * H  # layers, fc, hidden_norm, norm
        once = 0  # one pass per round: its fc is read once either way
        lookup = 0
        if kind == "dspark":
            rank = f.int("markov_rank")  # required: vLLM 0.26.0's Qwen3 DSpark reads it
            params += V * rank + draft_vocab * rank  # markov_w1 (embed) and markov_w2 (head)
            lookup = V * rank
    # A reduced draft vocabulary has its own lm_head; a full one is the target's (shared). The embedding
    # always has the target's vocabulary.
    own_head = draft_vocab * H if draft_vocab != V else 0
    shareable = V * H + (0 if own_head else V * H)
    return DrafterShape(
        path=str(path.parent),
        kind=kind,
        architecture=arch,
        block_size=int(block) if block else None,
        target_layer_ids=ids,
        num_layers=L,
        hidden_size=H,
        draft_vocab_size=draft_vocab,
        params=params + own_head,
        params_shareable=shareable,
        shared_lm_head_params=0 if own_head else V * H,
        lookup_params=lookup,
        params_once_per_round=once,
        num_attention_heads=nh,
        num_kv_heads=kvh,
        head_dim=hd,
    )


# ------------------------------------------------------------------------------------- parse-time checks

WEIGHT_GLOBS = ("*.safetensors", "*.bin")


def classify_model_ref(value: str) -> tuple[str, Path | None]:
    """``("local", dir)`` for a path that exists (relative to the cwd or the repo, or absolute);
    ``("hub", None)`` for ``org/name`` (exactly one '/', no leading '.' or '/'); else ``("missing", path)``.

    The rule exists because a mistyped local path would otherwise be passed on as a hub id and fail late,
    inside the engine, after a GPU lease."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return ("local", p) if p.exists() else ("missing", p)
    if p.exists():
        return "local", p.resolve()
    if (REPO_ROOT / p).exists():
        return "local", REPO_ROOT / p
    if value.count("/") == 1 and not value.startswith((".", "/", "~")) and all(value.split("/")):
        return "hub", None
    return "missing", REPO_ROOT / p


def local_shape(model: str) -> ModelShape | None:
    """``describe(model)`` for a local dir; None for a hub id (its config is not here to read).
    A missing local path raises ``ModelShapeError`` (check_models has already refused it at parse time)."""
    kind, path = classify_model_ref(model)
    if kind == "hub":
        return None
    if kind == "missing":
        raise ModelShapeError("model", path, "no such local model directory")
    return describe(path)


# Sub-configs that make a checkpoint a multimodal wrapper around its language model (transformers' naming).
MULTIMODAL_SUBCONFIGS = ("vision_config", "audio_config", "video_config")


def is_multimodal_wrapper(model: str) -> bool:
    """Whether a local target's config wraps its language model with another modality's tower (e.g.
    ``Qwen3_5MoeForConditionalGeneration`` with a ``vision_config``). A hub id's config is not here: False.
    Both engine adapters run such a target text-only (vLLM: ADR 0210, SGLang: ADR 0211)."""
    cfg = read_model_config(model)
    return bool(cfg) and any(isinstance(cfg.get(key), dict) for key in MULTIMODAL_SUBCONFIGS)


def has_gated_deltanet_layers(model: str) -> bool:
    """Whether a local target has Gated-DeltaNet (linear-attention) layers, read as ``describe`` reads the family
    (MLA first, as there). vLLM runs their prefill with a kernel it picks per GPU; the vLLM adapter pins it where
    the engine's pick cannot run (ADR 0215). A hub id's config is not here: False."""
    cfg = read_model_config(model)
    if not cfg:
        return False
    text = _text_config(cfg)
    return text.get("kv_lora_rank") is None and _declares_gated_deltanet(text)


# Bytes per element of the dtype names configs and model configs use (crosscheck reads it too).
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "float8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}


def gated_deltanet_attention_block_tokens(model: str, num_speculative_tokens: int, kernel_alignment: int = 16) -> int:
    """The attention block size (tokens) vLLM 0.26.0 gives a Gated-DeltaNet hybrid target without prefix caching:
    the smallest multiple of ``kernel_alignment`` whose attention page holds one layer's recurrent state
    (``platforms/interface.py`` ``update_block_size_for_backend``). The state's convolution part keeps
    ``conv_kernel - 1 + num_speculative_tokens`` positions (``mamba_utils.gated_delta_net_state_shape``), so a
    speculative arm's block is larger than its baseline's: 1,056 tokens against 1,168 for Qwen3.6-35B-A3B with
    DFlash (k = 15), as measured (ADR 0217). A config pins one block size for every arm with
    ``engine_options.vllm.block_size`` at least this value for its largest k. ValueError when the target is not a
    local Gated-DeltaNet hybrid."""
    if num_speculative_tokens < 0:
        raise ValueError(f"num_speculative_tokens must be >= 0, got {num_speculative_tokens}")
    if not has_gated_deltanet_layers(model):
        raise ValueError(f"{model} is not a local Gated-DeltaNet hybrid target")
    text = _text_config(read_model_config(model))
    act = DTYPE_BYTES[str(text.get("dtype") or text.get("torch_dtype") or "bfloat16").replace("torch.", "")]
    ssm = DTYPE_BYTES[str(text.get("mamba_ssm_dtype") or "float32").replace("torch.", "")]
    k_heads, v_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
    k_dim, v_dim = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
    conv_dim = k_dim * k_heads * 2 + v_dim * v_heads
    conv_bytes = conv_dim * (int(text["linear_conv_kernel_dim"]) - 1 + num_speculative_tokens) * act
    state_bytes = v_heads * v_dim * k_dim * ssm
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"]))
    attn_bytes_per_token = 2 * int(text["num_key_value_heads"]) * head_dim * act  # K and V
    step = kernel_alignment * attn_bytes_per_token
    return kernel_alignment * -(-(conv_bytes + state_bytes) // step)


def _has_weights(directory: Path) -> bool:
    return any(any(directory.glob(g)) for g in WEIGHT_GLOBS)


def _local_config(key: str, value: str, load_format: str, error: type) -> dict | None:
    """The parsed config.json of a local model ref; None for a hub id. Raises ``error(key, value, reason)``."""
    kind, path = classify_model_ref(value)
    if kind == "hub":
        return None
    if kind == "missing":
        raise error(
            key,
            value,
            f"no such local model directory ({path}); a local path is relative to the "
            f"working directory or the repo, a hub id has the form org/name",
        )
    if not path.is_dir():
        raise error(key, value, f"{path} is not a directory (a model dir holds config.json)")
    if not (path / "config.json").is_file():
        raise error(key, value, f"{path} has no config.json")
    if load_format != "dummy" and not _has_weights(path):
        raise error(
            key,
            value,
            f"{path} has no weights (*.safetensors / *.bin) and load_format is "
            f"{load_format!r}; shape-only dirs need load_format: dummy",
        )
    try:
        return read_config(path)[0]
    except ModelShapeError as exc:
        raise error(key, value, str(exc)) from None


def tensor_parallel_refusal(raw: dict | None, tp: int) -> str | None:
    """Why an engine cannot shard this model over ``tp`` GPUs, from its config.json (None: no reason seen).

    Both engines split attention heads evenly over the ranks, and KV heads too, or replicate each KV head
    over a whole number of ranks when there are fewer of them than ranks (vLLM 0.26.0 ``ModelConfig.
    verify_with_parallel_config`` and ``get_num_kv_heads``; SGLang 0.5.17 the same): known at parse time."""
    if raw is None or tp <= 1:
        return None
    text = _text_config(raw)
    heads = text.get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        return None  # MLA and other shapes the engines check themselves
    kv = text.get("num_key_value_heads") or heads
    if heads % tp:
        return f"{heads} attention heads do not split evenly over tensor_parallel_size {tp}"
    if (kv % tp) if kv >= tp else (tp % kv):
        return f"{kv} KV heads neither split evenly over nor replicate evenly across tensor_parallel_size {tp}"
    return None


def check_models(config: dict) -> None:
    """Model-dir and drafter checks that can be known at parse time (bad input of issues 16 and 20).

    Errors are the config's ``ConfigError`` (imported here: config imports this module)."""
    from specjoule.config import ConfigError

    targets: dict[str, tuple[str, dict | None]] = {}
    load_formats = []
    for name, pair in config["models"].items():
        for role in ("target", "draft"):
            spec = pair.get(role)
            if not spec:
                continue
            load_format = spec.get("load_format", "auto")
            raw = _local_config(f"models.{name}.{role}.model", spec["model"], load_format, ConfigError)
            tp_reason = tensor_parallel_refusal(raw, int(spec.get("tensor_parallel_size", 1)))
            if tp_reason:
                raise ConfigError(
                    f"models.{name}.{role}.tensor_parallel_size",
                    spec.get("tensor_parallel_size"),
                    f"{spec['model']}: {tp_reason}",
                )
            if role == "target":
                targets[name] = (spec["model"], raw)
                load_formats.append(load_format)
    # A drafter is loaded the way its target is: real weights unless every target is shape-only.
    drafter_format = "dummy" if load_formats and all(f == "dummy" for f in load_formats) else "auto"

    drafters = [
        (f"schemes.{sname}.drafter", scheme["method"], scheme.get("drafter"))
        for sname, scheme in config["schemes"].items()
    ]
    drafters += [
        (f"models.{pname}.drafters.{method}", method, path)
        for pname, pair in config["models"].items()
        for method, path in (pair.get("drafters") or {}).items()
    ]
    for key, method, drafter in drafters:
        # mtp on a target without MTP layers: config._check_scheme_inputs says it (specjoule/schemes.py owns schemes).
        if method not in ("eagle3", "dflash", "dspark", "mtp") or not drafter:
            continue
        raw = _local_config(key, drafter, drafter_format, ConfigError)
        if raw is None:
            continue
        kind = drafter_kind(raw)
        if kind != method:
            archs = raw.get("architectures")
            raise ConfigError(
                key,
                drafter,
                f"its config.json names architectures {archs} — a "
                f"{kind or 'non-drafter'} model, not a {method} drafter",
            )
