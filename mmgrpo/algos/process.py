"""Process supervision: rewards of reasoning steps turned into per-token advantages.

Process-supervised GRPO (DeepSeekMath, arXiv 2402.03300, section 4.1.3): the completions
of a group are split into steps; step j of completion i ends at token ``index(j)`` and
gets a reward ``r_i^j``. All step rewards of the group are normalised together,
``r~ = (r - mean(R)) / std(R)`` (R: every step reward of every completion of the group;
std unbiased, as the outcome advantages), and the advantage of token t of completion i
is the sum of the normalised rewards of its steps that end at or after t::

    A_{i,t} = sum_{j : index(j) >= t} r~_i^j

Tokens after a completion's last step get 0. With outcome rewards as well, a token's
advantage is its completion's outcome advantage plus ``weight * A_{i,t}``
(``algo.process_reward_weight``). Step rewards arrive as character spans of the
completion text; :func:`step_end_tokens` places each span's end on a token.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import torch

from mmgrpo.types import Span



def normalized_step_rewards(
    step_rewards: Sequence[Sequence[float]],
    group_sizes: Sequence[int],
    *,
    scale_std: bool = True,
    eps: float = 1e-4,
) -> list[list[float]]:
    """Each completion's step rewards normalised over all steps of its group.

    ``step_rewards[i]``: the rewards of completion i's steps (any number, none included);
    completions are laid out group after group, ``group_sizes`` long. ``scale_std=False``
    only centres (Dr. GRPO's choice for outcome rewards). A group with a single step has
    std 0: its step reward is centred to 0.
    """
    if sum(group_sizes) != len(step_rewards):
        raise ValueError(f"group sizes sum to {sum(group_sizes)} but there are {len(step_rewards)} completions")
    normalized: list[list[float]] = []
    start = 0
    for size in group_sizes:
        group = step_rewards[start : start + size]
        start += size
        flat = [reward for rewards in group for reward in rewards]
        if not flat:
            normalized += [[] for _ in group]
            continue
        mean = sum(flat) / len(flat)
        std = math.sqrt(sum((r - mean) ** 2 for r in flat) / (len(flat) - 1)) if len(flat) > 1 else 0.0
        scale = std + eps if scale_std else 1.0
        normalized += [[(reward - mean) / scale for reward in rewards] for rewards in group]
    return normalized


def process_advantages(
    step_ends: Sequence[Sequence[int]], normalized: Sequence[Sequence[float]], length: int
) -> torch.Tensor:
    """``[N, length]``: token t of completion i gets the sum of ``normalized[i][j]`` over the steps
    j with ``step_ends[i][j] >= t`` (the step's last token index); 0 after its last step."""
    if len(step_ends) != len(normalized):
        raise ValueError(f"{len(step_ends)} completions of step ends but {len(normalized)} of rewards")
    advantages = torch.zeros(len(step_ends), length)
    for row, (ends, rewards) in enumerate(zip(step_ends, normalized)):
        if len(ends) != len(rewards):
            raise ValueError(f"completion {row}: {len(ends)} step ends but {len(rewards)} rewards")
        for end, reward in zip(ends, rewards):
            advantages[row, : min(end, length - 1) + 1] += reward
    return advantages


def step_end_tokens(spans: Sequence[Span], token_char_ends: Sequence[int]) -> list[int]:
    """The token each step ends on: the first token whose text reaches the span's last character.

    ``token_char_ends[k]``: the length of the text of tokens ``0..k`` (non-decreasing). A
    span ending past the text ends on the last token.
    """
    last = len(token_char_ends) - 1
    return [min(bisect.bisect_left(token_char_ends, end), last) for _, end, _ in spans]
