"""Training-health alerts from per-step metrics: KL explosion, entropy collapse, groups that stop
varying, completions at the length cap, NaN loss or gradients.

``StepMonitor`` sees one step at a time (the trainer warns in its log as they happen);
``find_alerts`` replays a whole run (the report's banner). Both apply the same rules.
``config_alerts`` adds what the config alone says (an unsafe code sandbox).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmgrpo.config.run_sections import AlertsConfig


@dataclass(frozen=True)
class Alert:
    step: int
    kind: str  # kl, entropy, zero_variance, truncation, nan
    message: str


class StepMonitor:
    """Applies the ``log.alerts`` thresholds step by step; each kind alerts once, when it first fires."""

    def __init__(self, rules: AlertsConfig) -> None:
        self.rules = rules
        self.first_entropy: float | None = None
        self.flat_steps = 0
        self.fired: set[str] = set()

    def observe(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        """The alerts step ``step``'s metrics raise (kinds not raised before)."""
        found = [alert for alert in self._check(step, metrics) if alert.kind not in self.fired]
        self.fired.update(alert.kind for alert in found)
        return found

    def _check(self, step: int, metrics: dict[str, Any]) -> list[Alert]:
        rules, alerts = self.rules, []
        bad = [key for key in ("loss", "grad_norm") if _not_finite(metrics.get(key))]
        if bad:
            alerts.append(Alert(step, "nan", f"{' and '.join(bad)} is not a finite number"))
        kl = metrics.get("kl")
        if isinstance(kl, (int, float)) and kl > rules.kl_max:
            alerts.append(Alert(step, "kl", f"KL to the reference is {kl:.3g} (> {rules.kl_max:g}): the policy is "
                                            "running away from it (lower the learning rate or raise algo.beta)"))
        entropy = metrics.get("entropy")
        if isinstance(entropy, (int, float)) and math.isfinite(entropy):
            if self.first_entropy is None:
                self.first_entropy = entropy
            elif entropy < rules.entropy_drop * self.first_entropy:
                alerts.append(Alert(step, "entropy", f"entropy fell to {entropy:.3g} from {self.first_entropy:.3g} "
                                                     "at the start: the policy is collapsing onto few answers"))
        flat = metrics.get("zero_variance_frac") == 1.0
        self.flat_steps = self.flat_steps + 1 if flat else 0
        if self.flat_steps >= rules.zero_variance_steps:
            alerts.append(Alert(step, "zero_variance", f"for {self.flat_steps} steps every group's rewards were all "
                                                       "equal: the advantages are zero and nothing is learned"))
        truncated = metrics.get("truncation_rate")
        if isinstance(truncated, (int, float)) and truncated > rules.truncation_max:
            alerts.append(Alert(step, "truncation", f"{truncated:.0%} of completions hit the length cap "
                                                    "(rollout.max_new_tokens)"))
        return alerts


def find_alerts(rows: Sequence[dict[str, Any]], rules: AlertsConfig) -> list[Alert]:
    """Every alert a run's metrics rows raise, in step order (each kind once)."""
    monitor = StepMonitor(rules)
    return [alert for row in rows for alert in monitor.observe(int(row.get("step", 0)), row)]


def config_alerts(config: dict[str, Any]) -> list[str]:
    """Warnings a run's resolved config raises by itself: the code sandbox in its unsafe ``process`` mode."""
    options = (config.get("task") or {}).get("options") or {}
    sandbox = options.get("sandbox") if isinstance(options, dict) else None
    if isinstance(sandbox, dict) and sandbox.get("backend") == "process":
        return ["UNSAFE code sandbox (task.options.sandbox.backend=process): model-written code ran as a plain "
                "process with access to this machine"]
    return []


def _not_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not math.isfinite(value)
