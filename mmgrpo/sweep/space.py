"""The search space of a sweep: dotted config keys, each with a distribution (read from YAML).

    train.lr: {type: log_uniform, low: 1.0e-5, high: 1.0e-3}
    algo.beta: {type: uniform, low: 0.0, high: 0.1}
    rollout.num_generations: {type: int, low: 4, high: 16, step: 4}
    algo.loss_agg: {type: categorical, choices: [token-mean, seq-mean-token-mean]}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KINDS = ("log_uniform", "uniform", "int", "categorical")


@dataclass(frozen=True)
class Dimension:
    key: str  # a dotted config key, e.g. train.lr
    kind: str
    low: float | None = None
    high: float | None = None
    step: int = 1
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """This dimension's value for an Optuna ``trial``."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step)
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.kind == "log_uniform")


class SearchSpace:
    """Dimensions over config keys; ``overrides(params)`` turns a trial's values into ``key=value`` overrides."""

    def __init__(self, dimensions: list[Dimension]) -> None:
        if not dimensions:
            raise ValueError("the search space is empty: give at least one config key")
        self.dimensions = dimensions

    @classmethod
    def load(cls, path: Path, known_keys: set[str]) -> SearchSpace:
        """Read ``path``; every problem (an unknown key or type, bad bounds) is an error naming the file and key."""
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a search space is a mapping of config keys to distributions")
        problems = [problem for key, spec in data.items() for problem in _problems(str(key), spec, known_keys)]
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        return cls([_dimension(str(key), spec) for key, spec in data.items()])

    def suggest(self, trial: Any) -> dict[str, Any]:
        return {dimension.key: dimension.suggest(trial) for dimension in self.dimensions}

    @staticmethod
    def overrides(params: dict[str, Any]) -> list[str]:
        return [f"{key}={value}" for key, value in params.items()]


def _dimension(key: str, spec: dict[str, Any]) -> Dimension:
    return Dimension(
        key, spec["type"], low=spec.get("low"), high=spec.get("high"), step=int(spec.get("step", 1)),
        choices=tuple(spec.get("choices", ())),
    )


def _problems(key: str, spec: Any, known_keys: set[str]) -> list[str]:
    if key not in known_keys:
        return [f"{key}: not a config key (see `mmgrpo config --describe`)"]
    if not isinstance(spec, dict) or spec.get("type") not in KINDS:
        return [f"{key}: needs type: one of {', '.join(KINDS)}"]
    if spec["type"] == "categorical":
        return [] if spec.get("choices") else [f"{key}: categorical needs a non-empty choices list"]
    low, high = spec.get("low"), spec.get("high")
    if not all(isinstance(bound, (int, float)) for bound in (low, high)) or low >= high:
        return [f"{key}: needs numbers low < high (got low={low!r}, high={high!r})"]
    if spec["type"] == "log_uniform" and low <= 0:
        return [f"{key}: log_uniform needs low > 0 (got {low})"]
    return []
