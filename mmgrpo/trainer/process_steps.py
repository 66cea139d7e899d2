"""A step's process-reward steps as per-token advantages: the spans each completion's rewards
returned, placed on its tokens, normalised within groups (:mod:`mmgrpo.algos.process`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from mmgrpo.algos.process import normalized_step_rewards, process_advantages, step_end_tokens
from mmgrpo.trainer.rollouts import Rollouts

TokenTextEnds = Callable[[Sequence[int], str, Sequence[tuple[int, int]]], list[int]]
"""(token ids, text, token ranges the text leaves out: tool turns) -> text length after each token"""


def step_advantages(
    rollouts: Rollouts, token_text_ends: TokenTextEnds, length: int, *, scale_std: bool, eps: float
) -> torch.Tensor | None:
    """``[N, length]`` process advantages of ``rollouts``' completions; None when none has steps."""
    steps = rollouts.step_rewards()
    if steps is None:
        return None
    normalized = normalized_step_rewards(
        [[score for _, _, score in spans] for spans in steps], rollouts.group_sizes, scale_std=scale_std, eps=eps
    )
    ends = [
        step_end_tokens(spans, token_text_ends(completion.token_ids, completion.text, completion.observation_spans))
        for spans, completion in zip(steps, rollouts.completions)
    ]
    return process_advantages(ends, normalized, length)
