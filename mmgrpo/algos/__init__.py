"""The GRPO math: pure functions on tensors (no model, no config object, no I/O).

Token-level tensors are ``[B, T]`` with a 0/1 completion mask; prompt tokens never count.
"""

from mmgrpo.algos import (  # noqa: F401 - registering their estimators and policy losses
    advantage_variants,
    covariance_surrogates,
    divergence_surrogates,
    token_baseline,
)
from mmgrpo.algos.advantages import ADVANTAGE_ESTIMATORS, Groups, group_advantages
from mmgrpo.algos.kl import KL_ESTIMATORS, kl_penalty
from mmgrpo.algos.losses import LOSS_AGGREGATIONS, policy_loss
from mmgrpo.algos.mismatch import ISCorrection, importance_weights, logprob_gap
from mmgrpo.algos.overlong import overlong_penalty
from mmgrpo.algos.stats import entropy_from_logits, masked_mean, masked_sum, masked_var, masked_whiten
from mmgrpo.algos.surrogates import SURROGATES

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "SURROGATES",
    "Groups",
    "ISCorrection",
    "entropy_from_logits",
    "group_advantages",
    "importance_weights",
    "kl_penalty",
    "logprob_gap",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "overlong_penalty",
    "policy_loss",
]
