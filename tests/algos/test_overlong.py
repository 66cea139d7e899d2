"""overlong_penalty: DAPO soft overlong punishment."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmgrpo.algos import overlong_penalty


def test_hand_values_over_the_buffer():
    # max 10, buffer 4: free up to 6, then -1/4 per token, -1 from 10 on
    out = overlong_penalty([0, 6, 7, 8, 10, 11, 50], max_len=10, buffer_len=4)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.25, -0.5, -1.0, -1.0, -1.0]))


def test_penalty_scales_the_punishment():
    out = overlong_penalty(torch.tensor([7, 12]), max_len=10, buffer_len=4, penalty=0.5)
    torch.testing.assert_close(out, torch.tensor([-0.125, -0.5]))


@pytest.mark.parametrize("max_len, buffer_len, penalty", [(10, 0, 1.0), (10, 11, 1.0), (10, 4, -1.0)])
def test_bad_settings_are_named(max_len, buffer_len, penalty):
    with pytest.raises(ValueError, match="overlong_penalty"):
        overlong_penalty([5], max_len=max_len, buffer_len=buffer_len, penalty=penalty)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=2, max_size=20),
    st.integers(1, 200),
    st.data(),
    st.floats(0, 10),
)
def test_penalty_is_bounded_and_never_rewards_length(lengths, max_len, data, penalty):
    buffer_len = data.draw(st.integers(1, max_len))
    ordered = torch.tensor(sorted(lengths))
    out = overlong_penalty(ordered, max_len=max_len, buffer_len=buffer_len, penalty=penalty)
    assert ((out >= -penalty - 1e-6) & (out <= 0)).all()
    assert (out.diff() <= 1e-6).all()  # longer is never better
    assert (out[ordered <= max_len - buffer_len] == 0).all()
    torch.testing.assert_close(out[ordered >= max_len], torch.full_like(out[ordered >= max_len], -penalty))
