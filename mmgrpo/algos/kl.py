"""Per-token estimators of KL(pi || pi_ref) from sampled tokens (Schulman, "Approximating
KL Divergence", 2020, http://joschu.net/blog/kl-approx.html).

Each estimator maps the log-ratio ``d = logp - ref_logp`` of a token sampled from the
policy to an estimate of the KL contribution of that token:

- ``k1 = d``: unbiased, high variance, can be negative.
- ``k2 = d^2 / 2``: biased, low variance, always >= 0.
- ``k3 = exp(-d) + d - 1 = exp(ref - logp) - (ref - logp) - 1``: unbiased and >= 0; the
  estimator DeepSeekMath's GRPO adds to the loss (verl's "low_var_kl").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from mmgrpo.registry import Registry

KLEstimator = Callable[[Tensor], Tensor]
KL_ESTIMATORS: Registry[KLEstimator] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(log_ratio: Tensor) -> Tensor:
    """``d``: the plain log-ratio."""
    return log_ratio


@KL_ESTIMATORS.register("k2")
def kl_k2(log_ratio: Tensor) -> Tensor:
    """``d^2 / 2``."""
    return 0.5 * log_ratio.square()


@KL_ESTIMATORS.register("k3")
def kl_k3(log_ratio: Tensor) -> Tensor:
    """``exp(-d) + d - 1`` (>= 0 since e^x >= 1 + x, 0 exactly when d = 0)."""
    return torch.expm1(-log_ratio) + log_ratio


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3", clamp: float | None = None) -> Tensor:
    """Per-token KL estimate between the policy and the reference model.

    Args:
        logp: policy log-probabilities of the sampled tokens, any shape (e.g. ``[B, T]``).
        ref_logp: reference-model log-probabilities, same shape.
        kind: a name in ``KL_ESTIMATORS`` (``k1``, ``k2``, ``k3``).
        clamp: if given, the log-ratio is clamped to ``[-clamp, clamp]`` before the
            estimator, so ``k3``'s exp cannot overflow (verl clamps at 20 for this).

    Returns:
        The per-token estimate, same shape as ``logp``.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"kl_penalty: logp {tuple(logp.shape)} and ref_logp {tuple(ref_logp.shape)} differ in shape"
        )
    estimator = KL_ESTIMATORS.get(kind)
    log_ratio = logp - ref_logp
    if clamp is not None:
        if clamp <= 0:
            raise ValueError(f"kl_penalty: clamp must be > 0, got {clamp}")
        log_ratio = log_ratio.clamp(-clamp, clamp)
    return estimator(log_ratio)
