"""Acceptance vectors: vLLM's minimum-variance resolution, geometric at matched mean, explicit rates."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specjoule import acceptance as acc


def test_minvar_matches_vllm_resolution_example():
    # The blog/vLLM example: L=3.4 with k=5 resolves to [1, 1, 0.4, 0, 0].
    assert acc.minimum_variance(3.4, 5) == pytest.approx([1.0, 1.0, 0.4, 0.0, 0.0])


@pytest.mark.parametrize("L,k,expected", [(1.0, 5, [0.0] * 5), (6.0, 5, [1.0] * 5), (2.0, 3, [1.0, 0.0, 0.0])])
def test_minvar_edges(L, k, expected):
    assert acc.minimum_variance(L, k) == pytest.approx(expected)


lengths = st.floats(min_value=1.0, max_value=9.0, allow_nan=False)
ks = st.integers(min_value=1, max_value=8)


@given(data=st.data(), k=ks)
@settings(max_examples=200, deadline=None)
def test_minvar_properties(data, k):
    L = data.draw(st.floats(min_value=1.0, max_value=k + 1.0))
    rates = acc.minimum_variance(L, k)
    assert len(rates) == k
    assert acc.mean_acceptance_length(rates) == pytest.approx(L, abs=1e-9)
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert all(a >= b for a, b in zip(rates, rates[1:]))
    # Minimum variance: at most one position is strictly between 0 and 1.
    assert sum(0.0 < r < 1.0 for r in rates) <= 1


@given(data=st.data(), k=ks)
@settings(max_examples=200, deadline=None)
def test_geometric_properties(data, k):
    L = data.draw(st.floats(min_value=1.0, max_value=k + 1.0))
    rates = acc.geometric(L, k)
    assert acc.mean_acceptance_length(rates) == pytest.approx(L, abs=1e-6)
    assert all(a >= b - 1e-12 for a, b in zip(rates, rates[1:]))
    if 0 < rates[0] < 1:
        # Constant conditional acceptance: each rate is the previous times the first.
        for i in range(1, k):
            assert rates[i] == pytest.approx(rates[i - 1] * rates[0], rel=1e-9)


def test_geometric_spreads_more_than_minvar():
    # Same mean, different dispersion: the geometric arm is not the min-var arm in disguise.
    mv, geo = acc.minimum_variance(3.0, 5), acc.geometric(3.0, 5)
    assert acc.mean_acceptance_length(mv) == pytest.approx(acc.mean_acceptance_length(geo), abs=1e-6)
    assert geo[4] > 0 and mv[4] == 0


@given(k=ks, data=st.data())
def test_validate_rates_accepts_any_nonincreasing_vector(k, data):
    rates = sorted(data.draw(st.lists(st.floats(0, 1), min_size=k, max_size=k)), reverse=True)
    assert acc.validate_rates(rates, k) == pytest.approx(rates)


@pytest.mark.parametrize(
    "rates,k,message",
    [
        ([1.0, 0.5], 3, "k=3"),
        ([1.0, 1.2, 0.0], 3, "outside [0, 1]"),
        ([0.5, 0.7, 0.1], 3, "exceeds"),
        ([math.nan, 0.0], 2, "outside"),
    ],
)
def test_validate_rates_rejects(rates, k, message):
    with pytest.raises(acc.AcceptanceError, match=message.replace("[", r"\[").replace("]", r"\]")):
        acc.validate_rates(rates, k)


@pytest.mark.parametrize("L", [0.5, 6.5, math.nan])
def test_length_outside_range_rejected(L):
    with pytest.raises(acc.AcceptanceError, match="outside"):
        acc.minimum_variance(L, 5)
    with pytest.raises(acc.AcceptanceError, match="outside"):
        acc.geometric(L, 5)


def test_resolve_dispatches_and_rejects_unknown():
    assert acc.resolve({"minvar": 2.5}, 3) == ("minvar", pytest.approx([1.0, 0.5, 0.0]))
    with pytest.raises(acc.AcceptanceError, match="unknown kind"):
        acc.resolve({"uniform": 2.0}, 3)


# ------------------------------------------------------------------------------------------------
# exactly at the edges of what a vector may be (the slack is 1e-9, for decimal noise in hand-written YAML)

def test_rates_at_the_edges_of_zero_one_are_accepted_and_clamped():
    assert acc.validate_rates([1.0 + 1e-9, 0.5, -1e-9], 3) == [1.0, 0.5, 0.0]
    assert acc.validate_rates([1.0, 1.0, 0.0], 3) == [1.0, 1.0, 0.0]
    for bad in (1.0 + 3e-9, -3e-9):
        with pytest.raises(acc.AcceptanceError, match="outside"):
            acc.validate_rates([bad], 1)


def test_equal_rates_are_non_increasing_and_the_slack_covers_decimal_noise():
    assert acc.validate_rates([0.5, 0.5, 0.5 + 1e-9], 3) == [0.5, 0.5, 0.5 + 1e-9]
    with pytest.raises(acc.AcceptanceError) as err:
        acc.validate_rates([0.5, 0.7, 0.1], 3)
    assert str(err.value) == ("rate 0.7 at position 1 exceeds 0.5 at position 0: unconditional acceptance cannot "
                              "increase along the draft")
    with pytest.raises(acc.AcceptanceError, match=r"^rate 0.4 at position 2 exceeds 0.3 at position 1:"):
        acc.validate_rates([0.9, 0.3, 0.4], 3)


def test_mean_length_at_its_bounds_and_just_past_them():
    assert acc.minimum_variance(1.0 - 1e-9, 3) == [0.0, 0.0, 0.0]
    assert acc.minimum_variance(4.0 + 1e-9, 3) == [1.0, 1.0, 1.0]
    assert acc.geometric(1.0, 3) == pytest.approx([0.0] * 3, abs=1e-12) and acc.geometric(4.0, 3) == pytest.approx([1.0] * 3, abs=1e-12)
    with pytest.raises(acc.AcceptanceError) as err:
        acc.minimum_variance(4.5, 3)
    assert str(err.value) == "mean acceptance length 4.5 is outside [1, k+1] = [1, 4]"
    with pytest.raises(acc.AcceptanceError, match=r"= \[1, 4\]$"):
        acc.geometric(1.0 - 3e-9, 3)


def test_minvar_drops_a_fraction_below_the_noise_and_keeps_decimal_values_exact():
    assert acc.minimum_variance(2.0 + 5e-10, 3) == [1.0, 0.0, 0.0]  # noise, not a 5e-10 acceptance
    assert acc.minimum_variance(3.4, 5) == [1.0, 1.0, 0.4, 0.0, 0.0]  # 0.4 exactly, not 0.3999999999999999


def test_resolve_needs_exactly_one_kind():
    for spec in ({}, {"minvar": 2.0, "rates": [1.0]}):
        with pytest.raises(acc.AcceptanceError) as err:
            acc.resolve(spec, 1)
        assert str(err.value) == f"needs exactly one of minvar, geometric, rates; got {sorted(spec)}"
    assert acc.resolve({"geometric": 1.75}, 2) == ("geometric", pytest.approx([0.5, 0.25], abs=1e-12))
    assert acc.resolve({"rates": [0.9, 0.5]}, 2) == ("rates", [0.9, 0.5])


def test_conditional_rates_undo_the_prefix_product():
    # p = [0.9, 0.45, 0.09]: accept 1 with 0.9, 2 with 0.45 = 0.9 × 0.5, 3 with 0.09 = 0.45 × 0.2
    assert acc.conditional_rates([0.9, 0.45, 0.09]) == pytest.approx([0.9, 0.5, 0.2])
    assert acc.conditional_rates([1.0, 0.0, 0.0]) == [1.0, 0.0, 0.0]  # after a certain rejection, 0 (not 0/0)
    assert acc.conditional_rates([]) == []


@given(k=ks, data=st.data())
def test_conditional_rates_multiply_back_to_the_vector(k, data):
    rates = sorted(data.draw(st.lists(st.floats(0.01, 1), min_size=k, max_size=k)), reverse=True)
    cond = acc.conditional_rates(rates)
    product = 1.0
    for p, c in zip(rates, cond):
        product *= c
        assert product == pytest.approx(p, rel=1e-9)
        assert 0.0 <= c <= 1.0 + 1e-12
