"""pass@k, mean@k and the confidence intervals against hand computations."""

from __future__ import annotations

import itertools
import math

import pytest

from eval.metrics import (
    bootstrap_interval,
    confidence_interval,
    mean_at_k,
    pass_at_k,
    pass_at_k_levels,
    wilson_interval,
    z_score,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (4, 1, 1, 1 / 4),  # pass@1 = c/n
        (10, 0, 3, 0.0),
        (10, 10, 10, 1.0),
        (6, 3, 2, 1 - 3 / 15),  # 1 - C(3,2)/C(6,2)
        (200, 1, 100, 0.5),  # 1 - C(199,100)/C(200,100) = 1 - 100/200
    ],
)
def test_pass_at_k_matches_unbiased_formula(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 3, 3), (4, 2, 3), (3, 1, 3), (8, 8, 1)])
def test_pass_at_k_is_one_when_every_k_subset_holds_a_correct_completion(n, c, k):
    assert n - c < k
    assert pass_at_k(n, c, k) == 1.0


def test_pass_at_k_equals_the_share_of_k_subsets_with_a_correct_completion():
    n = 7
    for c in range(n + 1):
        correct = [index < c for index in range(n)]
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(correct, k))
            share = sum(any(subset) for subset in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(share, abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_at_k_and_levels():
    assert mean_at_k([1.0, 0.0, 0.5, 0.5]) == 0.5
    assert pass_at_k_levels(1) == [1]
    assert pass_at_k_levels(4) == [1, 2, 4]
    assert pass_at_k_levels(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError):
        mean_at_k([])


def test_wilson_interval_by_hand():
    # 8 of 10 at 95%: z = 1.959964; centre = (0.8 + z²/20) / (1 + z²/10),
    # half = z / (1 + z²/10) * sqrt(0.8 * 0.2 / 10 + z²/400).
    z = 1.959963984540054
    shrink = 1 + z * z / 10
    centre = (0.8 + z * z / 20) / shrink
    half = z / shrink * math.sqrt(0.016 + z * z / 400)
    low, high = wilson_interval(8, 10)
    assert (low, high) == pytest.approx((centre - half, centre + half), abs=1e-12)
    assert (low, high) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # published value for 8/10


def test_wilson_interval_edges():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.2 < high < 0.35  # exactly 0 (a chart's error bar can't go negative); never [0, 0]
    assert wilson_interval(10, 10)[1] == 1.0
    assert all(math.isnan(bound) for bound in wilson_interval(0, 0))
    assert z_score(0.99) == pytest.approx(2.5758, abs=1e-4)


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [0.1, 0.9, 0.4, 0.7, 0.3, 0.55, 0.8, 0.2]
    low, high = bootstrap_interval(values, seed=3)
    assert low < sum(values) / len(values) < high
    assert bootstrap_interval(values, seed=3) == (low, high)
    assert bootstrap_interval([0.4] * 5) == pytest.approx((0.4, 0.4))


def test_confidence_interval_uses_wilson_for_binary_and_bootstrap_otherwise():
    binary = [1.0, 0.0, 1.0, 1.0]
    assert confidence_interval(binary) == wilson_interval(3, 4)
    graded = [1.0, 0.5, 0.25, 0.0]
    assert confidence_interval(graded, seed=1) == bootstrap_interval(graded, seed=1)
