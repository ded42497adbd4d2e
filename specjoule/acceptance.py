"""Synthetic acceptance vectors.

A vector holds, for each draft position i (0-based), the *unconditional* probability that
position i is accepted — the form vLLM's ``synthetic_acceptance_rates`` takes. Acceptance is
prefix-closed, so a valid vector is non-increasing, and the mean acceptance length it implies
is ``1 + sum(rates)`` (the bonus token plus the expected accepted drafts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Rates are compared with this slack: vectors written by hand in YAML carry decimal noise.
_EPS = 1e-9


class AcceptanceError(ValueError):
    """An acceptance specification that cannot describe a real speculative step."""


def conditional_rates(rates: Sequence[float]) -> list[float]:
    """Per-position acceptance given every earlier position was accepted (c_i = p_i / p_{i-1}, 0 after a 0):
    what vLLM's synthetic rejection sampler holds (``unconditional_to_conditional_rates``)."""
    return [p / q if q > 0 else 0.0 for p, q in zip(rates, [1.0, *rates[:-1]])]


def mean_acceptance_length(rates: Sequence[float]) -> float:
    """Mean committed tokens per verification implied by an unconditional rate vector."""
    return 1.0 + float(sum(rates))


def validate_rates(rates: Sequence[float], k: int) -> list[float]:
    """Check an explicit vector: length k, each rate in [0, 1], non-increasing."""
    values = [float(r) for r in rates]
    if len(values) != k:
        raise AcceptanceError(f"has {len(values)} rates but the scheme drafts k={k} tokens")
    for i, r in enumerate(values):
        if not (0.0 - _EPS <= r <= 1.0 + _EPS) or math.isnan(r):
            raise AcceptanceError(f"rate {r} at position {i} is outside [0, 1]")
    for i in range(1, k):
        if values[i] > values[i - 1] + _EPS:
            raise AcceptanceError(
                f"rate {values[i]} at position {i} exceeds {values[i - 1]} at position {i - 1}: "
                "unconditional acceptance cannot increase along the draft"
            )
    return [min(1.0, max(0.0, r)) for r in values]


def _check_length(mean_length: float, k: int) -> float:
    L = float(mean_length)
    if math.isnan(L) or L < 1.0 - _EPS or L > k + 1 + _EPS:
        raise AcceptanceError(f"mean acceptance length {mean_length} is outside [1, k+1] = [1, {k + 1}]")
    return min(float(k + 1), max(1.0, L))


def minimum_variance(mean_length: float, k: int) -> list[float]:
    """vLLM's resolution of ``synthetic_acceptance_length``: leading positions always accepted,
    one fractional position, the rest never (L=3.4, k=5 → [1, 1, 0.4, 0, 0])."""
    accepted = _check_length(mean_length, k) - 1.0
    whole = int(math.floor(accepted + _EPS))
    rates = [1.0] * whole
    if whole < k:
        frac = accepted - whole
        rates.append(round(frac, 12) if frac > _EPS else 0.0)
        rates.extend([0.0] * (k - len(rates)))
    return rates


def geometric(mean_length: float, k: int) -> list[float]:
    """Rates a, a², …, a^k (a constant per-token conditional acceptance) with mean length L.

    ``1 + Σ a^i`` is increasing in a on [0, 1], so bisection finds the unique a.
    """
    L = _check_length(mean_length, k)
    target = L - 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if sum(mid ** (i + 1) for i in range(k)) < target:
            lo = mid
        else:
            hi = mid
    a = 0.5 * (lo + hi)
    return [a ** (i + 1) for i in range(k)]


def resolve(spec: dict, k: int) -> tuple[str, list[float]]:
    """Turn a config entry ``{minvar: L}``, ``{geometric: L}`` or ``{rates: [...]}`` into
    ``(kind, rates)`` for a scheme drafting k tokens."""
    if len(spec) != 1:
        raise AcceptanceError(f"needs exactly one of minvar, geometric, rates; got {sorted(spec)}")
    ((kind, value),) = spec.items()
    if kind == "minvar":
        return kind, minimum_variance(value, k)
    if kind == "geometric":
        return kind, geometric(value, k)
    if kind == "rates":
        return kind, validate_rates(value, k)
    raise AcceptanceError(f"unknown kind {kind!r}; use minvar, geometric or rates")
