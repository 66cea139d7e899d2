"""The GRPO policy loss: a policy-gradient surrogate, optional KL term and entropy bonus, and loss aggregation.

Per token, with ``ratio = exp(logp - old_logp)`` and advantage ``A``, the default surrogate (``vanilla``,
DeepSeekMath arXiv 2402.03300 eq. 3; DAPO arXiv 2503.14476 for the separate bounds) gives

    loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * KL_t - entropy_coeff * H_t

Dual clip (Ye et al. 2020, arXiv 1912.09729; verl ``clip_ratio_c``) caps the loss of a
negative-advantage token at ``-dual_clip * A``, so a huge ratio cannot blow it up. The other surrogates
(GSPO, GSPO-token, CISPO) are in :mod:`mmgrpo.algos.surrogates`; the entropy bonus is aggregated as the loss is
(verl's sign: a positive ``entropy_coeff`` rewards entropy).

Aggregations (``LOSS_AGGREGATIONS``) turn the ``[B, T]`` per-token losses into a scalar:

- ``token-mean``: sum over all completion tokens / their count (DAPO).
- ``seq-mean-token-mean``: mean over each sequence's tokens, then over sequences
  (original GRPO).
- ``seq-mean-token-sum-norm``: each sequence's token sum / ``max_len``, then mean over
  sequences (Dr. GRPO, arXiv 2503.20783: a constant normaliser removes length bias).

Sequences without any completion token are left out of the ``seq-mean-*`` means.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from mmgrpo.algos.kl import kl_penalty
from mmgrpo.algos.stats import masked_mean, masked_sum
from mmgrpo.algos.surrogates import SURROGATES
from mmgrpo.registry import Registry

Aggregation = Callable[..., Tensor]
LOSS_AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(losses: Tensor, mask: Tensor, **_: object) -> Tensor:
    """``[B, T]`` -> scalar: mean over every masked-in token of the batch."""
    return masked_mean(losses, mask)


def _mean_over_sequences(per_sequence: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` -> scalar: mean over the sequences that have at least one token."""
    return masked_mean(per_sequence, mask.bool().any(dim=-1))


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(losses: Tensor, mask: Tensor, **_: object) -> Tensor:
    """``[B, T]`` -> scalar: per-sequence token mean ``[B]``, then mean over sequences."""
    return _mean_over_sequences(masked_mean(losses, mask, dim=-1), mask)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    losses: Tensor, mask: Tensor, *, max_len: int | None = None, **_: object
) -> Tensor:
    """``[B, T]`` -> scalar: per-sequence token sum / ``max_len`` ``[B]``, then mean over sequences."""
    if max_len is None or max_len <= 0:
        raise ValueError(
            "agg='seq-mean-token-sum-norm' needs max_len > 0 (the generation budget, "
            f"Dr. GRPO's constant normaliser), got {max_len}"
        )
    return _mean_over_sequences(masked_sum(losses, mask, dim=-1) / max_len, mask)


def _check_inputs(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, ref_logp: Tensor | None,
    token_weights: Tensor | None = None,
) -> None:
    optional = {"ref_logp": ref_logp, "token_weights": token_weights}
    named = {"old_logp": old_logp, "mask": mask} | {k: v for k, v in optional.items() if v is not None}
    if logp.dim() != 2:
        raise ValueError(f"policy_loss: logp must be [B, T], got shape {tuple(logp.shape)}")
    for name, tensor in named.items():
        if tensor.shape != logp.shape:
            raise ValueError(
                f"policy_loss: {name} has shape {tuple(tensor.shape)}, logp has {tuple(logp.shape)}"
            )
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(
            f"policy_loss: advantages must be [B] or [B, T] = {tuple(logp.shape)}, "
            f"got {tuple(advantages.shape)}"
        )


def _check_options(
    eps_low: float, eps_high: float, dual_clip: float | None, beta: float, has_ref: bool
) -> None:
    if not 0 <= eps_low <= 1 or eps_high < 0:
        raise ValueError(f"policy_loss: need 0 <= eps_low <= 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"policy_loss: dual_clip must be > 1 (a bound on the ratio), got {dual_clip}")
    if beta < 0 or (beta > 0 and not has_ref):
        raise ValueError(f"policy_loss: beta={beta} needs beta >= 0, and ref_logp when beta > 0")


def ratio_stats(ratio: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Mean, max and min of the importance ratio over masked-in tokens (1 if there are none).

    Built with ``torch.where`` rather than boolean indexing, so no device sync.
    """
    inf = torch.tensor(float("inf"), dtype=ratio.dtype, device=ratio.device)
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    any_token = mask.any()
    return {
        "ratio_mean": torch.where(any_token, masked_mean(ratio, mask), one),
        "ratio_max": torch.where(any_token, torch.where(mask, ratio, -inf).amax(), one),
        "ratio_min": torch.where(any_token, torch.where(mask, ratio, inf).amin(), one),
    }


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    kl: str = "k3",
    kl_clamp: float | None = None,
    max_len: int | None = None,
    token_weights: Tensor | None = None,
    surrogate: str = "vanilla",
    surrogate_options: dict[str, float] | None = None,
    entropy: Tensor | None = None,
    entropy_coeff: float = 0.0,
) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO loss of one batch of completions and its diagnostics.

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy (grad);
            the loss is computed in float32 or wider.
        old_logp: ``[B, T]`` log-probs under the policy that sampled them (detached here).
        advantages: ``[B]`` (one per completion, broadcast over tokens) or ``[B, T]``.
        mask: ``[B, T]`` 1 on completion tokens. Masked-out positions never reach the
            loss or the gradient, even if they hold inf or NaN.
        eps_low, eps_high: clip range ``[1 - eps_low, 1 + eps_high]`` (DAPO clip-higher
            uses eps_high = 0.28); PPO/GRPO default 0.2 both.
        dual_clip: cap ``-dual_clip * A`` on negative-advantage tokens (> 1, verl uses 3).
        agg: a name in ``LOSS_AGGREGATIONS``.
        ref_logp: ``[B, T]`` reference-model log-probs (detached here); needed if beta > 0.
        beta: KL coefficient (DeepSeekMath 0.04; DAPO and Dr. GRPO 0).
        kl: a name in ``KL_ESTIMATORS``; kl_clamp: bound on its log-ratio (see kl_penalty).
        max_len: generation budget, required by ``seq-mean-token-sum-norm``.
        token_weights: ``[B, T]`` factors on each token's policy-gradient loss (detached here),
            e.g. importance-sampling weights (:func:`mmgrpo.algos.importance_weights`);
            the KL term is not weighted.
        surrogate: a name in :data:`~mmgrpo.algos.surrogates.SURROGATES` (``vanilla``: PPO's clip);
            ``surrogate_options``: its own settings (``sapo``: ``tau_pos``, ``tau_neg``).
        entropy: ``[B, T]`` per-token entropy of the current policy (with its gradient); needed when
            ``entropy_coeff`` is not 0, whose term ``-entropy_coeff * H`` is aggregated as the loss.

    Returns:
        ``(loss, stats)``: the scalar loss, and 0-dim detached float tensors (no device
        sync; call ``float()`` to log): ``pg_loss`` (loss without the KL and entropy terms), ``kl``
        (token mean; 0 without ref_logp), ``clip_frac_low``, ``clip_frac_high``, ``clip_frac``,
        ``dual_clip_frac``, ``ratio_mean``, ``ratio_max``, ``ratio_min``.
    """
    _check_inputs(logp, old_logp, advantages, mask, ref_logp, token_weights)
    _check_options(eps_low, eps_high, dual_clip, beta, ref_logp is not None)
    if entropy_coeff != 0 and entropy is None:
        raise ValueError(f"policy_loss: entropy_coeff={entropy_coeff} needs the per-token entropy")
    aggregate = LOSS_AGGREGATIONS.get(agg)
    mask = mask.bool()
    dtype = torch.promote_types(logp.dtype, torch.float32)  # bf16 ratios are too coarse to clip
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    advantages = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    advantages = torch.where(mask, advantages.detach().to(dtype), zero)  # [B, T]
    logp = torch.where(mask, logp.to(dtype), zero)
    old_logp = torch.where(mask, old_logp.detach().to(dtype), zero)

    pg_losses, ratio, clipping = SURROGATES.get(surrogate)(
        logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip,
        **(surrogate_options or {}),
    )  # [B, T], [B, T]
    if token_weights is not None:
        pg_losses = pg_losses * torch.where(mask, token_weights.detach().to(dtype), zero)
    pg_loss = aggregate(pg_losses, mask, max_len=max_len)
    kl_tokens = zero.expand_as(logp)
    if ref_logp is not None:
        kl_tokens = kl_penalty(logp, torch.where(mask, ref_logp.detach(), zero), kind=kl, clamp=kl_clamp)
    token_losses = pg_losses + beta * kl_tokens if beta > 0 else pg_losses
    if entropy_coeff != 0:
        token_losses = token_losses - entropy_coeff * torch.where(mask, entropy.to(dtype), zero)
    loss = aggregate(token_losses, mask, max_len=max_len) if token_losses is not pg_losses else pg_loss

    stats = {"pg_loss": pg_loss, "kl": masked_mean(kl_tokens, mask)}
    stats |= clipping
    stats |= ratio_stats(ratio, mask)
    return loss, {name: value.detach().float() for name, value in stats.items()}
