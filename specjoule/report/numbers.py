"""How many digits a number may carry, and what stands behind it (ADR 0091).

A headline that says "saves 7.66 %" when its 95 % interval runs from 5.4 to 9.9 % claims two digits
nobody measured. The rule here: the last digit quoted sits at the place of the first significant
digit of the interval's half-width, and the value and both ends are rounded to that place. Without
an interval the value keeps ``NO_INTERVAL_SIG_DIGITS`` significant digits and is marked ``≈``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NO_INTERVAL_SIG_DIGITS = 2
INTERVAL_LEVEL_WORDS = {
    "window": "windows",
    "seed": "seeds",
    "engine_replicate": "engine replicates",
    "gpu": "GPUs",
    "run": "runs",
}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def interval_decimals(lo: float, hi: float) -> int | None:
    """Decimal places an interval supports: the place of the first significant digit of its
    half-width (0.0222 → 2; 2.2 → 0; 22 → −1). None for a missing, reversed or zero-width interval."""
    if not (_finite(lo) and _finite(hi)) or hi < lo:
        return None
    half = (hi - lo) / 2
    if half <= 0:
        return None
    return -math.floor(math.log10(half))


def sig_decimals(value: float, sig: int) -> int:
    """Decimal places that keep ``sig`` significant digits of value (0 → sig − 1)."""
    if not _finite(value) or value == 0:
        return sig - 1
    return sig - 1 - math.floor(math.log10(abs(value)))


def _fixed(x: float, decimals: int) -> str:
    rounded = round(x, decimals)
    text = f"{rounded:.{max(decimals, 0)}f}"
    # "-0" and "-0.0" are zero; a sign the rounding left behind is no information.
    if float(text) == 0:
        text = text.lstrip("-")
    return text


@dataclass(frozen=True)
class Rounded:
    value: str
    lo: str | None
    hi: str | None
    decimals: int
    has_interval: bool

    def text(self, unit: str = "") -> str:
        """'0.92 [0.90, 0.95]' or '≈ 0.92' without an interval."""
        if not self.has_interval:
            return f"≈ {self.value}{unit}"
        return f"{self.value}{unit} [{self.lo}, {self.hi}]"


def round_to_interval(value: float, lo: float | None, hi: float | None) -> Rounded:
    """The value and its interval, each rounded to the place the interval supports."""
    if not _finite(value):
        raise ValueError(f"cannot round {value!r}: not a finite number")
    decimals = interval_decimals(lo, hi) if lo is not None and hi is not None else None
    if decimals is None:
        d = sig_decimals(value, NO_INTERVAL_SIG_DIGITS)
        return Rounded(_fixed(value, d), None, None, d, False)
    return Rounded(_fixed(value, decimals), _fixed(lo, decimals), _fixed(hi, decimals), decimals, True)


def saving_words(ratio: float, lo: float | None, hi: float | None) -> str:
    """A ratio to baseline as the reader's words, rounded to its interval:
    '8 % less [5, 10]', '4 % more [2, 6]', or 'between 1 % more and 7 % less' when the interval
    holds 1 (no difference can be claimed)."""
    saving = (1 - ratio) * 100
    s_lo = (1 - hi) * 100 if hi is not None else None
    s_hi = (1 - lo) * 100 if lo is not None else None
    r = round_to_interval(saving, s_lo, s_hi)
    if r.has_interval and s_lo is not None and s_hi is not None and s_lo <= 0 <= s_hi:
        more = _fixed(-s_lo, r.decimals)
        less = _fixed(s_hi, r.decimals)
        return f"between {more} % more and {less} % less (interval holds the baseline)"
    if saving >= 0:
        core = f"{r.value.lstrip('-')} % less"
        ends = f" [{r.lo}, {r.hi} %]" if r.has_interval else ""
    else:
        core = f"{_fixed(-saving, r.decimals)} % more"
        ends = f" [{_fixed(-s_hi, r.decimals)}, {_fixed(-s_lo, r.decimals)} %]" if r.has_interval else ""
    return ("≈ " if not r.has_interval else "") + core + ends


def _count(n: Any, one: str, many: str) -> str | None:
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return None
    n = int(n)
    return f"{n} {one if n == 1 else many}"


def support_text(
    n_windows: Any, n_seeds: Any, n_engine_replicates: Any, n_gpus: Any, interval_level: str | None, has_interval: bool
) -> str:
    """What stands behind a number: '2 windows × 3 seeds × 2 engine replicates on 2 GPUs; 95 %
    interval over engine replicates'. Counts a table does not carry are left out; a number without an
    interval says so ('one window, no interval' when nothing says there were more)."""
    parts = [
        p
        for p in (
            _count(n_windows, "window", "windows"),
            _count(n_seeds, "seed", "seeds"),
            _count(n_engine_replicates, "engine replicate", "engine replicates"),
        )
        if p
    ]
    gpus = _count(n_gpus, "GPU", "GPUs")
    head = " × ".join(parts) if parts else "one window"
    if gpus:
        head += f" on {gpus}"
    if not has_interval:
        if not parts or all(int(n) == 1 for n in (n_windows, n_seeds, n_engine_replicates) if n is not None):
            return "one window, no interval" + (f" (on {gpus})" if gpus else "")
        return head + "; no interval"
    level = INTERVAL_LEVEL_WORDS.get(interval_level or "", interval_level or "replicates")
    return f"{head}; 95 % interval over {level}"
