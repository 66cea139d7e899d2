"""mmgrpo's ``algo.loss_type`` objectives against TRL's own ``GRPOTrainer._compute_loss`` (issue #32), in float64.

TRL's loss is a method of the trainer: it is called here unbound, on a stub ``self`` holding only the attributes
it reads (one process, no gradient accumulation, no KL, no entropy bonus, no vLLM) and whose per-token log-prob
method returns the test batch's log-probs, so TRL's own code path computes the loss and its gradient. Each
loss type is run through mmgrpo's mapping (``LOSS_TYPES``: policy loss and aggregation) and must match to 1e-6.

Differences that are by design:

- TRL's per-sequence aggregations (``grpo``, ``sapo``: ``.mean()`` over rows; ``dr_grpo``: ``/ (B * max_len)``)
  count a fully masked row as 0; mmgrpo leaves it out. The batches here have no empty row, and
  ``test_fully_masked_row_by_design`` pins the factor.
- TRL's ``cispo`` takes ``epsilon_high`` as the ratio's cap (no lower bound); mmgrpo's is ``1 + eps_high``, with
  ``eps_low = 1`` for no lower bound.

Run in the reference environment: ``scripts/reference_env.sh``, then ``<venv>/bin/python -m pytest tests/reference``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

grpo_trainer = pytest.importorskip(
    "trl.trainer.grpo_trainer",
    reason="TRL is not installed: run in the reference environment: scripts/reference_env.sh, then "
    "<venv>/bin/python -m pytest tests/reference (default venv .ci/cache/verl-ref)",
)

from mmgrpo.algos import policy_loss  # noqa: E402
from mmgrpo.config.loss_types import LOSS_TYPES, SEQUENCE_LEVEL  # noqa: E402
from tests.reference.batches import FULL_ROWS, LENGTHS, MAX_LEN, SEEDS, TOLERANCE, Batch, make_batch  # noqa: E402

TAU_POS, TAU_NEG = 0.9, 1.3  # SAPO temperatures (TRL sapo_temperature_pos/neg), not the defaults


class OneProcess:
    """The accelerator calls ``_compute_loss`` makes, for a single process."""

    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(tensor: Tensor) -> Tensor:
        return tensor

    @staticmethod
    def reduce(tensor: Tensor, reduction: str = "sum") -> Tensor:
        return tensor


def trl_loss(
    loss_type: str, batch: Batch, eps_low: float, eps_high: float, level: str = "token"
) -> tuple[Tensor, Tensor]:
    """TRL's loss for ``loss_type`` and its gradient with respect to the current log-probs."""
    logp = batch.logp.clone().requires_grad_()
    rows, width = logp.shape
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logp, torch.zeros_like(logp), None),
        loss_type=loss_type, importance_sampling_level=level, epsilon_low=eps_low, epsilon_high=eps_high, beta=0.0,
        args=SimpleNamespace(delta=None, sapo_temperature_pos=TAU_POS, sapo_temperature_neg=TAU_NEG,
                             use_bias_correction_kl=False, steps_per_generation=1),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, aux_loss_enabled=False, _entropy_bonus_enabled=False,
        use_vllm=False, vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=MAX_LEN, accelerator=OneProcess(),
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long), "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, width, dtype=torch.long), "completion_mask": batch.mask,
        "advantages": batch.advantages, "old_per_token_logps": batch.old_logp,
        "num_items_in_batch": batch.mask.sum(),  # one process, one micro-batch: its tokens
    }
    loss = grpo_trainer.GRPOTrainer._compute_loss(trainer, None, inputs)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad


@dataclass(frozen=True)
class TrlCase:
    """A TRL loss type, its clip settings on each side, and the importance-sampling level."""

    loss_type: str
    eps_low: float = 0.2
    eps_high: float = 0.28
    level: str = "token"

    @property
    def trl_eps_high(self) -> float:
        """TRL's cispo caps the ratio at epsilon_high itself."""
        return 1 + self.eps_high if self.loss_type == "cispo" else self.eps_high


def mmgrpo_loss(case: TrlCase, batch: Batch, agg: str | None = None) -> tuple[Tensor, Tensor]:
    """mmgrpo's loss for ``case`` through ``LOSS_TYPES`` (``agg`` overrides the aggregation), and its gradient."""
    objective = LOSS_TYPES[case.loss_type]
    surrogate = SEQUENCE_LEVEL.get(objective.policy_loss, "") if case.level == "sequence" else objective.policy_loss
    options = {"tau_pos": TAU_POS, "tau_neg": TAU_NEG} if surrogate == "sapo" else {}
    logp = batch.logp.clone().requires_grad_()
    loss, _ = policy_loss(
        logp, batch.old_logp, batch.advantages, batch.mask, eps_low=case.eps_low, eps_high=case.eps_high,
        agg=agg or objective.loss_agg, max_len=MAX_LEN, surrogate=surrogate, surrogate_options=options,
    )
    (grad,) = torch.autograd.grad(loss, logp)
    return loss.detach(), grad


CASES = [
    pytest.param(TrlCase("grpo"), id="grpo"),
    pytest.param(TrlCase("bnpo"), id="bnpo"),
    pytest.param(TrlCase("dapo"), id="dapo"),
    pytest.param(TrlCase("dr_grpo"), id="dr_grpo"),
    pytest.param(TrlCase("cispo", eps_low=1.0), id="cispo"),
    pytest.param(TrlCase("sapo"), id="sapo"),
    pytest.param(TrlCase("grpo", level="sequence"), id="grpo-sequence-level"),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES)
def test_loss_type_equals_trl(case: TrlCase, seed: int) -> None:
    """Loss and gradient of each loss_type equal TRL's, on uneven lengths without a fully masked row."""
    batch = make_batch(seed, FULL_ROWS)
    expected, expected_grad = trl_loss(case.loss_type, batch, case.eps_low, case.trl_eps_high, case.level)
    loss, grad = mmgrpo_loss(case, batch)
    torch.testing.assert_close(loss, expected, **TOLERANCE)
    torch.testing.assert_close(grad, expected_grad, **TOLERANCE)


@pytest.mark.parametrize("seed", SEEDS)
def test_sapo_surrogate_equals_trl(seed: int) -> None:
    """mmgrpo's sapo surrogate under seq-mean-token-mean is TRL's sapo loss."""
    batch = make_batch(seed, FULL_ROWS)
    expected, expected_grad = trl_loss("sapo", batch, 0.2, 0.28)
    loss, grad = mmgrpo_loss(TrlCase("sapo"), batch, agg="seq-mean-token-mean")
    torch.testing.assert_close(loss, expected, **TOLERANCE)
    torch.testing.assert_close(grad, expected_grad, **TOLERANCE)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_fully_masked_row_by_design(loss_type: str) -> None:
    """TRL's per-sequence means count a fully masked row as 0; mmgrpo's leave it out."""
    batch = make_batch(0, LENGTHS)
    case: Any = TrlCase(loss_type)
    expected, expected_grad = trl_loss(loss_type, batch, case.eps_low, case.trl_eps_high)
    loss, grad = mmgrpo_loss(case, batch)
    share = len(FULL_ROWS) / len(LENGTHS)
    torch.testing.assert_close(loss * share, expected, **TOLERANCE)
    torch.testing.assert_close(grad * share, expected_grad, **TOLERANCE)
