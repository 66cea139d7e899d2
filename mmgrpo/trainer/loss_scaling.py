"""Dynamic loss scaling for float16 training (``train.precision=fp16``).

float16 has 5 exponent bits: gradients of a few 1e-8 underflow to zero. The loss is
multiplied by a large scale before backward, the gradients divided by it before clipping
and the optimizer step; a step whose gradients overflowed (inf/NaN) is skipped and the scale
halved, and after ``growth_interval`` clean steps it doubles (the scheme of Micikevicius et
al. 2018, as ``torch.amp.GradScaler`` and DeepSpeed implement it). bfloat16 has float32's
exponent range and needs none of this: for ``fp32`` and ``bf16`` the scaler passes through.
"""

from __future__ import annotations

from typing import Any

import torch

PRECISION_DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
"""Autocast dtype of each ``train.precision`` (None: no autocast)."""


def autocast_dtype(precision: str) -> torch.dtype | None:
    """The dtype forward/backward run in under ``precision`` (None for fp32)."""
    if precision not in PRECISION_DTYPES:
        raise ValueError(f"unknown precision {precision!r}; known: {sorted(PRECISION_DTYPES)}")
    return PRECISION_DTYPES[precision]


class LossScaler:
    """Scales losses and steps the optimizer only on finite gradients (fp16); a no-op otherwise."""

    def __init__(self, precision: str, device_type: str, *, initial_scale: float = 2.0**16,
                 growth_interval: int = 2000) -> None:
        self.enabled = precision == "fp16"
        self.skipped_steps = 0
        self._scaler = torch.amp.GradScaler(
            device_type, init_scale=initial_scale, growth_interval=growth_interval, enabled=self.enabled
        )

    @property
    def scale(self) -> float | None:
        """The current loss scale (None when scaling is off)."""
        return float(self._scaler.get_scale()) if self.enabled else None

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` times the scale, to call backward on."""
        return self._scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the accumulated gradients by the scale (before clipping or reading their norm)."""
        if self.enabled:
            self._scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step ``optimizer`` unless the gradients overflowed; update the scale. True if it stepped."""
        if not self.enabled:
            optimizer.step()
            return True
        scale_before = self._scaler.get_scale()
        self._scaler.step(optimizer)
        self._scaler.update()
        stepped = self._scaler.get_scale() >= scale_before  # the scale only falls on an overflow
        self.skipped_steps += not stepped
        return stepped

    def metrics(self) -> dict[str, float]:
        """``precision/loss_scale`` and ``precision/skipped_steps`` (so far) under fp16; {} otherwise."""
        if not self.enabled:
            return {}
        return {"precision/loss_scale": self.scale, "precision/skipped_steps": float(self.skipped_steps)}

    def state_dict(self) -> dict[str, Any]:
        return {**self._scaler.state_dict(), "skipped_steps": self.skipped_steps} if self.enabled else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.enabled and state:
            state = dict(state)
            self.skipped_steps = int(state.pop("skipped_steps", 0))
            self._scaler.load_state_dict(state)
