import pytest

from mmgrpo.algos.group_size import allocate_group_sizes, informative_probability


def test_informative_probability_by_hand():
    assert informative_probability(0.5, 2) == pytest.approx(0.5)
    assert informative_probability(0.0, 8) == 0.0
    assert informative_probability(1.0, 8) == 0.0
    assert informative_probability(0.1, 3) == pytest.approx(1 - 0.001 - 0.729)


def test_budget_goes_to_uncertain_prompts():
    sizes = allocate_group_sizes([0.5, 0.99, 0.02], budget=18, g_min=2, g_max=12)
    assert sum(sizes) == 18
    assert all(2 <= n <= 12 for n in sizes)
    # Hard-but-possible prompts need more samples than coin flips to yield a mixed group.
    assert sizes[2] > sizes[0] > sizes[1] == 2


def test_equal_rates_split_evenly_and_limits_hold():
    assert allocate_group_sizes([0.5] * 4, budget=32, g_min=2, g_max=16) == [8, 8, 8, 8]
    assert allocate_group_sizes([0.5] * 2, budget=100, g_min=2, g_max=6) == [6, 6]
    assert allocate_group_sizes([0.5] * 2, budget=1, g_min=2, g_max=6) == [2, 2]
    with pytest.raises(ValueError):
        allocate_group_sizes([0.5], budget=4, g_min=3, g_max=2)
