"""The drafting schemes, one description each: the single source of truth for config.py and both adapters.

A *scheme* (config ``schemes.<name>.method``) is how a round drafts tokens for the target to verify. What
each one is, what it needs, how many drafter passes a round costs and how many tokens the target verifies
per request per pass, read from the engines' sources (ADR 0075):

============  ==========  =====================================================  ==============  ==============
method        kind        needs                                                  drafter passes  verify width
============  ==========  =====================================================  ==============  ==============
baseline      none        —                                                      0               1
draft_model   draft_model the pair's ``draft`` model                              k               k + 1
eagle3        head_chain  ``drafter`` (an EAGLE3 head dir)                        k               k + 1
mtp           head_chain  MTP layers in the target (or a ``drafter``: gemma-4's   k               k + 1
                          assistant)
dflash        block       ``drafter`` (a DFlash block drafter)                    1               k + 1 = block
dspark        block       ``drafter`` (a DSpark block drafter)                    1               k + 1 = block + 1
ngram         host        —                                                      0 (host side)   ≤ k + 1
============  ==========  =====================================================  ==============  ==============

Verify width: both engines verify the k drafts plus the bonus position in one target pass (vLLM: the
rejection sampler gets ``1 + num_speculative_tokens`` logits per request; SGLang:
``speculative_num_draft_tokens`` = k + 1 on a topk-1 chain). For block drafters *k is fixed by the trained
block*, and the two block drafters count their block differently:

* DFlash (z-lab; vLLM ``v1/worker/gpu/spec_decode/dflash/speculator.py``: ``num_query_per_req = 1 + N``;
  SGLang ``speculative_hook._handle_dflash``: "block_size (verify window length)" = num_draft_tokens): the
  block *includes* the anchor (bonus) position, so a b16 drafter drafts k = 15 and the target verifies 16.
* DSpark (vLLM ``dspark/speculator.py``: "anchor-as-first-prediction ... exactly N query tokens"; SGLang
  ``dspark_config.resolve_runtime_config``: ``verify_num_draft_tokens = gamma + 1``, gamma = block_size): the
  block *is* the drafted tokens, so a block-7 drafter drafts k = 7 and the target verifies 8. (A DSpark
  checkpoint with ``dspark_bonus_anchor`` uses DFlash's layout in vLLM: k = block − 1.)

The mean acceptance length L of every scheme lies in [1, k + 1] (the bonus token always commits; at most
every draft is accepted) — for block drafters that is [1, block] (DFlash) and [1, block + 1] (DSpark).

Drafter passes per round: a head chain runs its head once per drafted token (vLLM's ``AutoRegressiveSpeculator``:
a first pass, then ``for step in range(1, num_speculative_steps)``; a target with one MTP layer runs that layer
k times — vLLM warns "Enabling num_speculative_tokens > 1 will run multiple times of forward on same MTP
layer"); a block drafter drafts its block in one forward pass (DSpark's Markov head then samples left to right
inside the same captured step — a small per-token head, not a drafter forward pass); n-gram lookup runs on the
host and costs no GPU pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

REPO_ROOT = Path(__file__).resolve().parent.parent

Kind = Literal["none", "draft_model", "head_chain", "block", "host"]


@dataclass(frozen=True)
class Scheme:
    method: str
    kind: Kind
    needs_pair_draft: bool  # the model pair's ``draft`` model is the drafter
    needs_drafter: bool  # ``schemes.<name>.drafter`` is required
    drafter_optional: bool  # a ``drafter`` may be given (mtp: gemma-4's assistant) but need not be
    needs_target_mtp: bool  # without a drafter, the target's own config must carry MTP layers
    vllm_method: str | None  # SpeculativeConfig.method (vLLM 0.26.0 … 0.32)
    sglang_algorithm: str | None  # --speculative-algorithm (SGLang 0.5.17)
    # vLLM 0.26.0 model runner (config/vllm.py use_v2_model_runner, _get_v2_model_runner_unsupported_features):
    # "v1" always V1 (draft_model, ngram are "unsupported" on V2); "v2" forced V2 (dspark exists only there);
    # "v2_if_default" V2 when the target is a default-V2 model (dense, not hybrid), else V1.
    vllm_runner: Literal["v1", "v2", "v2_if_default"]
    description: str

    @property
    def speculative(self) -> bool:
        return self.kind != "none"

    @property
    def is_block(self) -> bool:
        return self.kind == "block"

    def draft_passes_per_round(self, k: int | None) -> int:
        """Drafter forward passes on the GPU per speculation round."""
        if self.kind in ("none", "host"):
            return 0
        if self.kind == "block":
            return 1
        return int(_require_k(self.method, k))

    def verify_width(self, k: int | None) -> int:
        """Tokens the target verifies per request per verify pass, at most (the bonus position included).
        N-gram drafts up to k (fewer when the prompt has no match), so its measured width can be lower."""
        if self.kind == "none":
            return 1
        return int(_require_k(self.method, k)) + 1

    def max_acceptance_length(self, k: int | None) -> int:
        """The largest mean acceptance length L the scheme can realise: every draft accepted + the bonus."""
        return self.verify_width(k)


def _require_k(method: str, k: int | None) -> int:
    if k is None or int(k) < 1:
        raise ValueError(f"{method} needs k >= 1 draft tokens per round, got {k!r}")
    return int(k)


SCHEMES: dict[str, Scheme] = {
    s.method: s
    for s in (
        Scheme(
            "baseline",
            "none",
            False,
            False,
            False,
            False,
            None,
            None,
            "v2_if_default",
            "no speculation: one target pass per committed token",
        ),
        Scheme(
            "ngram",
            "host",
            False,
            False,
            False,
            False,
            "ngram",
            "NGRAM",
            "v1",
            "prompt lookup on the host: up to k tokens copied from an earlier match",
        ),
        Scheme(
            "draft_model",
            "draft_model",
            True,
            False,
            False,
            False,
            "draft_model",
            "STANDALONE",
            "v1",
            "a standalone small model drafts k tokens, one pass each",
        ),
        Scheme(
            "eagle3",
            "head_chain",
            False,
            True,
            False,
            False,
            "eagle3",
            "EAGLE3",
            "v2_if_default",
            "an EAGLE3 head on the target's hidden states drafts k tokens, one pass each",
        ),
        Scheme(
            "mtp",
            "head_chain",
            False,
            False,
            True,
            True,
            "mtp",
            "NEXTN",
            "v2_if_default",
            "the target's own multi-token-prediction layer(s) draft k tokens, one pass each",
        ),
        Scheme(
            "dflash",
            "block",
            False,
            True,
            False,
            False,
            "dflash",
            "DFLASH",
            "v2_if_default",
            "a DFlash block drafter fills its trained block (anchor + k masks) in one pass",
        ),
        Scheme(
            "dspark",
            "block",
            False,
            True,
            False,
            False,
            "dspark",
            "DSPARK",
            "v2",
            "a DSpark block drafter drafts its block of k in one pass, then a Markov head orders it",
        ),
    )
}

METHODS: tuple[str, ...] = ("baseline", "ngram", "draft_model", "eagle3", "mtp", "dflash", "dspark")
assert set(METHODS) == set(SCHEMES)
DRAFT_MODEL_METHODS: tuple[str, ...] = tuple(m for m in METHODS if SCHEMES[m].needs_pair_draft)
# Methods that may bring drafter weights of their own (``schemes.<name>.drafter``).
DRAFTER_METHODS: tuple[str, ...] = tuple(m for m in METHODS if SCHEMES[m].needs_drafter or SCHEMES[m].drafter_optional)
BLOCK_METHODS: tuple[str, ...] = tuple(m for m in METHODS if SCHEMES[m].is_block)

# Which tokens synthetic acceptance commits (ADR 0243), a scheme option (``schemes.<name>.options``) that no engine
# receives as an argument. SGLang 0.5.17 (SGLANG_SIMULATE_ACC_TOKEN_MODE, speculative/spec_utils.py
# generate_simulated_accept_index): "fixed", its default, commits token id 100 at every accepted position;
# "real-draft-token" the drafted tokens and the target's bonus. vLLM 0.26.0's synthetic rejection sampler always
# commits the drafted tokens it accepts and the target's argmax after (v1/sample/rejection_sampler.py): it has
# real-draft-token only. Left out, each engine keeps its default, and cell ids stay as they were.
SIMULATE_TOKEN_OPTION = "simulate_token_mode"
FIXED_TOKEN, REAL_DRAFT_TOKEN = "fixed", "real-draft-token"
SIMULATE_TOKEN_MODES: tuple[str, ...] = (FIXED_TOKEN, REAL_DRAFT_TOKEN)
ENGINE_SIMULATE_TOKEN_MODES: dict[str, tuple[str, ...]] = {
    "sglang": SIMULATE_TOKEN_MODES,
    "vllm": (REAL_DRAFT_TOKEN,),
}


def engine_options(options: dict[str, Any]) -> dict[str, Any]:
    """A scheme's ``options`` as its engine receives them: without the project's own (the token mode)."""
    return {k: v for k, v in options.items() if k != SIMULATE_TOKEN_OPTION}


def get(method: str) -> Scheme:
    try:
        return SCHEMES[method]
    except KeyError:
        raise KeyError(f"unknown scheme method {method!r}; known: {', '.join(METHODS)}") from None


def draft_passes_per_round(method: str, k: int | None) -> int:
    """Drafter forward passes per round for the record (draft_model / heads: k; dflash / dspark: 1; ngram,
    baseline: 0)."""
    return get(method).draft_passes_per_round(k)


def verify_width(method: str, k: int | None) -> int:
    return get(method).verify_width(k)


def max_acceptance_length(method: str, k: int | None) -> int:
    return get(method).max_acceptance_length(k)


# -- reading a drafter's / target's config.json --------------------------------------------------------------
# TODO(issue 16): replace these readers with specjoule/models.py::describe_drafter (another helper writes it)
# once it lands; they read the same keys the engines read.


def model_dir(name: str | None) -> Path | None:
    """A local model directory (absolute, or relative to the cwd or the repo root) holding config.json; None for
    a hub id or a directory that is not here (the engine resolves those; parse time cannot)."""
    if not name:
        return None
    p = Path(name)
    for cand in [p] if p.is_absolute() else [p, REPO_ROOT / p]:
        if (cand / "config.json").is_file():
            return cand
    return None


def read_model_config(name: str | None) -> dict[str, Any] | None:
    d = model_dir(name)
    if d is None:
        return None
    with open(d / "config.json") as fh:
        return json.load(fh)


def _get(cfg: dict, key: str) -> Any:
    sub = cfg.get("dflash_config") if isinstance(cfg.get("dflash_config"), dict) else {}
    if sub.get(key) is not None:
        return sub[key]
    return cfg.get(key)


def trained_block(method: str, drafter_config: dict) -> int | None:
    """The block a block drafter was trained with, read as the engines read it: DFlash ``dflash_config.block_size``
    or top-level ``block_size`` (SGLang dflash_utils.parse_dflash_draft_config); DSpark ``dspark_block_size``, else
    the DFlash keys (SGLang dspark_config.parse_dspark_draft_config; vLLM's DeepSeek-V4 check reads
    ``dspark_block_size``). None when the config does not say (vLLM 0.26.0 then takes k as given)."""
    if method == "dspark" and drafter_config.get("dspark_block_size") is not None:
        return int(drafter_config["dspark_block_size"])
    value = _get(drafter_config, "block_size")
    return int(value) if value is not None else None


def block_k(method: str, drafter_config: dict) -> int | None:
    """The k a block drafter must run with (drafted tokens per round), from its trained block: DFlash's block
    holds the anchor, so k = block − 1; DSpark's block is the drafted tokens, k = block (unless the checkpoint
    uses the DFlash layout, ``dspark_bonus_anchor``: vLLM then queries 1 + k)."""
    block = trained_block(method, drafter_config)
    if block is None:
        return None
    if method == "dflash" or (method == "dspark" and drafter_config.get("dspark_bonus_anchor")):
        return block - 1
    if method == "dspark":
        return block
    raise ValueError(f"{method} is not a block drafter")


# Keys under which a target's config says how many MTP layers it carries (vLLM 0.26.0
# SpeculativeConfig.hf_config_override: num_nextn_predict_layers for DeepSeek / MiMo / GLM-4.x MoE / Qwen3-Next /
# ERNIE / Step3.5, mtp_num_hidden_layers for Qwen3.5/3.6, num_mtp_modules for MiniMax-M3; SGLang reads
# num_nextn_predict_layers too).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")


def target_mtp_layers(target_config: dict) -> int:
    """MTP layers a target's config.json declares (0 when none); looks into ``text_config`` too."""
    for cfg in (target_config, target_config.get("text_config") or {}):
        for key in MTP_LAYER_KEYS:
            if cfg.get(key):
                return int(cfg[key])
        mtp = cfg.get("mtp_config")
        if isinstance(mtp, dict) and mtp.get("num_nextn_predict_layers"):
            return int(mtp["num_nextn_predict_layers"])
    return 0


def resolve_drafter(scheme: dict, pair: dict) -> str | None:
    """The drafter a scheme runs on a model pair: the scheme's own ``drafter``, else the pair's ``drafters[method]``
    (each target its own EAGLE3 head or block drafter), else None."""
    return scheme.get("drafter") or (pair.get("drafters") or {}).get(scheme.get("method"))


def drafter_sources(config: dict, scheme_name: str, scheme: dict) -> list[tuple[str, str]]:
    """(key path, drafter) of every drafter a scheme may run with: its own, or each pair's for its method."""
    if scheme.get("drafter"):
        return [(f"schemes.{scheme_name}.drafter", scheme["drafter"])]
    method = scheme.get("method")
    return [
        (f"models.{p}.drafters.{method}", pair["drafters"][method])
        for p, pair in config["models"].items()
        if (pair.get("drafters") or {}).get(method)
    ]
