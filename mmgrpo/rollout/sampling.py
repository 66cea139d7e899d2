"""Pure functions of one decoding step: logits in, tokens and log-probs out.

The order matches Hugging Face ``generate`` (and vLLM): forbidden ids are masked, then
temperature, top-k and top-p reshape the distribution, then a token is drawn. Logits
are ``[N, V]`` (one row per completion being decoded); filtered entries become -inf.
A completion ends with (and keeps) its first stop token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mmgrpo.rollout.base import SamplingParams


def mask_token_ids(logits: torch.Tensor, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """``logits`` with the columns of ``token_ids`` set to -inf (those tokens can never be drawn)."""
    if len(token_ids) == 0:
        return logits
    columns = torch.as_tensor(token_ids, device=logits.device)
    return logits.index_fill(-1, columns, float("-inf"))


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row (and any tied with the k-th); ``k`` = 0 keeps all."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth_largest = torch.topk(logits, k, dim=-1).values[:, -1:]  # [N, 1]
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keep the most probable tokens of each row whose probability mass first reaches ``p``.

    A token survives when the mass of the tokens ranked above it is still below ``p``,
    so the most probable token always survives; ``p`` = 1 keeps all.
    """
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [N, V]
    sorted_probs = sorted_logits.softmax(dim=-1)
    mass_above = sorted_probs.cumsum(dim=-1) - sorted_probs  # [N, V]
    drop_sorted = mass_above >= p
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def processed_logits(
    logits: torch.Tensor, params: SamplingParams, forbidden_ids: Sequence[int] | torch.Tensor = ()
) -> torch.Tensor:
    """The logits actually sampled from: forbidden ids masked, then temperature, top-k, top-p.

    Greedy decoding (temperature 0 or top_k 1) only masks: the argmax is unaffected by the rest.
    """
    logits = mask_token_ids(logits.float(), forbidden_ids)
    if params.greedy:
        return logits
    if params.temperature != 1.0:
        logits = logits / params.temperature
    return top_p_filter(top_k_filter(logits, params.top_k), params.top_p)


def draw_tokens(
    logits: torch.Tensor, *, greedy: bool, generator: torch.Generator | None = None
) -> torch.Tensor:
    """One token id per row of processed ``logits`` ``[N, V]`` -> ``[N]``: argmax or a categorical draw.

    The draw inverts the cumulative distribution at one uniform number per row: exact, and on
    CPU 10-20x faster than ``torch.multinomial`` (measured at 32 rows: 0.03 against 0.35 ms for
    500 tokens, 4.8 against 98 ms for Qwen's 152k). Tokens of probability 0 are never drawn.
    """
    if greedy:
        return logits.argmax(dim=-1)
    cumulative = logits.softmax(dim=-1).cumsum(dim=-1)  # [N, V]
    uniform = torch.rand(
        (logits.shape[0], 1), generator=generator, device=logits.device, dtype=cumulative.dtype
    )  # [N, 1]
    total = cumulative[:, -1:]  # [N, 1]
    # u * total rounded up to the total would land past the last drawable token: stay below it
    target = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))  # [N, 1]
    return torch.searchsorted(cumulative, target, right=True).squeeze(-1)  # [N]


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log_softmax of ``logits`` ``[N, V]`` (in float32) at ``token_ids`` ``[N]`` -> ``[N]``."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def completion_lengths(token_ids: torch.Tensor, stop_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens each row keeps (up to and including its first stop id) ``[N]``, and whether it stopped ``[N]``.

    ``token_ids`` ``[N, T]``; a row without a stop id keeps all T tokens (it was truncated).
    """
    is_stop = torch.isin(token_ids, stop_ids.to(token_ids.device))  # [N, T]
    stopped = is_stop.any(dim=-1)  # [N]
    first_stop = is_stop.int().argmax(dim=-1)  # [N], 0 where no stop
    return torch.where(stopped, first_stop + 1, token_ids.shape[1]), stopped
