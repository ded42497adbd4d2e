"""Digits a number may carry (specjoule.report.numbers, ADR 0091): expected strings worked out by hand
from the rule "the last digit sits at the place of the interval half-width's first significant digit"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specjoule.report import numbers as N


@pytest.mark.parametrize("lo,hi,decimals", [
    (0.9012, 0.9456, 2),   # half-width 0.0222
    (5.44, 9.88, 0),       # half-width 2.22
    (10.0, 54.0, -1),      # half-width 22
    (0.99, 1.01, 2),       # half-width 0.01 exactly: first digit in the hundredths
    (0.1, 0.3, 1),         # half-width 0.1
])
def test_interval_decimals_by_hand(lo, hi, decimals):
    assert N.interval_decimals(lo, hi) == decimals


@pytest.mark.parametrize("lo,hi", [(1.0, 1.0), (2.0, 1.0), (None, 1.0), (float("nan"), 1.0), (0.0, float("inf"))])
def test_no_decimals_without_a_real_interval(lo, hi):
    assert N.interval_decimals(lo, hi) is None


@pytest.mark.parametrize("value,lo,hi,expected", [
    (0.9234, 0.9012, 0.9456, ("0.92", "0.90", "0.95")),
    (7.66, 5.44, 9.88, ("8", "5", "10")),
    (123.4, 100.0, 144.0, ("120", "100", "140")),
    (-0.004, -0.3, 0.3, ("0.0", "-0.3", "0.3")),  # no "-0.0"
    (0.36273, 0.36270, 0.36276, ("0.36273", "0.36270", "0.36276")),  # a tight interval supports five digits
])
def test_round_to_interval_by_hand(value, lo, hi, expected):
    r = N.round_to_interval(value, lo, hi)
    assert (r.value, r.lo, r.hi) == expected and r.has_interval
    assert r.text() == f"{expected[0]} [{expected[1]}, {expected[2]}]"


def test_without_an_interval_two_significant_digits_and_approximately():
    r = N.round_to_interval(0.9234, None, None)
    assert (r.value, r.has_interval, r.text()) == ("0.92", False, "≈ 0.92")
    assert N.round_to_interval(1234.5, None, None).value == "1200"
    assert N.round_to_interval(0.9234, 0.9, 0.9).text() == "≈ 0.92"  # zero width is no interval


def test_round_refuses_a_non_number():
    with pytest.raises(ValueError, match="not a finite number"):
        N.round_to_interval(float("nan"), 0.0, 1.0)


@given(st.floats(-1e4, 1e4), st.floats(1e-6, 1e3), st.floats(0, 1))
def test_quoted_place_matches_the_half_width(center, half, where):
    lo, hi = center - half, center + half
    value = lo + where * (hi - lo)
    r = N.round_to_interval(value, lo, hi)
    unit = 10.0 ** -r.decimals
    # The last quoted digit is the half-width's first significant one: unit ≤ half < 10 × unit.
    assert unit <= half * (1 + 1e-9) and half < 10 * unit * (1 + 1e-9)
    # Rounding moves a number by at most half a unit of that place.
    for text, x in ((r.value, value), (r.lo, lo), (r.hi, hi)):
        assert abs(float(text) - x) <= unit / 2 * (1 + 1e-6) + 1e-9
        assert "." not in text if r.decimals <= 0 else len(text.split(".")[1]) == r.decimals


@pytest.mark.parametrize("ratio,lo,hi,words", [
    (0.9234, 0.9012, 0.9456, "8 % less [5, 10 %]"),       # saving 7.66 [5.44, 9.88]
    (1.04, 1.02, 1.06, "4 % more [2, 6 %]"),               # saving −4 [−6, −2]
    (0.97, 0.93, 1.01, "between 1 % more and 7 % less (interval holds the baseline)"),
    (0.9234, None, None, "≈ 7.7 % less"),
    (1.2, None, None, "≈ 20 % more"),
])
def test_saving_words(ratio, lo, hi, words):
    assert N.saving_words(ratio, lo, hi) == words


def test_support_text_names_every_level_and_the_interval():
    assert N.support_text(2, 3, 2, 2, "engine_replicate", True) == \
        "2 windows × 3 seeds × 2 engine replicates on 2 GPUs; 95 % interval over engine replicates"
    assert N.support_text(1, 2, 1, 2, "seed", True) == "1 window × 2 seeds × 1 engine replicate on 2 GPUs; 95 % interval over seeds"
    assert N.support_text(1, 2, 1, 1, None, False) == "1 window × 2 seeds × 1 engine replicate on 1 GPU; no interval"


def test_support_text_without_replicates_says_one_window_no_interval():
    assert N.support_text(None, None, None, None, None, False) == "one window, no interval"
    assert N.support_text(1, 1, 1, 1, None, False) == "one window, no interval (on 1 GPU)"
    # A count a table holds as NaN is left out, not printed.
    assert N.support_text(1, 1, 1, float("nan"), None, False) == "one window, no interval"
