"""kl_penalty: hand-computed k1/k2/k3, the clamp, and k3's non-negativity."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrpo.algos import KL_ESTIMATORS, kl_penalty
from mmgrpo.registry import RegistryError

LOGP = torch.tensor([-1.0, 0.0, -2.0])
REF = torch.tensor([0.0, 0.0, -3.0])  # log-ratio d = logp - ref = [-1, 0, 1]


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("k1", [-1.0, 0.0, 1.0]),
        ("k2", [0.5, 0.0, 0.5]),
        ("k3", [math.e - 2, 0.0, math.exp(-1)]),  # exp(-d) + d - 1
    ],
)
def test_estimators_match_hand_values(kind, expected):
    torch.testing.assert_close(kl_penalty(LOGP, REF, kind=kind), torch.tensor(expected))


def test_registry_holds_k1_k2_k3():
    assert KL_ESTIMATORS.names() == ["k1", "k2", "k3"]


def test_clamp_bounds_the_log_ratio_before_the_estimator():
    logp, ref = torch.tensor([-200.0, 200.0]), torch.zeros(2)
    assert torch.isinf(kl_penalty(logp, ref, kind="k3")).any()
    clamped = kl_penalty(logp, ref, kind="k3", clamp=10.0)
    torch.testing.assert_close(clamped, torch.tensor([math.exp(10) - 10 - 1, math.exp(-10) + 10 - 1]))


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="differ in shape"):
        kl_penalty(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="clamp must be > 0"):
        kl_penalty(torch.zeros(2), torch.zeros(2), clamp=0.0)
    with pytest.raises(RegistryError, match="k3"):
        kl_penalty(torch.zeros(2), torch.zeros(2), kind="k4")


log_probs = st.lists(st.floats(min_value=-30, max_value=0, allow_nan=False), min_size=1, max_size=16)


@settings(max_examples=50, deadline=None)
@given(log_probs, st.data())
def test_k3_is_nonnegative_and_zero_at_equality(logp, data):
    ref = data.draw(st.lists(st.floats(min_value=-30, max_value=0), min_size=len(logp), max_size=len(logp)))
    logp_t, ref_t = torch.tensor(logp, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64)
    k3 = kl_penalty(logp_t, ref_t, kind="k3")
    assert (k3 >= 0).all()
    assert torch.equal(kl_penalty(logp_t, logp_t, kind="k3"), torch.zeros_like(logp_t))
    assert (k3[(logp_t - ref_t).abs() > 1e-3] > 0).all()
