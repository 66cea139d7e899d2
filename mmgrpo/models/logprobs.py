"""Per-token log-probs (and one more statistic of each token's distribution) of completion tokens: the plain
per-sample path.

Logits are never materialised for the whole batch: the backbone returns hidden states,
and only the completion tokens' states go through the LM head, ``chunk_size`` tokens at
a time, in float32. Under autograd each chunk is checkpointed, so the backward pass
recomputes its logits instead of keeping every chunk's ``[chunk, V]`` alive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Literal

import torch
from torch.utils.checkpoint import checkpoint

from mmgrpo.models.packing import packed_hidden_states
from mmgrpo.models.train_batch import TrainBatch

LogProbs = tuple[torch.Tensor, torch.Tensor | None]  # (log-probs [B, Tc], the statistic [B, Tc] or None)
TokenStatistic = Literal["entropy", "differentiable_entropy", "sum_pi_squared"]
"""A statistic of each token's predicted distribution computed beside its log-prob: ``entropy``, or
``sum_pi_squared`` (the probability that two draws agree, ``sum_v pi_v^2``: the optimal token baseline's), both
without a gradient; ``differentiable_entropy`` is the entropy with its gradient (an entropy bonus in the loss)."""
Lockstep = Callable[[Mapping[str, float]], dict[str, float]]
"""Where a forward is a collective of the ranks (ZeRO-3, FSDP2 gather a module's weights at each call), what every
rank's forward must agree on, each value the largest any rank has: ``head_calls``, the output-head calls a
forward makes (measured: FSDP2 hung when ranks' completion tokens took 1 and 2 chunks), ``continued``, whether
a group-shared forward continues past the prompt (it does not where every completion is one token), and
``media_inside``, whether some rank's completions hold media (see
:func:`~mmgrpo.models.shared_prefix.completion_logprobs`)."""


def sequence_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    *,
    micro_batch_size: int,
    statistic: TokenStatistic | None = None,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    padding_free: bool = False,
    lockstep: Lockstep | None = None,
) -> LogProbs:
    """Log-probs ``[B, Tc]`` of ``batch.completion_ids`` (0 where ``completion_mask`` is 0), and ``statistic``.

    Runs ``micro_batch_size`` rows per forward, packed into one row without padding if ``padding_free``
    (:mod:`mmgrpo.models.packing`). Gradients flow when called under grad;
    for gradient accumulation call it once per micro-batch (``batch.select``) and
    backward each loss, so that only one micro-batch's graph is alive at a time.
    ``temperature`` divides the logits, as the sampler did.
    """
    parts = [
        _forward_logprobs(
            model,
            batch if len(rows) == len(batch) else batch.select(rows),
            statistic=statistic,
            chunk_size=chunk_size,
            temperature=temperature,
            padding_free=padding_free,
            lockstep=lockstep,
        )
        for rows in row_chunks(len(batch), micro_batch_size)
    ]
    logp = torch.cat([part[0] for part in parts])  # [B, Tc]
    stat = torch.cat([part[1] for part in parts]) if statistic else None  # [B, Tc]
    return logp, stat


def _forward_logprobs(
    model: torch.nn.Module, batch: TrainBatch, *, statistic: TokenStatistic | None, chunk_size: int,
    temperature: float, padding_free: bool, lockstep: Lockstep | None,
) -> LogProbs:
    adapter = batch.prompt.adapter
    if padding_free:
        predicting = packed_hidden_states(model, batch)  # [B, Tc, D]
    else:
        inputs, position_ids = batch.forward_inputs(model)
        backbone = adapter.backbone(model)
        hidden = backbone(**inputs, position_ids=position_ids, use_cache=False).last_hidden_state  # [B, T, D]
        # The state before each completion token predicts it.
        predicting = hidden[:, batch.prompt_length - 1 : -1]  # [B, Tc, D]
    return token_logprobs(
        adapter.output_head(model),
        predicting,
        batch.completion_ids,
        batch.completion_mask,
        statistic=statistic,
        chunk_size=chunk_size,
        temperature=temperature,
        head_calls=int(agreed(lockstep, head_calls=head_calls_for(batch.completion_mask, chunk_size))["head_calls"]),
    )


def head_calls_for(mask: torch.Tensor, chunk_size: int) -> int:
    """The output-head calls :func:`token_logprobs` makes for the positions ``mask`` ``[B, Tc]`` keeps."""
    return -(-int(mask.bool().sum()) // chunk_size)


def agreed(lockstep: Lockstep | None, **values: float) -> dict[str, float]:
    """``values`` as every rank's forward takes them: the largest over the ranks in ``lockstep``, else this rank's."""
    return dict(values) if lockstep is None else lockstep(values)


def token_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    *,
    statistic: TokenStatistic | None = None,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    head_calls: int = 0,
) -> LogProbs:
    """Log-prob (and ``statistic``) of ``targets`` ``[B, Tc]`` under ``head(hidden)``, ``hidden`` ``[B, Tc, D]``.

    Only positions where ``mask`` is 1 are computed (others are 0), ``chunk_size`` tokens at a time, in at
    least ``head_calls`` calls of the head (those past the tokens run it on none: other ranks' calls, see
    :data:`Lockstep`).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    valid = mask.bool()  # [B, Tc]
    states, tokens = hidden[valid], targets[valid]  # [n, D], [n]
    use_checkpoint = torch.is_grad_enabled() and states.requires_grad
    parts = []
    for index in range(max(head_calls_for(mask, chunk_size), head_calls)):
        chunk = slice(index * chunk_size, (index + 1) * chunk_size)
        args = (head, states[chunk], tokens[chunk], temperature, statistic)
        # No metadata check of the recomputation (its shapes follow from the inputs): under ZeRO-3 a frozen
        # head's weight (LoRA) is partitioned again right after it, and gathered again for its backward.
        parts.append(
            checkpoint(_chunk_logprobs, *args, use_reentrant=False, determinism_check="none") if use_checkpoint
            else _chunk_logprobs(*args)
        )
    rows = 2 if statistic else 1
    stats = torch.cat(parts, -1) if parts else states.new_zeros(rows, 0, dtype=torch.float32)  # [rows, n]
    zeros = torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)  # [B, Tc]
    logp = zeros.masked_scatter(valid, stats[0])
    if not statistic:
        return logp, None
    stat = stats[1] if statistic == "differentiable_entropy" else stats[1].detach()
    return logp, zeros.masked_scatter(valid, stat)


def _chunk_logprobs(
    head: torch.nn.Module, states: torch.Tensor, tokens: torch.Tensor, temperature: float,
    statistic: TokenStatistic | None,
) -> torch.Tensor:
    """``[1, n]`` log-probs of ``tokens``, or ``[2, n]`` log-probs and the statistic."""
    logits = head(states).float()  # [n, V]
    if temperature != 1.0:  # a pass over [n, V] saved otherwise (4% of a realistic-shape update)
        logits = logits / temperature
    log_norm = logits.logsumexp(-1)  # [n]
    logp = logits.gather(-1, tokens[:, None]).squeeze(-1) - log_norm  # [n]
    if statistic is None:
        return logp[None]
    if statistic != "differentiable_entropy":  # a backward through its [n, V] passes would only carry zeros
        logits, log_norm = logits.detach(), log_norm.detach()
    if statistic in ("entropy", "differentiable_entropy"):
        return torch.stack([logp, log_norm - (logits.softmax(-1) * logits).sum(-1)])
    if statistic == "sum_pi_squared":
        return torch.stack([logp, logits.softmax(-1).square().sum(-1)])
    raise ValueError(f"unknown token statistic {statistic!r}: entropy, differentiable_entropy or sum_pi_squared")


def row_chunks(num_rows: int, size: int) -> Iterator[range]:
    """Consecutive row ranges of at most ``size`` rows."""
    if size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {size}")
    return (range(start, min(start + size, num_rows)) for start in range(0, num_rows, size))
