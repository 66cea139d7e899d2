"""The loss names TRL and ms-swift users type (``loss_type``), as the (policy loss, aggregation, advantage
estimator) each stands for here; and ``importance_sampling_level=sequence`` (TRL's switch to GSPO)."""

from __future__ import annotations

from typing import NamedTuple


class Objective(NamedTuple):
    """What a run optimises: ``algo.policy_loss``, ``algo.loss_agg``, ``algo.advantage_estimator``."""

    policy_loss: str
    loss_agg: str
    advantage_estimator: str


LOSS_TYPES: dict[str, Objective] = {
    # TRL's grpo: each completion's token mean, then the mean over completions (DeepSeekMath)
    "grpo": Objective("vanilla", "seq-mean-token-mean", "grpo"),
    # bnpo and dapo: one token mean over the batch (TRL's bnpo normalises by each process's tokens, dapo by all
    # processes': the same in one process; here the normaliser is always every rank's)
    "bnpo": Objective("vanilla", "token-mean", "grpo"),
    "dapo": Objective("vanilla", "token-mean", "grpo"),
    # Dr. GRPO: each completion's token sum over the generation budget, advantages not divided by the std
    "dr_grpo": Objective("vanilla", "seq-mean-token-sum-norm", "dr_grpo"),
    "cispo": Objective("cispo", "token-mean", "grpo"),
    # TRL aggregates sapo as grpo: each completion's token mean, then the mean over completions
    "sapo": Objective("sapo", "seq-mean-token-mean", "grpo"),
}
SEQUENCE_LEVEL = {"vanilla": "gspo"}
"""``importance_sampling_level=sequence``: the policy loss with the sequence's ratio in place of the token's."""


def describe_loss_types() -> str:
    """One line per name: what it sets."""
    return "; ".join(f"{name} = policy_loss {objective.policy_loss}, loss_agg {objective.loss_agg}, "
                     f"advantage_estimator {objective.advantage_estimator}" for name, objective in LOSS_TYPES.items())
