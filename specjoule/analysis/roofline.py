"""An energy model that predicts every cell from its baselines (issue 18, ADR 0102).

Per model shape it counts the HBM bytes and the operations of every forward pass — the target's verify
pass over B × w tokens, each drafter pass, the prompt pass — and turns them into time and energy with a
few per-GPU coefficients fitted on **baseline cells only**:

    time of a pass    t = t0 + u · max(bytes / BW, ops / OPS)       (BW, OPS: the GPU's measured ceilings)
    energy of a cell  E = P_static · T + e_byte · bytes + e_op · ops

``t0`` (per-pass host and launch overhead) and ``u`` (≥ 1, how far below the ceilings the engine runs)
are fitted per (GPU, engine, target, CUDA-graph mode) on the baselines' window times; ``P_static``,
``e_byte`` and ``e_op`` per GPU on the baselines' energies, pulled toward the GPU's calibration
(``specjoule.hardware``) so that two batch sizes suffice. A speculative cell is then predicted from its
B, k, verify width, realized acceptance L and the drafter's shape alone:

    mJ per committed token = 1000 · [E_round / (B·L) + E_prompt / (B·output_len)]

and compared with what was measured (``residual`` = measured / predicted − 1). The same terms split a
speculative cell's energy into verify, draft and idle/host-wait (static power over the measured time
the modelled GPU passes do not explain); where the grid holds a host-drafted arm (n-gram) at the same k,
B and acceptance, the matched split measures the draft's share by removing the draft.

Shapes: ``specjoule.models.describe(dir) -> ModelShape`` for targets and draft models,
``describe_drafter(dir) -> DrafterShape`` for heads and block drafters. A shape lacking a field the
counts need is "not modelled" with the field named — never a silent zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from specjoule import axes

DTYPE_BYTES = 2
BLOCK_METHODS = ("dflash", "dspark")
HOST_METHODS = ("ngram",)
BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_SEED = 20261201
PRIOR_WEIGHT = 0.1  # each calibrated coefficient counts like a tenth of a baseline cell: the baselines decide
# every direction they can see, the calibration only the one a memory-bound sweep cannot (ADR 0102)
C = pl.col


class NotModelled(ValueError):
    """The model cannot price this cell; the message says why (a missing field, no calibration, ...)."""


# ------------------------------------------------------------------------------------------------
# bytes and operations


@dataclass(frozen=True)
class PassCost:
    """HBM bytes and operations (multiply and add count 2) of one forward pass."""

    bytes: float
    ops: float

    def __add__(self, other: PassCost) -> PassCost:
        return PassCost(self.bytes + other.bytes, self.ops + other.ops)

    def times(self, n: float) -> PassCost:
        return PassCost(self.bytes * n, self.ops * n)

    @property
    def op_per_byte(self) -> float:
        return self.ops / self.bytes if self.bytes else math.inf


def _need(shape: Any, name: str, what: str) -> Any:
    value = getattr(shape, name, None)
    if value is None:
        raise NotModelled(f"{what} shape {getattr(shape, 'path', '?')} lacks field {name!r}")
    return value


def expected_distinct_experts(num_experts: int, top_k: int, n_tokens: float) -> float:
    """Expected number of distinct experts a layer reads when n tokens each route to top_k of num_experts
    (routing taken as uniform and independent: E · (1 − (1 − k/E)^n)). Real routers are skewed, which
    touches fewer; uniform is the upper end."""
    if n_tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** n_tokens)


def moe_layout(shape: Any) -> tuple[float, float, float]:
    """(params every token reads, params per routed expert, MoE layers) from the shape's own counts.

    The routed layers follow from params_total − params_active = layers · (E − k) · per_expert, so the
    split agrees with ``describe``'s counting whatever dense layers the architecture has first."""
    what = "target"
    hidden = _need(shape, "hidden_size", what)
    moe_ffn = _need(shape, "moe_intermediate_size", what)
    e = _need(shape, "num_experts", what)
    k = _need(shape, "experts_per_token", what)
    total, active = _need(shape, "params_total", what), _need(shape, "params_active", what)
    per_expert = 3.0 * hidden * moe_ffn  # gate, up, down
    if e <= k:
        raise NotModelled(f"target shape {getattr(shape, 'path', '?')}: num_experts {e} <= experts_per_token {k}")
    layers = (total - active) / ((e - k) * per_expert)
    if layers <= 0:
        raise NotModelled(
            f"target shape {getattr(shape, 'path', '?')}: params_total {total} - params_active "
            f"{active} leaves no routed experts"
        )
    shared = total - layers * e * per_expert
    return shared, per_expert, layers


def weight_params_read(shape: Any, n_tokens: float) -> float:
    """Parameters a pass over n_tokens reads from HBM.

    Dense: every parameter, less an untied input embedding (a pass reads only its n rows; a tied one is
    read whole as the lm_head). MoE: what every token reads plus the expected distinct routed experts."""
    total = _need(shape, "params_total", "target")
    embed = 0.0
    if not getattr(shape, "tie_word_embeddings", True):
        vocab, hidden = _need(shape, "vocab_size", "target"), _need(shape, "hidden_size", "target")
        embed = vocab * hidden - min(n_tokens, vocab) * hidden
    if not _need(shape, "moe", "target"):
        return total - embed
    shared, _, _ = moe_layout(shape)
    return shared - embed + routed_expert_bytes(shape, n_tokens) / DTYPE_BYTES


def routed_expert_bytes(shape: Any, n_tokens: float) -> float | None:
    """Bytes of the routed experts a pass over n_tokens reads under uniform routing (``weight_params_read``
    counts them from here); None for a dense shape. A measured time below these bytes over
    the board's HBM ceiling means the pass read fewer experts than uniform routing implies (ADR 0242)."""
    if not getattr(shape, "moe", False):
        return None
    _, per_expert, layers = moe_layout(shape)
    distinct = expected_distinct_experts(shape.num_experts, shape.experts_per_token, n_tokens)
    return layers * per_expert * distinct * DTYPE_BYTES


def attention_ops_per_token(shape: Any, context_len: float) -> float:
    """QK and AV over the context: 4 · ctx · heads · head_dim per attending layer (sliding layers see at
    most their window; linear-attention layers a constant state, counted as one window of head_dim)."""
    heads = _need(shape, "num_attention_heads", "target")
    head_dim = _need(shape, "head_dim", "target")
    layers = _need(shape, "num_layers", "target")
    sliding = getattr(shape, "sliding_layers", 0) or 0
    linear = getattr(shape, "linear_attention_layers", 0) or 0
    window = getattr(shape, "sliding_window", None) or context_len
    full = layers - sliding - linear
    ctx = full * context_len + sliding * min(context_len, window) + linear * head_dim
    return 4.0 * ctx * heads * head_dim


def target_pass(shape: Any, batch: float, tokens_per_seq: float, context_len: float) -> PassCost:
    """One forward pass of a target (or a draft *model*) over batch × tokens_per_seq tokens at a context."""
    n = batch * tokens_per_seq
    kv = shape.kv_bytes(max(1, int(round(context_len))), DTYPE_BYTES) if hasattr(shape, "kv_bytes") else None
    if kv is None:
        raise NotModelled(f"shape {getattr(shape, 'path', '?')} has no kv_bytes()")
    bytes_ = weight_params_read(shape, n) * DTYPE_BYTES + batch * kv
    active = _need(shape, "params_active", "target")
    ops = 2.0 * active * n + attention_ops_per_token(shape, context_len) * n
    return PassCost(bytes_, ops)


def _drafter_kv_bytes(drafter: Any, context_len: float) -> float:
    """One sequence's cache in the drafter's own layers at its real KV width (kv heads × head_dim)."""
    try:
        return float(drafter.kv_bytes(max(1, int(round(context_len))), DTYPE_BYTES))
    except (AttributeError, ValueError) as exc:  # ModelShapeError is a ValueError naming the field
        raise NotModelled(f"drafter shape {getattr(drafter, 'path', '?')}: no KV width ({exc})") from exc


def _drafter_attention_ops(drafter: Any, context_len: float) -> float:
    heads = _need(drafter, "num_attention_heads", "drafter")
    head_dim = _need(drafter, "head_dim", "drafter")
    return 4.0 * context_len * heads * head_dim * _need(drafter, "num_layers", "drafter")


def _per_pass_matmul_params(drafter: Any) -> float:
    """Parameters a head or block drafter reads whole and multiplies on every pass: its own tensors less
    row-lookup tables and once-per-round tensors, plus the target's lm_head when it has none of its own.
    The shared embedding (and DSpark's markov_w1) is read only at the pass's token rows: < 0.01 % of the
    bytes at these batch sizes, left out (ADR 0176)."""
    params = _need(drafter, "params", "drafter")
    return (
        params
        - (getattr(drafter, "lookup_params", 0) or 0)
        - (getattr(drafter, "params_once_per_round", 0) or 0)
        + (getattr(drafter, "shared_lm_head_params", 0) or 0)
    )


def head_pass(drafter: Any, batch: float, tokens_per_seq: float, context_len: float) -> PassCost:
    """One pass of a head or block drafter (``DrafterShape``) over batch × tokens_per_seq tokens that
    also applies its once-per-round tensors (the prompt pass): bytes = what it reads whole + its KV;
    operations = 2 · matmul parameters per token + attention over the context."""
    once = getattr(drafter, "params_once_per_round", 0) or 0
    read = _per_pass_matmul_params(drafter) + once
    n = batch * tokens_per_seq
    kv = batch * _drafter_kv_bytes(drafter, context_len)
    return PassCost(read * DTYPE_BYTES + kv, (2.0 * read + _drafter_attention_ops(drafter, context_len)) * n)


def drafter_tokens_per_round(method: str, k: int | None, verify_width: float) -> float:
    """Tokens per request a head or block drafter processes in one round (vLLM 0.26.0's V2 runner).

    Heads (EAGLE3, MTP): the first step runs over the tokens the last verify pass committed — the
    verify width, padded — then k − 1 single-token steps (autoregressive/speculator.py). Block drafters
    (DFlash, DSpark): one pass over the anchor plus k mask tokens (dflash/speculator.py
    ``num_query_per_req = 1 + num_speculative_steps``)."""
    if method in BLOCK_METHODS:
        return float(k or 0) + 1.0
    return verify_width + float(k or 1) - 1.0


def head_round(
    drafter: Any, method: str, k: int | None, batch: float, verify_width: float, context_len: float
) -> PassCost:
    """A whole speculation round of a head or block drafter: passes × (what a pass reads whole + KV),
    the once-per-round tensors once (EAGLE3's fc over the verified tokens' hidden states)."""
    passes = draft_passes_per_round(method, k)
    once = getattr(drafter, "params_once_per_round", 0) or 0
    per_pass = _per_pass_matmul_params(drafter)
    tokens = batch * drafter_tokens_per_round(method, k, verify_width)
    kv = batch * _drafter_kv_bytes(drafter, context_len)
    bytes_ = (passes * per_pass + once) * DTYPE_BYTES + passes * kv
    ops = (2.0 * per_pass + _drafter_attention_ops(drafter, context_len)) * tokens + 2.0 * once * batch * verify_width
    return PassCost(bytes_, ops)


def drafter_pass(drafter: Any, batch: float, tokens_per_seq: float, context_len: float) -> PassCost:
    if hasattr(drafter, "params_active"):
        return target_pass(drafter, batch, tokens_per_seq, context_len)
    return head_pass(drafter, batch, tokens_per_seq, context_len)


def draft_passes_per_round(method: str, k: int | None) -> int:
    """Drafter forward passes per speculation round: heads and draft models k, block drafters 1, host 0."""
    if method in (None, "baseline") or method in HOST_METHODS:
        return 0
    if method in BLOCK_METHODS:
        return 1
    if not k:
        raise NotModelled(f"method {method!r} without k")
    return int(k)


# ------------------------------------------------------------------------------------------------
# one cell's work per round


@dataclass(frozen=True)
class CellWork:
    """What one cell asks of the GPU, per speculation round (a baseline: per decode step)."""

    batch: float
    verify_width: float  # tokens verified per request per round (1 for a baseline)
    accepted_length: float  # committed tokens per request per round (realized L; 1 for a baseline)
    output_len: float
    verify: PassCost
    draft_pass: PassCost  # one drafter pass
    n_draft_passes: int
    prompt: PassCost  # one batch's prompt pass (target + drafter)
    prompt_draft_passes: int  # drafter prompt passes (0 or 1)
    target_family: str | None = None
    # The share of the target's fixed time per pass (t0) that one drafter pass costs: drafter layers over target
    # layers (ADR 0182). t0 is fitted on target steps, whose kernels scale with the layer count; a one-layer head
    # of a 48-layer target is not charged a 48-layer step's overhead three times per round.
    draft_overhead_share: float = 1.0
    # MoE targets: bytes of the routed experts the verify pass reads under uniform routing (ADR 0242); None: dense.
    verify_routed_bytes: float | None = None

    @property
    def committed_per_round(self) -> float:
        return self.batch * self.accepted_length

    @property
    def committed_per_batch(self) -> float:
        return self.batch * self.output_len


def _finite_positive(row: Mapping[str, Any], key: str) -> float:
    v = row.get(key)
    if v is None or (isinstance(v, float) and not math.isfinite(v)) or v <= 0:
        raise NotModelled(f"{key} = {v!r}")
    return float(v)


def effective_batch(row: Mapping[str, Any]) -> float:
    if row.get("workload_kind") == "open_loop":
        return _finite_positive(row, "mean_running_requests")
    return _finite_positive(row, "batch_size")


def realized_verify_width(row: Mapping[str, Any]) -> float:
    """1 + drafted tokens per round when measured; else the scheme's k + 1."""
    drafts, drafted = row.get("drafts"), row.get("draft_tokens")
    if drafts and drafted is not None:
        return 1.0 + drafted / drafts
    if row.get("method") in (None, "baseline"):
        return 1.0
    return 1.0 + float(row.get("k") or 0)


def cell_work(
    row: Mapping[str, Any], target: Any, drafter: Any | None, accepted_length: float | None = None
) -> CellWork:
    """Per-round work of a record (or a planned cell) from its identity, counters and the shapes."""
    method = row.get("method") or "baseline"
    batch = effective_batch(row)
    prompt_len = _finite_positive(row, "prompt_len")
    output_len = _finite_positive(row, "output_len")
    k = row.get("k")
    speculative = method != "baseline"
    width = realized_verify_width(row) if speculative else 1.0
    if accepted_length is None:
        accepted_length = float(row.get("realized_L") or 1.0) if speculative else 1.0
    context = prompt_len + output_len / 2.0  # mean decode context over a generation
    verify = target_pass(target, batch, width, context)
    n_draft = draft_passes_per_round(method, k) if speculative else 0
    if n_draft and drafter is None:
        raise NotModelled(
            f"method {method!r} runs a drafter on the GPU but no drafter shape is known "
            f"(draft_model {row.get('draft_model')!r})"
        )
    if not n_draft:
        draft = PassCost(0.0, 0.0)
    elif hasattr(drafter, "params_active"):  # a draft *model*: k single-token passes
        draft = drafter_pass(drafter, batch, 1.0, context)
    else:  # heads and block drafters: the round's cost spread evenly over its passes
        draft = head_round(drafter, method, k, batch, width, context).times(1.0 / n_draft)
    prompt = target_pass(target, batch, prompt_len, prompt_len / 2.0)
    prompt_draft = 1 if n_draft else 0
    if prompt_draft:
        prompt = prompt + drafter_pass(drafter, batch, prompt_len, prompt_len / 2.0)
    return CellWork(
        batch,
        width,
        accepted_length,
        output_len,
        verify,
        draft,
        n_draft,
        prompt,
        prompt_draft,
        getattr(target, "family", None),
        draft_overhead_share(target, drafter) if n_draft else 1.0,
        routed_expert_bytes(target, batch * width),
    )


def draft_overhead_share(target: Any, drafter: Any) -> float:
    """Drafter layers over target layers (ADR 0182): the share of the target's fixed per-pass time a drafter
    pass pays (an MTP drafter's shape counts the target's MTP layers); 1.0, the whole t0, when a count is unknown."""
    target_layers = getattr(target, "num_layers", None)
    drafter_layers = getattr(drafter, "num_layers", None)
    if not target_layers or not drafter_layers:
        return 1.0
    return min(1.0, drafter_layers / target_layers)


# ------------------------------------------------------------------------------------------------
# time and energy


@dataclass(frozen=True)
class Ceilings:
    hbm_bytes_per_s: float
    ops_per_s: float

    def roof_s(self, c: PassCost) -> float:
        return max(c.bytes / self.hbm_bytes_per_s, c.ops / self.ops_per_s)


@dataclass(frozen=True)
class TimeModel:
    """Seconds of a pass = t0 + slowdown · roofline time (slowdown ≥ 1: the engine below the ceilings)."""

    t0_s: float
    slowdown: float
    ceilings: Ceilings

    def pass_s(self, c: PassCost, overhead_share: float = 1.0) -> float:
        """``overhead_share``: the part of t0 this pass pays (a drafter pass: its layers over the target's)."""
        return self.t0_s * overhead_share + self.slowdown * self.ceilings.roof_s(c)


@dataclass(frozen=True)
class Coefficients:
    static_w: float
    j_per_byte: float
    j_per_op: float

    def energy_j(self, seconds: float, c: PassCost) -> float:
        return self.static_w * seconds + self.j_per_byte * c.bytes + self.j_per_op * c.ops

    def as_array(self) -> np.ndarray:
        return np.array([self.static_w, self.j_per_byte, self.j_per_op])


@dataclass(frozen=True)
class Prediction:
    mj_per_committed_token: float
    round_s: float  # modelled GPU seconds per round (verify + draft passes)
    verify_j: float  # per round: static over the verify pass + its bytes and operations
    draft_j: float
    prompt_j_per_token: float
    s_per_committed_token: float


def predict(work: CellWork, coeff: Coefficients, tm: TimeModel) -> Prediction:
    t_verify = tm.pass_s(work.verify)
    share = work.draft_overhead_share
    t_draft = work.n_draft_passes * tm.pass_s(work.draft_pass, share) if work.n_draft_passes else 0.0
    verify_j = coeff.energy_j(t_verify, work.verify)
    draft_j = coeff.energy_j(t_draft, work.draft_pass.times(work.n_draft_passes)) if work.n_draft_passes else 0.0
    t_prompt = tm.pass_s(work.prompt) + (tm.t0_s * share * work.prompt_draft_passes)
    prompt_j = coeff.energy_j(t_prompt, work.prompt)
    per_token_round = (verify_j + draft_j) / work.committed_per_round
    per_token_prompt = prompt_j / work.committed_per_batch
    s_token = (t_verify + t_draft) / work.committed_per_round + t_prompt / work.committed_per_batch
    return Prediction(
        1000.0 * (per_token_round + per_token_prompt),
        t_verify + t_draft,
        verify_j,
        draft_j,
        1000.0 * per_token_prompt,
        s_token,
    )


def token_features(w: CellWork, ceilings: Ceilings) -> np.ndarray:
    """Per committed token: [passes, roofline seconds, bytes, operations]. The prediction is
    1000 · (P·(t0·passes + slowdown·roof) + e_byte·bytes + e_op·ops) mJ — the same as ``predict``, in a
    form the bootstrap can evaluate for every resampled fit at once."""
    cpr, cpb = w.committed_per_round, w.committed_per_batch
    share = w.draft_overhead_share
    passes = (1 + w.n_draft_passes * share) / cpr + (1 + w.prompt_draft_passes * share) / cpb
    roof = (ceilings.roof_s(w.verify) + w.n_draft_passes * ceilings.roof_s(w.draft_pass)) / cpr + ceilings.roof_s(
        w.prompt
    ) / cpb
    round_cost = w.verify + w.draft_pass.times(w.n_draft_passes)
    return np.array(
        [passes, roof, round_cost.bytes / cpr + w.prompt.bytes / cpb, round_cost.ops / cpr + w.prompt.ops / cpb]
    )


def mj_from_features(f: np.ndarray, params: np.ndarray) -> np.ndarray:
    """params: (n, 5) rows of [P_static, J/byte, J/op, t0, slowdown] → mJ per committed token, (n,)."""
    p, eb, eo, t0, u = params.T
    return 1000.0 * (p * (t0 * f[0] + u * f[1]) + eb * f[2] + eo * f[3])


def crossover_length(spec: CellWork, base: CellWork, coeff: Coefficients, tm: TimeModel) -> float:
    """The acceptance length L at which the speculative arm's energy per committed token equals the
    baseline's: E_round / (B·L) + E_prompt,s / (B·out) = E_step / B + E_prompt,b / (B·out)."""
    t_v = tm.pass_s(spec.verify)
    e_round = coeff.energy_j(t_v, spec.verify)
    if spec.n_draft_passes:
        e_round += coeff.energy_j(
            spec.n_draft_passes * tm.pass_s(spec.draft_pass, spec.draft_overhead_share),
            spec.draft_pass.times(spec.n_draft_passes),
        )
    e_step = coeff.energy_j(tm.pass_s(base.verify), base.verify)
    e_prompt_spec = coeff.energy_j(
        tm.pass_s(spec.prompt) + tm.t0_s * spec.draft_overhead_share * spec.prompt_draft_passes, spec.prompt
    )
    e_prompt_base = coeff.energy_j(tm.pass_s(base.prompt), base.prompt)
    per_request_step = e_step + (e_prompt_base - e_prompt_spec) / spec.output_len
    return e_round / per_request_step if per_request_step > 0 else math.inf


# ------------------------------------------------------------------------------------------------
# fitting on baselines


@dataclass(frozen=True)
class BaselineObs:
    """One baseline cell as the fit sees it: window seconds, energy and the modelled passes in it."""

    key: str
    gpu: str
    time_group: tuple
    batch: float
    window_s: float
    energy_j: float
    passes: float  # forward passes in the window (decode steps + prompt passes)
    roof_s: float  # Σ roofline seconds of those passes
    bytes: float
    ops: float


def observe_baseline(row: Mapping[str, Any], work: CellWork, ceilings: Ceilings) -> BaselineObs:
    committed = _finite_positive(row, "committed_tokens")
    steps = committed / work.batch
    batches = committed / work.committed_per_batch
    total = work.verify.times(steps) + work.prompt.times(batches)
    roof = steps * ceilings.roof_s(work.verify) + batches * ceilings.roof_s(work.prompt)
    return BaselineObs(
        str(row.get("cell_id")),
        str(row.get("gpu_uuid")),
        time_group(row),
        work.batch,
        _finite_positive(row, "window_s"),
        _finite_positive(row, "energy_j"),
        steps + batches,
        roof,
        total.bytes,
        total.ops,
    )


def time_group(row: Mapping[str, Any]) -> tuple:
    """Cells that share a per-pass overhead: one GPU, engine, target and CUDA-graph mode."""
    return (row.get("gpu_uuid"), row.get("engine"), row.get("target_model"), row.get("cuda_graphs"))


def _nonneg_lstsq(a: np.ndarray, b: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """Least squares with x ≥ lower, by active-set elimination (a handful of unknowns)."""
    free = np.ones(a.shape[1], dtype=bool)
    x = lower.astype(float).copy()
    for _ in range(a.shape[1] + 1):
        rhs = b - a[:, ~free] @ lower[~free]
        sol, *_ = np.linalg.lstsq(a[:, free], rhs, rcond=None)
        x[free] = sol
        x[~free] = lower[~free]
        low = free & (x < lower)
        if not low.any():
            return x
        free &= ~low
    return np.maximum(x, lower)


def fit_time_model(obs: list[BaselineObs], ceilings: Ceilings) -> TimeModel:
    """t0 ≥ 0 and slowdown ≥ 1 from T_i = passes_i · t0 + roof_i · slowdown, relative residuals."""
    if not obs:
        raise NotModelled("no baseline cell to fit the pass time on")
    a = np.array([[o.passes / o.window_s, o.roof_s / o.window_s] for o in obs])
    b = np.ones(len(obs))
    if len({(round(o.passes, 6), round(o.roof_s, 9)) for o in obs}) < 2:
        # One design point: the overhead alone explains the rest (slowdown held at 1).
        t0 = max(0.0, float(np.mean([(o.window_s - o.roof_s) / o.passes for o in obs])))
        return TimeModel(t0, 1.0, ceilings)
    t0, slowdown = _nonneg_lstsq(a, b, np.array([0.0, 1.0]))
    return TimeModel(float(t0), float(slowdown), ceilings)


def fit_coefficients(
    obs: list[BaselineObs], prior: Coefficients | None, prior_weight: float = PRIOR_WEIGHT
) -> Coefficients:
    """P_static, J/byte, J/op ≥ 0 from E_i = P·T_i + e_b·bytes_i + e_o·ops_i (relative residuals), pulled
    toward the GPU's calibration with ``prior_weight`` per coefficient. Without a calibration the
    baselines alone must hold three distinct designs."""
    rows = [[o.window_s / o.energy_j, o.bytes / o.energy_j, o.ops / o.energy_j] for o in obs]
    rhs = [1.0] * len(obs)
    scale = np.ones(3)
    if prior is not None:
        scale = prior.as_array()
        for j in range(3):
            r = [0.0, 0.0, 0.0]
            r[j] = prior_weight
            rows.append(r)
            rhs.append(prior_weight)
    else:
        design = np.array(rows)
        if len(obs) < 3 or np.linalg.matrix_rank(design / np.abs(design).max(axis=0)) < 3:
            raise NotModelled(
                f"no hardware calibration for GPU {obs[0].gpu if obs else '?'}, and its {len(obs)} "
                f"baseline cell(s) do not separate static power, energy per byte and per operation "
                f"(window time, bytes and operations are collinear across them, as in any sweep that "
                f"stays memory-bound): calibrate the GPU (python -m specjoule.hardware calibrate)"
            )
        scale = np.abs(design).max(axis=0) ** -1
    a = np.array(rows, dtype=float)
    if prior is not None:
        a[: len(obs)] *= scale  # unknowns in units of the prior: x_j = θ_j / prior_j
    else:
        a *= scale
    x = _nonneg_lstsq(a, np.array(rhs, dtype=float), np.zeros(3))
    theta = x * scale
    return Coefficients(*map(float, theta))


# ------------------------------------------------------------------------------------------------
# hardware


@dataclass(frozen=True)
class Hardware:
    gpu_uuid: str
    gpu_name: str
    source: str  # "measured" | "same GPU model" (another UUID of that name)
    calibration_uuid: str
    ceilings: Ceilings
    prior: Coefficients
    balance_point: float
    gpm_copy_dram_pct: float | None = None
    gpm_copy_bytes_per_s: float | None = None
    gpm_matmul_tensor_pct: float | None = None
    gpm_matmul_ops_per_s: float | None = None

    def measured_op_per_byte(self, dram_pct: float | None, tensor_pct: float | None) -> float | None:
        """Operations per HBM byte from a cell's GPM activity, scaled by this GPU's calibration kernels."""
        if None in (dram_pct, tensor_pct, self.gpm_copy_dram_pct, self.gpm_matmul_tensor_pct) or not dram_pct:
            return None
        bytes_s = dram_pct * self.gpm_copy_bytes_per_s / self.gpm_copy_dram_pct
        ops_s = tensor_pct * self.gpm_matmul_ops_per_s / self.gpm_matmul_tensor_pct
        return ops_s / bytes_s


def hardware_from_calibration(
    cal: Mapping[str, Any], gpu_uuid: str | None = None, source: str = "measured"
) -> Hardware:
    c = cal["constants"]
    kernels = (cal.get("raw") or {}).get("kernels") or {}
    copy_k, mm_k = kernels.get("copy") or {}, kernels.get("matmul") or {}

    def rate(k: Mapping[str, Any], per_iter: str) -> float | None:
        return k[per_iter] * k["iters"] / k["kernel_s"] if k.get("kernel_s") else None

    return Hardware(
        gpu_uuid=gpu_uuid or cal["gpu_uuid"],
        gpu_name=cal.get("gpu_name", ""),
        source=source,
        calibration_uuid=cal["gpu_uuid"],
        ceilings=Ceilings(c["hbm_bytes_per_s"], c["bf16_ops_per_s"]),
        prior=Coefficients(c["static_power_w"], c["energy_per_byte_j"], c["energy_per_op_j"]),
        balance_point=c["balance_point_op_per_byte"],
        gpm_copy_dram_pct=(copy_k.get("gpm") or {}).get("dram_bw_util_pct"),
        gpm_copy_bytes_per_s=rate(copy_k, "hbm_bytes_per_iter") if copy_k else None,
        gpm_matmul_tensor_pct=(mm_k.get("gpm") or {}).get("tensor_active_pct"),
        gpm_matmul_ops_per_s=rate(mm_k, "ops_per_iter") if mm_k else None,
    )


def hardware_for(
    gpu_uuid: str | None, gpu_name: str | None, driver: str | None, calibrations: list[Mapping[str, Any]]
) -> Hardware:
    """This GPU's calibration (same driver first); else one of the same GPU model, labelled as such."""
    from specjoule import hardware as hw

    own = hw.for_gpu(list(calibrations), gpu_uuid, driver)
    if own is not None:
        return hardware_from_calibration(own, gpu_uuid, "measured")
    same = [c for c in calibrations if gpu_name and c.get("gpu_name") == gpu_name]
    if same:
        pick = max(same, key=lambda c: c.get("measured_at", ""))
        return hardware_from_calibration(pick, gpu_uuid, f"same GPU model ({pick['gpu_uuid']})")
    raise NotModelled(
        f"no hardware calibration for GPU {gpu_uuid} ({gpu_name}); run "
        f"`python -m specjoule.hardware calibrate` on it (results/hardware/)"
    )


# ------------------------------------------------------------------------------------------------
# the whole table

ShapeLookup = Callable[[str, str], Any]  # (model path, role "target" | "draft_model" | "drafter") -> shape

ROOFLINE_SCHEMA: dict[str, pl.DataType] = {
    "cell_id": pl.String,
    "campaign_id": pl.String,
    "cell_name": pl.String,
    "role": pl.String,
    "engine": pl.String,
    "model_pair": pl.String,
    "scheme": pl.String,
    "method": pl.String,
    "k": pl.Int64,
    "batch_size": pl.Int64,
    "gpu_uuid": pl.String,
    "target_family": pl.String,
    "model_status": pl.String,
    "not_modelled_reason": pl.String,
    "hardware_source": pl.String,
    "verify_width": pl.Float64,
    "accepted_length": pl.Float64,
    "draft_passes_per_round": pl.Int64,
    "verify_bytes": pl.Float64,
    "verify_ops": pl.Float64,
    "draft_bytes_per_round": pl.Float64,
    "draft_ops_per_round": pl.Float64,
    "modelled_op_per_byte": pl.Float64,
    "measured_op_per_byte": pl.Float64,
    "balance_point_op_per_byte": pl.Float64,
    "balance_point_source": pl.String,
    "predicted_s_per_committed_token": pl.Float64,
    "measured_s_per_committed_token": pl.Float64,
    "predicted_mj_per_committed_token": pl.Float64,
    "predicted_mj_low": pl.Float64,
    "predicted_mj_high": pl.Float64,
    "measured_mj_per_committed_token": pl.Float64,
    "residual": pl.Float64,
    "energy_verify_share": pl.Float64,
    "energy_draft_share": pl.Float64,
    "energy_idle_share": pl.Float64,
    "energy_draft_share_matched": pl.Float64,
    "matched_cell_name": pl.String,
    "matched_reason": pl.String,
    # appended (ADR 0176): which drafter shape priced the cell and where its path came from
    "drafter_path": pl.String,
    "drafter_source": pl.String,
    # appended (ADR 0242): MoE targets only, null for dense ones. The time the board's HBM ceiling needs to read
    # the routed experts uniform routing expects the round's verify pass to touch, and whether the measured round
    # (drafts and host time included) was shorter: then its tokens reached fewer experts than uniform routing.
    "expert_floor_ms": pl.Float64,
    "below_expert_floor": pl.Boolean,
}
FIT_SCHEMA: dict[str, pl.DataType] = {
    "gpu_uuid": pl.String,
    "hardware_source": pl.String,
    "calibration_uuid": pl.String,
    "n_baselines": pl.Int64,
    "static_w": pl.Float64,
    "static_w_low": pl.Float64,
    "static_w_high": pl.Float64,
    "pj_per_byte": pl.Float64,
    "pj_per_byte_low": pl.Float64,
    "pj_per_byte_high": pl.Float64,
    "pj_per_op": pl.Float64,
    "pj_per_op_low": pl.Float64,
    "pj_per_op_high": pl.Float64,
    "prior_static_w": pl.Float64,
    "prior_pj_per_byte": pl.Float64,
    "prior_pj_per_op": pl.Float64,
}
TIME_SCHEMA: dict[str, pl.DataType] = {
    "gpu_uuid": pl.String,
    "engine": pl.String,
    "target_model": pl.String,
    "cuda_graphs": pl.Boolean,
    "n_baselines": pl.Int64,
    "t0_ms": pl.Float64,
    "slowdown": pl.Float64,
}
CROSSOVER_SCHEMA: dict[str, pl.DataType] = {
    "target_family": pl.String,
    "model_pair": pl.String,
    "engine": pl.String,
    "gpu_uuid": pl.String,
    "scheme": pl.String,
    "method": pl.String,
    "k": pl.Int64,
    "batch_size": pl.Int64,
    "verify_width": pl.Float64,
    "predicted_crossover_L": pl.Float64,
    "predicted_crossover_L_low": pl.Float64,
    "predicted_crossover_L_high": pl.Float64,
    "measured_crossover_L": pl.Float64,
    "measured_bracket": pl.String,
    "n_cells": pl.Int64,
}


@dataclass
class RooflineResult:
    cells: pl.DataFrame
    fit: pl.DataFrame
    time: pl.DataFrame
    crossover: pl.DataFrame
    hardware: pl.DataFrame


def _shape_for(lookup: ShapeLookup, cache: dict, path: str | None, role: str) -> Any:
    if path is None:
        return None
    key = (path, role)
    if key not in cache:
        try:
            cache[key] = lookup(path, role)
        except NotModelled as exc:
            cache[key] = exc
        except Exception as exc:  # the shape reader's own errors (ModelShapeError names the field)
            cache[key] = NotModelled(f"{role} {path}: {exc}")
    value = cache[key]
    if isinstance(value, NotModelled):
        raise value
    return value


def _drafter_role(method: str) -> str:
    return "draft_model" if method == "draft_model" else "drafter"


DrafterPaths = Mapping[tuple[str, str], str]  # (model_pair, scheme) -> drafter dir, from the config


def configured_drafters(config: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(model_pair, scheme) -> the drafter dir the config gives a GPU-drafted scheme (the scheme's own
    ``drafter``, else the pair's ``drafters.<method>``): for records written before cells named their
    drafter in ``draft_model`` (commit b179d2f and older wrote null there for eagle3/dflash/dspark)."""
    out: dict[tuple[str, str], str] = {}
    for pair, spec in (config.get("models") or {}).items():
        for sname, scheme in (config.get("schemes") or {}).items():
            path = scheme.get("drafter") or (spec.get("drafters") or {}).get(scheme.get("method"))
            if path:
                out[(pair, sname)] = str(path)
    return out


def drafter_path(row: Mapping[str, Any], drafters: DrafterPaths | None = None) -> tuple[str | None, str]:
    """(drafter dir, where it came from) of a GPU-drafted cell: the record's ``draft_model``; else the
    config's drafter for its pair and scheme; else, for MTP, the target (its MTP layers draft)."""
    if row.get("draft_model"):
        return row["draft_model"], "record"
    configured = (drafters or {}).get((row.get("model_pair"), row.get("scheme")))
    if configured:
        return configured, "config (the record names no drafter)"
    if row.get("method") == "mtp":
        return row.get("target_model"), "target (its MTP layers)"
    return None, "none"


def _work_for(
    row: Mapping[str, Any], lookup: ShapeLookup, cache: dict, drafters: DrafterPaths | None = None
) -> CellWork:
    tp = row.get("tensor_parallel_size") or 1
    if tp > 1:  # neither a baseline to fit on nor a cell to predict (ADR 0155)
        raise NotModelled(
            f"tensor-parallel cell (TP = {tp}): the roofline prices one GPU's weight and KV traffic; "
            f"split weights and the all-reduces between GPUs are not modelled"
        )
    target = _shape_for(lookup, cache, row.get("target_model"), "target")
    method = row.get("method") or "baseline"
    drafter = None
    if method != "baseline" and method not in HOST_METHODS:
        path, _ = drafter_path(row, drafters)
        drafter = _shape_for(lookup, cache, path, _drafter_role(method))
    return cell_work(row, target, drafter)


def _measured(row: Mapping[str, Any]) -> bool:
    return (
        row.get("status") in (None, "measured")
        and row.get("energy_j") is not None
        and (row.get("requests_failed") or 0) == 0
        and bool(row.get("committed_tokens"))
    )


@dataclass
class Fitted:
    """Every GPU's hardware, the fits on its baselines and their bootstrap resamples."""

    hardware: dict[str, Hardware | NotModelled]
    work: dict[str, CellWork | NotModelled]
    obs: list[BaselineObs]
    fits: tuple[dict, dict]
    boot: list[tuple[dict, dict]]

    def lookup_fit(
        self, r: Mapping[str, Any], fits: tuple[dict, dict] | None = None, borrow: bool = False
    ) -> tuple[Coefficients, TimeModel]:
        """The fitted coefficients and pass-time model for a cell. ``borrow``: a target with no baseline on
        this GPU and engine takes the median pass-time fit of the engine's other targets there (used for
        extrapolation to models not yet measured, and labelled so)."""
        fits = fits or self.fits
        gpu = r.get("gpu_uuid")
        hw = self.hardware.get(gpu)
        if hw is None:
            raise NotModelled(f"no record or calibration of GPU {gpu}")
        if isinstance(hw, NotModelled):
            raise hw
        co = fits[0].get(gpu)
        tm = fits[1].get(time_group(r))
        if tm is None and borrow:
            same = [
                t
                for g, t in fits[1].items()
                if isinstance(t, TimeModel) and g[0] == gpu and g[1] == r.get("engine") and g[3] == r.get("cuda_graphs")
            ]
            if same:
                tm = TimeModel(
                    float(np.median([t.t0_s for t in same])),
                    float(np.median([t.slowdown for t in same])),
                    same[0].ceilings,
                )
        if co is None or tm is None:
            raise NotModelled(
                f"no measured baseline for {r.get('engine')} {r.get('target_model')} on GPU {gpu} "
                f"(cuda_graphs {r.get('cuda_graphs')}) to fit on"
            )
        for f in (co, tm):
            if isinstance(f, NotModelled):
                raise f
        return co, tm


def fit(
    records: pl.DataFrame,
    lookup: ShapeLookup,
    calibrations: list[Mapping[str, Any]],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    cache: dict | None = None,
    drafters: DrafterPaths | None = None,
) -> Fitted:
    """Price every record's work and fit each GPU's coefficients on its measured baseline cells."""
    rows = records.to_dicts()
    cache = {} if cache is None else cache
    hardware: dict[str, Hardware | NotModelled] = {}
    work: dict[str, CellWork | NotModelled] = {}
    for r in rows:
        gpu = r.get("gpu_uuid")
        if gpu not in hardware:
            try:
                hardware[gpu] = hardware_for(
                    gpu, (r.get("gpu_names") or [None])[0], r.get("driver_version"), calibrations
                )
            except NotModelled as exc:
                hardware[gpu] = exc
        try:
            work[r["cell_id"]] = _work_for(r, lookup, cache, drafters)
        except NotModelled as exc:
            work[r["cell_id"]] = exc

    baselines = [
        r
        for r in rows
        if r.get("method") in (None, "baseline")
        and _measured(r)
        and isinstance(work.get(r["cell_id"]), CellWork)
        and isinstance(hardware.get(r.get("gpu_uuid")), Hardware)
    ]
    obs = [observe_baseline(r, work[r["cell_id"]], hardware[r["gpu_uuid"]].ceilings) for r in baselines]

    def fit_all(sample: list[BaselineObs]) -> tuple[dict, dict]:
        coeffs: dict[str, Coefficients | NotModelled] = {}
        times: dict[tuple, TimeModel | NotModelled] = {}
        for gpu in {o.gpu for o in sample}:
            try:
                coeffs[gpu] = fit_coefficients([o for o in sample if o.gpu == gpu], hardware[gpu].prior)
            except NotModelled as exc:
                coeffs[gpu] = exc
        for grp in {o.time_group for o in sample}:
            try:
                times[grp] = fit_time_model([o for o in sample if o.time_group == grp], hardware[grp[0]].ceilings)
            except NotModelled as exc:
                times[grp] = exc
        return coeffs, times

    rng = np.random.default_rng(seed)
    boot: list[tuple[dict, dict]] = []
    strata: dict[tuple, list[BaselineObs]] = {}
    for o in obs:
        strata.setdefault((o.time_group, o.batch), []).append(o)
    for _ in range(resamples if obs else 0):
        # Resample within each (GPU, engine, target, graphs, B) stratum, so that every resample keeps the
        # batch sizes that make the pass-time fit identifiable.
        sample = [g[i] for g in strata.values() for i in rng.integers(0, len(g), len(g))]
        boot.append(fit_all(sample))
    return Fitted(hardware, work, obs, fit_all(obs), boot)


def model_cells(
    records: pl.DataFrame,
    lookup: ShapeLookup,
    calibrations: list[Mapping[str, Any]],
    balance_fallback: float | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    drafters: DrafterPaths | None = None,
) -> RooflineResult:
    """Fit on the baselines of each GPU, predict every measured cell, split and cross over. ``drafters``:
    the config's drafter per (pair, scheme), for records that name none (``configured_drafters``)."""
    f = fit(records, lookup, calibrations, resamples, seed, drafters=drafters)
    boot_params = _bootstrap_params(f.boot)
    out_rows = [
        _cell_row(
            r,
            f.work[r["cell_id"]],
            f.hardware.get(r.get("gpu_uuid")),
            f.fits,
            boot_params,
            f.lookup_fit,
            balance_fallback,
        )
        for r in records.to_dicts()
    ]
    for r, row in zip(records.to_dicts(), out_rows):
        if (r.get("method") or "baseline") not in ("baseline", *HOST_METHODS):
            row["drafter_path"], row["drafter_source"] = drafter_path(r, drafters)
    cells = (
        pl.DataFrame(out_rows, schema=ROOFLINE_SCHEMA, orient="row")
        if out_rows
        else pl.DataFrame(schema=ROOFLINE_SCHEMA)
    )
    cells = _matched_split(cells, records)
    return RooflineResult(
        cells,
        _fit_table(f.obs, f.hardware, f.fits[0], f.boot),
        _time_table(f.obs, f.fits[1]),
        crossover_table(records, f.work, f.hardware, f.fits, f.boot, f.lookup_fit),
        hardware_table(calibrations),
    )


def _bootstrap_params(boot: list[tuple[dict, dict]]) -> dict[tuple, np.ndarray]:
    """Per time group: the resampled fits as rows of [P_static, J/byte, J/op, t0, slowdown]."""
    out: dict[tuple, list] = {}
    for coeffs, times in boot:
        for grp, tm in times.items():
            co = coeffs.get(grp[0])
            if isinstance(tm, TimeModel) and isinstance(co, Coefficients):
                out.setdefault(grp, []).append([co.static_w, co.j_per_byte, co.j_per_op, tm.t0_s, tm.slowdown])
    return {g: np.array(v) for g, v in out.items()}


def _cell_row(
    r: Mapping[str, Any],
    w: CellWork | NotModelled,
    hw: Hardware | NotModelled | None,
    fits: tuple[dict, dict],
    boot: dict[tuple, np.ndarray],
    lookup_fit,
    balance_fallback: float | None,
) -> dict:
    base = {
        k: r.get(k)
        for k in (
            "cell_id",
            "campaign_id",
            "cell_name",
            "role",
            "engine",
            "model_pair",
            "scheme",
            "method",
            "k",
            "batch_size",
            "gpu_uuid",
        )
    }
    base["target_family"] = r.get("target_family") or getattr(w, "target_family", None)
    out = dict.fromkeys(ROOFLINE_SCHEMA) | base
    measured_mj = r.get("mj_per_committed_token") if _measured(r) else None
    out["measured_mj_per_committed_token"] = measured_mj
    if r.get("window_s") and r.get("committed_tokens"):
        out["measured_s_per_committed_token"] = r["window_s"] / r["committed_tokens"]
    if isinstance(hw, Hardware):
        # Measured wins: the config's value is only the fallback for a GPU without a calibration (ADR 0102).
        out["hardware_source"] = hw.source
        out["balance_point_op_per_byte"] = hw.balance_point
        out["balance_point_source"] = f"{hw.source} calibration of {hw.calibration_uuid}"
        out["measured_op_per_byte"] = hw.measured_op_per_byte(r.get("dram_bw_util_pct"), r.get("tensor_active_pct"))
    elif balance_fallback:
        out["balance_point_op_per_byte"] = balance_fallback
        out["balance_point_source"] = "config report.balance_point_op_per_byte (no calibration of this GPU)"
    try:
        if r.get("status") not in (None, "measured"):
            raise NotModelled(f"cell status {r.get('status')!r}")
        if isinstance(w, NotModelled):
            raise w
        if w.verify_routed_bytes and isinstance(hw, Hardware):
            # The board's own HBM ceiling, not the fit's: the floor is physics, whatever the fit makes of it.
            floor_ms = 1e3 * w.verify_routed_bytes / hw.ceilings.hbm_bytes_per_s
            out["expert_floor_ms"] = floor_ms
            if r.get("round_time_ms"):
                out["below_expert_floor"] = bool(r["round_time_ms"] < floor_ms)
        out.update(
            verify_width=w.verify_width,
            accepted_length=w.accepted_length,
            draft_passes_per_round=w.n_draft_passes,
            verify_bytes=w.verify.bytes,
            verify_ops=w.verify.ops,
            draft_bytes_per_round=w.draft_pass.bytes * w.n_draft_passes,
            draft_ops_per_round=w.draft_pass.ops * w.n_draft_passes,
            modelled_op_per_byte=w.verify.op_per_byte,
        )
        co, tm = lookup_fit(r, fits)
        p = predict(w, co, tm)
        out["predicted_mj_per_committed_token"] = p.mj_per_committed_token
        out["predicted_s_per_committed_token"] = p.s_per_committed_token
        params = boot.get(time_group(r))
        if params is not None and len(params) >= 20:
            samples = mj_from_features(token_features(w, tm.ceilings), params)
            out["predicted_mj_low"], out["predicted_mj_high"] = (float(x) for x in np.quantile(samples, [0.025, 0.975]))
        if measured_mj is not None:
            out["residual"] = measured_mj / p.mj_per_committed_token - 1.0
        if w.n_draft_passes or r.get("method") not in (None, "baseline"):
            out.update(_split(r, w, co, tm, p))
        out["model_status"] = "modelled"
    except NotModelled as exc:
        out["model_status"] = "not_modelled"
        out["not_modelled_reason"] = str(exc)
    return out


def _split(r: Mapping[str, Any], w: CellWork, co: Coefficients, tm: TimeModel, p: Prediction) -> dict:
    """Verify / draft / idle shares of a speculative cell: the model's per-round energies, and static power
    over the measured time per round the modelled GPU passes do not explain (host-side drafting, scheduling
    gaps). Without a measured time, idle is the model's own (none)."""
    rounds = None
    committed, accepted = r.get("committed_tokens"), r.get("accepted_tokens")
    if committed and accepted is not None and r.get("window_s"):
        request_steps = committed - accepted
        rounds = request_steps / w.batch if request_steps > 0 else None
    idle_j = 0.0
    if rounds:
        batches = committed / w.committed_per_batch
        t_prompt = tm.pass_s(w.prompt) + tm.t0_s * w.draft_overhead_share * w.prompt_draft_passes
        unexplained = r["window_s"] / rounds - p.round_s - batches * t_prompt / rounds
        idle_j = co.static_w * max(0.0, unexplained)
    total = p.verify_j + p.draft_j + idle_j
    return {
        "energy_verify_share": p.verify_j / total,
        "energy_draft_share": p.draft_j / total,
        "energy_idle_share": idle_j / total,
    }


def _matched_split(cells: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """Draft share by removing the draft: a host-drafted (n-gram) arm of the same campaign at the same k, B
    and acceptance vector verifies the same tokens with no drafter on the GPU; the draft's share of a round's
    energy is 1 − E_round(n-gram) / E_round(cell)."""
    if not cells.height:
        return cells
    need = {"energy_j", "committed_tokens", "accepted_tokens", "batch_size"}
    if not need <= set(records.columns):
        return cells
    per_round = records.select(
        "cell_id",
        "campaign_id",
        "cell_name",
        "method",
        "k",
        "batch_size",
        "acceptance_name",
        (C("energy_j") * C("batch_size") / (C("committed_tokens") - C("accepted_tokens").fill_null(0))).alias(
            "e_round"
        ),
    )
    host = per_round.filter(C("method").is_in(list(HOST_METHODS))).select(
        "campaign_id", "k", "batch_size", "acceptance_name", C("cell_name").alias("_m_name"), C("e_round").alias("_m_e")
    )
    gpu_drafted = per_round.filter(~C("method").is_in(list(HOST_METHODS) + ["baseline"]))
    matched = gpu_drafted.join(
        host, on=["campaign_id", "k", "batch_size", "acceptance_name"], how="left", nulls_equal=True
    ).unique("cell_id", keep="first")
    matched = matched.select(
        "cell_id",
        C("_m_name").alias("_matched_name"),
        pl.when(C("_m_e").is_not_null() & (C("e_round") > 0))
        .then(1.0 - C("_m_e") / C("e_round"))
        .alias("_matched_share"),
    )
    out = cells.join(matched, on="cell_id", how="left")
    is_spec = ~C("method").is_in(["baseline"]) & C("method").is_not_null()
    host_arm = C("method").is_in(list(HOST_METHODS))
    return (
        out.with_columns(
            C("_matched_share").alias("energy_draft_share_matched"),
            C("_matched_name").alias("matched_cell_name"),
            pl.when(~is_spec)
            .then(None)
            .when(host_arm)
            .then(pl.lit("host-drafted arm: its draft runs on the CPU, off the GPU board"))
            .when(C("_matched_name").is_null())
            .then(pl.lit("no host-drafted (ngram) arm at the same campaign, k, B and acceptance in the grid"))
            .alias("matched_reason"),
        )
        .drop("_matched_share", "_matched_name")
        .select(list(ROOFLINE_SCHEMA))
        .cast(ROOFLINE_SCHEMA)
    )


def _interval(values: list[float]) -> tuple[float | None, float | None]:
    if len(values) < 20:
        return None, None
    lo, hi = np.quantile(values, [0.025, 0.975])
    return float(lo), float(hi)


def _fit_table(obs: list[BaselineObs], hardware: dict, coeffs: dict, boot: list) -> pl.DataFrame:
    rows = []
    for gpu, co in sorted(coeffs.items()):
        if not isinstance(co, Coefficients):
            continue
        hw = hardware[gpu]
        samples = [b[0][gpu] for b in boot if isinstance(b[0].get(gpu), Coefficients)]
        s_lo, s_hi = _interval([s.static_w for s in samples])
        b_lo, b_hi = _interval([s.j_per_byte * 1e12 for s in samples])
        o_lo, o_hi = _interval([s.j_per_op * 1e12 for s in samples])
        rows.append(
            {
                "gpu_uuid": gpu,
                "hardware_source": hw.source,
                "calibration_uuid": hw.calibration_uuid,
                "n_baselines": sum(o.gpu == gpu for o in obs),
                "static_w": co.static_w,
                "static_w_low": s_lo,
                "static_w_high": s_hi,
                "pj_per_byte": co.j_per_byte * 1e12,
                "pj_per_byte_low": b_lo,
                "pj_per_byte_high": b_hi,
                "pj_per_op": co.j_per_op * 1e12,
                "pj_per_op_low": o_lo,
                "pj_per_op_high": o_hi,
                "prior_static_w": hw.prior.static_w,
                "prior_pj_per_byte": hw.prior.j_per_byte * 1e12,
                "prior_pj_per_op": hw.prior.j_per_op * 1e12,
            }
        )
    return pl.DataFrame(rows, schema=FIT_SCHEMA) if rows else pl.DataFrame(schema=FIT_SCHEMA)


def _time_table(obs: list[BaselineObs], times: dict) -> pl.DataFrame:
    rows = []
    for grp, tm in sorted(times.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if isinstance(tm, TimeModel):
            rows.append(
                {
                    "gpu_uuid": grp[0],
                    "engine": grp[1],
                    "target_model": grp[2],
                    "cuda_graphs": grp[3],
                    "n_baselines": sum(o.time_group == grp for o in obs),
                    "t0_ms": tm.t0_s * 1000,
                    "slowdown": tm.slowdown,
                }
            )
    return pl.DataFrame(rows, schema=TIME_SCHEMA) if rows else pl.DataFrame(schema=TIME_SCHEMA)


def hardware_table(calibrations: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """results/hardware.parquet: one row per calibration JSON."""
    rows = []
    for cal in calibrations:
        c = cal["constants"]
        rows.append(
            {
                "gpu_uuid": cal["gpu_uuid"],
                "gpu_name": cal.get("gpu_name"),
                "driver_version": cal["driver_version"],
                "measured_at": cal.get("measured_at"),
                "hbm_tb_per_s": c["hbm_bytes_per_s"] / 1e12,
                "bf16_tflop_per_s": c["bf16_ops_per_s"] / 1e12,
                "balance_point_op_per_byte": c["balance_point_op_per_byte"],
                "static_power_w": c["static_power_w"],
                "pj_per_byte": c["energy_per_byte_j"] * 1e12,
                "pj_per_op": c["energy_per_op_j"] * 1e12,
                "reduce_check_relative_error": (c.get("reduce_check") or {}).get("relative_error"),
                "method": c.get("method"),
                "path": cal.get("path"),
            }
        )
    schema = {
        "gpu_uuid": pl.String,
        "gpu_name": pl.String,
        "driver_version": pl.String,
        "measured_at": pl.String,
        "hbm_tb_per_s": pl.Float64,
        "bf16_tflop_per_s": pl.Float64,
        "balance_point_op_per_byte": pl.Float64,
        "static_power_w": pl.Float64,
        "pj_per_byte": pl.Float64,
        "pj_per_op": pl.Float64,
        "reduce_check_relative_error": pl.Float64,
        "method": pl.String,
        "path": pl.String,
    }
    return pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)


# ------------------------------------------------------------------------------------------------
# crossover


def measured_crossover(points: list[tuple[float, float]]) -> tuple[float | None, str]:
    """(L, how) where the measured energy ratio crosses 1 between adjacent acceptance lengths, or (None, why not)
    when the grid does not bracket it.

    Between the two bracketing points the ratio is taken as a + b/L (ADR 0233): a round commits L tokens per
    sequence, so ratio × L is the round's energy over a plain step's, and that is interpolated linearly in L. A
    straight line through the ratio itself lies above a ratio that falls as 1/L and put the crossover late
    (EAGLE3 on Qwen3.6, 2026-12-04d: 3.22 where the round's energy, the same at L = 1 and 4, crosses at 2.24)."""
    pts = sorted((L, ratio) for L, ratio in points if L is not None and ratio is not None)
    if len(pts) < 2:
        return None, f"{len(pts)} measured point(s): nothing to bracket"
    for (l0, r0), (l1, r1) in zip(pts, pts[1:]):
        if (r0 - 1.0) * (r1 - 1.0) <= 0 and r0 != r1:
            if l0 == l1 or r0 == 1.0:  # two cells at one L (other acceptance vectors), or a point at ratio 1
                L = l0
            elif r1 == 1.0:
                L = l1
            else:
                a = (r1 * l1 - r0 * l0) / (l1 - l0)  # ratio = a + b / L through both points
                b = l0 * l1 * (r0 - r1) / (l1 - l0)
                L = b / (1.0 - a)
            return L, f"between L = {l0:.3g} (ratio {r0:.3g}) and L = {l1:.3g} (ratio {r1:.3g})"
    side = "above" if pts[0][1] > 1 else "below"
    return None, f"not bracketed: every ratio {side} 1 over L = {pts[0][0]:.3g} … {pts[-1][0]:.3g}"


def crossover_table(
    records: pl.DataFrame, work: dict, hardware: dict, fits: tuple[dict, dict], boot: list, lookup_fit
) -> pl.DataFrame:
    rows = records.to_dicts()
    base_by_key = {}
    for r in rows:
        if r.get("method") in (None, "baseline") and isinstance(work.get(r["cell_id"]), CellWork):
            base_by_key.setdefault((r.get("campaign_id"), r.get("batch_size")), r)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("method") in (None, "baseline") or not isinstance(work.get(r["cell_id"]), CellWork):
            continue
        key = (
            r.get("target_family") or work[r["cell_id"]].target_family,
            r.get("model_pair"),
            r.get("engine"),
            r.get("gpu_uuid"),
            r.get("scheme"),
            r.get("method"),
            r.get("k"),
            r.get("batch_size"),
        )
        groups.setdefault(key, []).append(r)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        rep = members[0]
        base = base_by_key.get((rep.get("campaign_id"), rep.get("batch_size")))
        entry = dict(
            zip(("target_family", "model_pair", "engine", "gpu_uuid", "scheme", "method", "k", "batch_size"), key)
        )
        entry["verify_width"] = work[rep["cell_id"]].verify_width
        entry["n_cells"] = len(members)
        ratios = [
            (
                m.get("realized_L"),
                (m["mj_per_committed_token"] / m["baseline_mj_per_committed_token"])
                if m.get("mj_per_committed_token") and m.get("baseline_mj_per_committed_token")
                else None,
            )
            for m in members
            if _measured(m)
        ]
        entry["measured_crossover_L"], entry["measured_bracket"] = measured_crossover(ratios)
        if base is not None:
            spec_w = work[rep["cell_id"]]  # its verify pass at its own measured width
            base_w = work[base["cell_id"]]
            try:
                entry["predicted_crossover_L"] = crossover_length(spec_w, base_w, *lookup_fit(rep, fits))
                samples = []
                for b in boot:
                    try:
                        samples.append(crossover_length(spec_w, base_w, *lookup_fit(rep, b)))
                    except NotModelled:
                        pass
                entry["predicted_crossover_L_low"], entry["predicted_crossover_L_high"] = _interval(samples)
            except NotModelled:
                pass
        out.append(entry)
    return pl.DataFrame(out, schema=CROSSOVER_SCHEMA) if out else pl.DataFrame(schema=CROSSOVER_SCHEMA)


# ------------------------------------------------------------------------------------------------
# glue: shapes, files, the curves, the check, the plan


def models_lookup(path: str, role: str) -> Any:
    """Shapes from ``specjoule.models``: ``describe`` for targets and draft models, ``describe_drafter`` for
    heads and block drafters."""
    try:
        from specjoule import models
    except ImportError as exc:
        raise NotModelled(f"specjoule.models is not in this tree ({exc}): model shapes cannot be read") from exc
    if role in ("target", "draft_model"):
        return models.describe(path)
    return models.describe_drafter(path)


def load_calibrations(directory: str) -> list[dict[str, Any]]:
    from specjoule import hardware as hw

    return hw.find_calibrations(directory)


def write_tables(result: RooflineResult, paths: Mapping[str, str], config_hash: str | None) -> None:
    from specjoule.analysis import META_CONFIG_HASH, write_parquet_atomic

    meta = {META_CONFIG_HASH: config_hash or ""}
    for name in ("cells", "fit", "time", "crossover", "hardware"):
        write_parquet_atomic(getattr(result, name), paths[name], meta)


CURVE_ROOFLINE_COLUMNS = (
    "predicted_mj_per_committed_token",
    "predicted_mj_low",
    "predicted_mj_high",
    "residual",
    "energy_verify_share",
    "energy_draft_share",
    "energy_idle_share",
    "energy_draft_share_matched",
    "matched_cell_name",
    "model_status",
    "not_modelled_reason",
    "modelled_op_per_byte",
    "measured_op_per_byte",
    "balance_point_op_per_byte",
    "balance_point_source",
    "expert_floor_ms",
    "below_expert_floor",
)
#: Appended after those, per campaign rather than per cell: any of the campaign's baselines below its floor (ADR 0242).
CURVE_CAMPAIGN_ROOFLINE_COLUMNS = ("baseline_below_expert_floor",)


def attach_to_curves(curves: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """curves.parquet gains the model's columns (appended, by cell_id); rows the model did not price keep
    them null with ``model_status``/``not_modelled_reason`` saying why. Energy the derive step refused
    stays refused: its predicted columns are kept (the model does not need the meter), the residual not."""
    cols = [c for c in CURVE_ROOFLINE_COLUMNS if c in cells.columns]
    out = curves.join(cells.select("cell_id", *cols), on="cell_id", how="left")
    if {"below_expert_floor", "role", "campaign_id"} <= set(cells.columns) and "campaign_id" in out.columns:
        # A ratio is as fair as its denominator: a baseline step below the floor read fewer experts (ADR 0242).
        bases = (
            cells.filter((C("role") != axes.ROLE_POINT) & C("below_expert_floor").is_not_null())
            .group_by("campaign_id")
            .agg(C("below_expert_floor").any().alias(CURVE_CAMPAIGN_ROOFLINE_COLUMNS[0]))
        )
        out = out.join(bases, on="campaign_id", how="left")
    if "energy_refused_reason" in out.columns:
        out = out.with_columns(pl.when(C("energy_refused_reason").is_null()).then(C("residual")).alias("residual"))
    return out


def attach_for_checks(records: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """records + roofline_status / roofline_reason / roofline_residual / roofline_predicted_mj for the
    ``model_residual`` check."""
    return records.join(
        cells.select(
            "cell_id",
            C("model_status").alias("roofline_status"),
            C("not_modelled_reason").alias("roofline_reason"),
            C("residual").alias("roofline_residual"),
            C("predicted_mj_per_committed_token").alias("roofline_predicted_mj"),
        ),
        on="cell_id",
        how="left",
    )


def residual_check_exprs(
    df: pl.DataFrame, bound: float, passed: str, flagged: str, not_applicable: str
) -> tuple[pl.DataFrame, pl.Expr, pl.Expr, pl.Expr]:
    """(df, status, value, detail) of the ``model_residual`` check: |measured / predicted − 1| over
    ``bound`` is a flag (a broken measurement, or an effect the model leaves out such as a host-bound
    draft loop); not modelled or not measured is not applicable, with the reason."""
    for name, dtype in (
        ("roofline_status", pl.String),
        ("roofline_reason", pl.String),
        ("roofline_residual", pl.Float64),
        ("roofline_predicted_mj", pl.Float64),
    ):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype).alias(name))
    res = C("roofline_residual")
    unpriced = C("roofline_status").is_null() | (C("roofline_status") != "modelled")
    status = (
        pl.when(unpriced | res.is_null())
        .then(pl.lit(not_applicable))
        .when(res.abs() > bound)
        .then(pl.lit(flagged))
        .otherwise(pl.lit(passed))
    )
    detail = (
        pl.when(C("roofline_status").is_null())
        .then(
            pl.format(
                "{}: no roofline prediction (rule roofline not run, or no results/hardware/ calibration)",
                C("cell_name"),
            )
        )
        .when(unpriced)
        .then(pl.format("{}: not modelled: {}", C("cell_name"), C("roofline_reason")))
        .when(res.is_null())
        .then(pl.format("{}: no measured energy to compare", C("cell_name")))
        .when(res.abs() > bound)
        .then(
            pl.format(
                "{}: measured {} mJ/token vs predicted {} (residual {})",
                C("cell_name"),
                C("mj_per_committed_token").round_sig_figs(4),
                C("roofline_predicted_mj").round_sig_figs(4),
                res.round_sig_figs(3),
            )
        )
    )
    return df, status, res.abs(), detail


def plan_predictions(
    cells: Iterable[Any], records_path: str, hardware_dir: str, lookup: ShapeLookup = models_lookup, limit: int = 40
) -> str:
    """``make plan``: predicted energy ratios of planned cells not yet measured, from the baselines and
    calibrations already in results/. Every line says PREDICTION; empty when there is nothing to fit on."""
    from pathlib import Path

    calibrations = load_calibrations(hardware_dir) if Path(hardware_dir).is_dir() else []
    if not calibrations or not Path(records_path).is_file():
        return ""
    records = pl.read_parquet(records_path)
    if "status" in records.columns:
        records = records.filter(C("status").is_null() | (C("status") == "measured"))
    f = fit(records, lookup, calibrations, resamples=0)
    measured = set(records["cell_id"].to_list())
    # How far the model missed the cells of each engine and method measured so far: a planned cell of the
    # same kind will likely miss the same way (a host-bound draft loop is not in the roofline).
    priced = model_cells(records, lookup, calibrations, resamples=0).cells
    missed = {
        (r["engine"], r["method"]): r["residual"]
        for r in priced.filter(C("residual").is_not_null())
        .group_by("engine", "method")
        .agg(C("residual").median())
        .iter_rows(named=True)
    }
    # Predict on the GPU with the most baselines: the plan does not know which GPU a cell will get.
    gpus = [o.gpu for o in f.obs]
    if not gpus:
        return ""
    gpu = max(set(gpus), key=gpus.count)
    hw = f.hardware[gpu]
    cache: dict = {}
    lines = []
    n_pred = 0
    for cell in cells:
        row = dict(cell.identity()) | {"gpu_uuid": gpu, "engine": cell.engine, "cuda_graphs": cell.cuda_graphs}
        if row["cell_id"] in measured or row.get("method") in (None, "baseline"):
            continue
        label = f"{row['campaign_id']}/{row['cell_name']}"
        try:
            spec_w = cell_work(
                row,
                _shape_for(lookup, cache, row["target_model"], "target"),
                None
                if row["method"] in HOST_METHODS
                else _shape_for(lookup, cache, drafter_path(row)[0], _drafter_role(row["method"])),
                accepted_length=row.get("configured_L"),
            )
            base_w = cell_work(
                row | {"method": "baseline", "k": None}, _shape_for(lookup, cache, row["target_model"], "target"), None
            )
            co, tm = f.lookup_fit(row, borrow=True)
            cross = crossover_length(spec_w, base_w, co, tm)
            if row.get("configured_L"):
                ratio = predict(spec_w, co, tm).mj_per_committed_token / predict(base_w, co, tm).mj_per_committed_token
                text = f"predicted energy ratio {ratio:.3f} at L = {row['configured_L']:.3g}; break-even L {cross:.2f}"
            else:
                text = f"acceptance unknown before the run; predicted break-even L {cross:.2f}"
            past = missed.get((row["engine"], row["method"]))
            if past is not None:
                text += f" (measured {row['engine']} {row['method']} cells so far: median residual {past:+.2f})"
        except NotModelled as exc:
            text = f"not modelled: {exc}"
        n_pred += 1
        if len(lines) < limit:
            lines.append(f"  PREDICTION (not measured) {label}: {text}")
    if not n_pred:
        return ""
    head = (
        f"Roofline predictions for {n_pred} planned speculative cell(s) not yet measured — PREDICTIONS, not "
        f"measurements: coefficients fitted on {gpus.count(gpu)} baseline cell(s) of GPU {gpu} ({hw.source} "
        f"calibration), ADR 0102:"
    )
    more = [f"  … and {n_pred - limit} more"] if n_pred > limit else []
    return "\n".join([head, *lines, *more])


def main(argv: list[str] | None = None) -> None:
    """``python -m specjoule.analysis.roofline RECORDS… --hardware DIR [--config CFG] --out DIR``: the rule's
    library call on records.parquet files the workflow cannot re-aggregate (an incomplete campaign's committed
    records; several campaigns of one GPU fitted together), writing the same five tables."""
    import argparse
    from pathlib import Path

    import yaml

    from specjoule import hardware as hw

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0] if main.__doc__ else None)
    ap.add_argument(
        "records", nargs="+", help="records.parquet files (several: one table, e.g. two configs' sweeps on one GPU)"
    )
    ap.add_argument("--hardware", required=True, help="a folder of GPU-*.json calibrations")
    ap.add_argument("--config", help="the config that ran the records (its drafters, for records naming none)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    calibrations = [{**hw.load(p), "path": str(p)} for p in sorted(Path(a.hardware).glob("GPU-*.json"))]
    drafters = configured_drafters(yaml.safe_load(Path(a.config).read_text())) if a.config else None
    records = pl.concat([pl.read_parquet(p) for p in a.records], how="diagonal_relaxed")
    result = model_cells(records, models_lookup, calibrations, drafters=drafters)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    names = {
        "cells": "roofline",
        "fit": "roofline_fit",
        "time": "roofline_time",
        "crossover": "crossover",
        "hardware": "hardware",
    }
    write_tables(result, {k: f"{a.out}/{v}.parquet" for k, v in names.items()}, None)
    modelled = result.cells.filter(C("model_status") == "modelled")
    print(
        f"{modelled.height} of {result.cells.height} cells modelled; residuals: "
        + ", ".join(
            f"{r['cell_name']} {r['residual']:+.3f}"
            for r in modelled.iter_rows(named=True)
            if r["residual"] is not None
        )
    )


if __name__ == "__main__":
    main()
