"""Policy-gradient surrogates: the per-token loss of a batch of sampled completions, before aggregation.

Each registered surrogate is a pure function of the current and old log-probs, the advantages and the mask, all
``[B, T]`` (masked-out positions already zeroed by the caller), and the clip settings; it returns the per-token
losses ``[B, T]`` (to minimise) and detached statistics. ``algo.policy_loss`` names one:

- ``vanilla``: PPO's clipped ratio per token (DeepSeekMath arXiv 2402.03300 eq. 3), ``clip(r, 1 - eps_low,
  1 + eps_high)`` with DAPO's separate bounds (arXiv 2503.14476 eq. 10) and the optional dual clip (Ye et al. 2020,
  arXiv 1912.09729).
- ``gspo``: GSPO (arXiv 2507.18071 eqs. 5-7), the ratio of the whole sequence, ``s_i = exp(mean_t log r_i,t)``
  (the length-normalised sequence likelihood ratio), clipped as a sequence: every token of a completion carries its
  sequence's loss. Needs one advantage per completion. The paper's settings: eps_low 3e-4, eps_high 4e-4, beta 0.
- ``gspo_token``: GSPO-token (eqs. 13-14), ``s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)]``: the value of the sequence
  ratio, the gradient of each token's own log-prob, so token-level advantages (process rewards) apply; with one
  advantage per completion it equals ``gspo`` in value and gradient.
- ``cispo``: CISPO (MiniMax-M1, arXiv 2506.13585 eq. 4), ``-sg[clip(r, 1 - eps_low, 1 + eps_high)] * A * log pi``:
  the importance weight is clipped, never the token's gradient. The paper sets no lower bound (eps_low 1) and tunes
  eps_high.
- ``geo_mean``: GMPO (arXiv 2507.20673 eq. 5), the geometric mean of the sequence's clipped token ratios in place
  of their arithmetic mean: ``-A * exp(mean_t sgn(A) min(sgn(A) l_t, sgn(A) clip(l_t, -eps_low, eps_high)))`` with
  ``l_t`` the token's log-ratio (the clip range is in log space: paper 0.4 both), every token of a completion
  carrying its sequence's loss. Needs one advantage per completion.
- ``gpg``: GPG (arXiv 2504.02546 eq. 4), the plain policy gradient ``-A * log pi``: no ratio, no clip (one update
  per batch: ``num_iterations`` 1).
- ``sapo``: SAPO (Qwen, arXiv 2511.20347), a soft gate in place of the clip: ``-sigmoid(tau (r - 1)) * 4 / tau * A``,
  ``tau = tau_pos`` for a positive advantage, ``tau_neg`` for a negative one (paper: 1.0 and 1.05); its gradient at
  ``r = 1`` is the plain policy gradient's, and it fades smoothly as the ratio leaves 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from mmgrpo.algos.stats import masked_mean, masked_sum
from mmgrpo.registry import Registry

Surrogate = Callable[..., tuple[Tensor, Tensor, dict[str, Tensor]]]
SURROGATES: Registry[Surrogate] = Registry("policy loss")
SEQUENCE_LOG_RATIO_CAP = 10.0
"""Largest sequence log-ratio GSPO exponentiates (verl's bound: a far off-policy sequence must not overflow)."""


def clipped_surrogate(
    ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float, dual_clip: float | None
) -> Tensor:
    """Per-token PPO loss ``[B, T]`` (to minimise), with the optional dual-clip cap."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_low, 1 + eps_high)
    losses = torch.maximum(unclipped, clipped)
    if dual_clip is None:
        return losses
    capped = torch.minimum(losses, -dual_clip * advantages)
    return torch.where(advantages < 0, capped, losses)


def clip_stats(
    ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float, dual_clip: float | None
) -> dict[str, Tensor]:
    """Fractions of masked-in tokens whose gradient the clipping switches off."""
    clipped_low = (ratio < 1 - eps_low) & (advantages < 0)
    clipped_high = (ratio > 1 + eps_high) & (advantages > 0)
    dual_clipped = (ratio > dual_clip) & (advantages < 0) if dual_clip is not None else torch.zeros_like(mask)
    low, high = masked_mean(clipped_low.float(), mask), masked_mean(clipped_high.float(), mask)
    return {
        "clip_frac_low": low,
        "clip_frac_high": high,
        "clip_frac": low + high,
        "dual_clip_frac": masked_mean(dual_clipped.float(), mask),
    }


@SURROGATES.register("vanilla")
def vanilla(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
            dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """PPO's clipped surrogate per token; returns the losses, the ratio and the clip statistics."""
    ratio = torch.exp(logp - old_logp)  # [B, T], 1 where masked out
    losses = clipped_surrogate(ratio, advantages, eps_low, eps_high, dual_clip)
    return losses, ratio, clip_stats(ratio, advantages, mask, eps_low, eps_high, dual_clip)


def _sequence_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """``[B, 1]``: each completion's mean token log-ratio (0 for one without tokens), with its gradient."""
    tokens = mask.sum(dim=-1, keepdim=True).clamp(min=1)
    return masked_sum(logp - old_logp, mask, dim=-1).unsqueeze(-1) / tokens


def _one_advantage_per_completion(advantages: Tensor, mask: Tensor, name: str, instead: str = "") -> None:
    if not bool((advantages == advantages[:, :1]).logical_or(~mask).all()):
        raise ValueError(f"policy_loss: {name} needs one advantage per completion, not token-level ones (process "
                         f"rewards){instead}")


def _sequence_clip(ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float,
                   dual_clip: float | None) -> tuple[Tensor, dict[str, Tensor]]:
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip applies to per-token ratios (vanilla), not GSPO's sequence ratio")
    losses = clipped_surrogate(ratio, advantages, eps_low, eps_high, None)
    return losses, clip_stats(ratio, advantages, mask, eps_low, eps_high, None)


@SURROGATES.register("gspo")
def gspo(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
         dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """GSPO's sequence-level clipped surrogate, broadcast over each completion's tokens."""
    _one_advantage_per_completion(advantages, mask, "gspo", instead="; gspo_token takes them")
    log_ratio = _sequence_log_ratio(logp, old_logp, mask).clamp(max=SEQUENCE_LOG_RATIO_CAP)
    ratio = torch.exp(log_ratio).expand_as(logp)  # [B, T]
    losses, stats = _sequence_clip(ratio, advantages, mask, eps_low, eps_high, dual_clip)
    return losses, ratio, stats


@SURROGATES.register("gspo_token")
def gspo_token(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
               dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """GSPO-token: the sequence ratio's value, each token's own gradient, token-level advantages allowed."""
    sequence = _sequence_log_ratio(logp, old_logp, mask).detach()  # [B, 1]
    log_ratio = (logp - logp.detach() + sequence).clamp(max=SEQUENCE_LOG_RATIO_CAP)
    ratio = torch.exp(log_ratio)  # [B, T]
    losses, stats = _sequence_clip(ratio, advantages, mask, eps_low, eps_high, dual_clip)
    return losses, ratio, stats


@SURROGATES.register("cispo")
def cispo(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
          dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """CISPO: the clipped importance weight (no gradient) times the advantage times the token's log-prob."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip bounds PPO's clipped loss; cispo clips its importance weight")
    ratio = torch.exp(logp - old_logp)
    weight = ratio.detach().clamp(1 - eps_low, 1 + eps_high)
    losses = -weight * advantages * logp
    low = masked_mean((ratio < 1 - eps_low).float(), mask)
    high = masked_mean((ratio > 1 + eps_high).float(), mask)
    return losses, ratio, clip_fractions(low, high)


def clip_fractions(low: Tensor, high: Tensor) -> dict[str, Tensor]:
    """The clip statistics every surrogate logs (the dual clip is PPO's alone)."""
    return {"clip_frac_low": low, "clip_frac_high": high, "clip_frac": low + high,
            "dual_clip_frac": torch.zeros_like(low)}


@SURROGATES.register("geo_mean")
def geo_mean(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
             dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """GMPO: the clipped token log-ratios averaged per sequence, exponentiated, times the sequence's advantage."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip bounds PPO's per-token loss; geo_mean clips log-ratios")
    _one_advantage_per_completion(advantages, mask, "geo_mean")
    log_ratio = logp - old_logp  # [B, T]
    sign = torch.sign(advantages)
    kept = sign * torch.minimum(sign * log_ratio, sign * log_ratio.clamp(-eps_low, eps_high))
    tokens = mask.sum(dim=-1, keepdim=True).clamp(min=1)
    ratio = torch.exp(masked_sum(kept, mask, dim=-1).unsqueeze(-1) / tokens).expand_as(logp)  # [B, T]
    low = masked_mean(((log_ratio < -eps_low) & (advantages < 0)).float(), mask)
    high = masked_mean(((log_ratio > eps_high) & (advantages > 0)).float(), mask)
    return -advantages * ratio, ratio, clip_fractions(low, high)


@SURROGATES.register("gpg")
def gpg(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
        dual_clip: float | None = None, **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """GPG: the advantage times the token's log-prob (the ratio is logged, never used)."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip bounds PPO's clipped loss; gpg has no clip")
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    return -advantages * logp, torch.exp(logp - old_logp).detach(), clip_fractions(zero, zero)


@SURROGATES.register("sapo")
def sapo(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float,
         dual_clip: float | None = None, tau_pos: float = 1.0, tau_neg: float = 1.05,
         **_: float) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """SAPO's soft gate on the ratio (no clip: ``eps_low``/``eps_high`` unused; its fractions logged are 0)."""
    if dual_clip is not None:
        raise ValueError("policy_loss: dual_clip bounds PPO's clipped loss; sapo has a soft gate, no clip")
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"policy_loss: sapo needs tau_pos > 0 and tau_neg > 0, got {tau_pos}, {tau_neg}")
    ratio = torch.exp(logp - old_logp)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    losses = -torch.sigmoid(tau * (ratio - 1)) * (4 / tau) * advantages
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    return losses, ratio, clip_fractions(zero, zero)
