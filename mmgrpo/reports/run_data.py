"""What a report shows of one run, read from its folder (nothing is recomputed)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mmgrpo.failures import FAILURE_FILE
from mmgrpo.run_files import COMPLETIONS_FILE, METRICS_FILE, read_metrics

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
EVALUATIONS_FILE = "evaluations.json"


@dataclass
class RunData:
    """One run folder's config, summary, per-step metrics, logged completions and evaluations."""

    name: str
    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    rows: list[dict[str, Any]]
    completions: list[dict[str, Any]]
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)  # tag -> EvalResult.to_dict()
    failure: dict[str, Any] = field(default_factory=dict)  # why the last attempt stopped (RunFailure.record())
    _numbers: dict[str, dict[str, float]] = field(default_factory=dict, repr=False)  # tag -> summary, once

    def evaluation_numbers(self, tag: str) -> dict[str, float]:
        """The summary numbers (with intervals) of evaluation ``tag``; {} when there is none. Computed
        once per tag (the intervals are bootstrapped)."""
        if tag not in self._numbers:
            from eval import EvalResult

            data = self.evaluations.get(tag)
            self._numbers[tag] = EvalResult.from_dict(data).summary() if data else {}
        return self._numbers[tag]

    def curve_rows(self) -> list[dict[str, Any]]:
        """The metrics rows, with the evaluations before GRPO (at step 0) and after (at the last step) as rows of
        ``eval/<key>`` numbers among them (as every ``eval.every_n_steps`` logs them), in step order."""
        from eval import EvalResult
        from eval.held_out import STAGES, benchmarks_tag, held_out_numbers

        last = max((row["step"] for row in self.rows if isinstance(row.get("step"), (int, float))), default=None)
        extra = []
        for step, stage in zip((0, last), STAGES):
            if step is None or stage not in self.evaluations:
                continue
            benchmarks = self.evaluations.get(benchmarks_tag(stage))
            numbers = held_out_numbers(EvalResult.from_dict(self.evaluations[stage]),
                                       EvalResult.from_dict(benchmarks) if benchmarks else None)
            extra.append({"step": step, **{f"eval/{key}": value for key, value in numbers.items()}})
        return sorted([*self.rows, *extra], key=lambda row: row.get("step", 0))

    @classmethod
    def load(cls, run_dir: Path) -> RunData:
        """Read ``run_dir``; a run still training (no summary yet) loads with what it has written."""
        run_dir = Path(run_dir)
        if not (run_dir / METRICS_FILE).is_file() and not (run_dir / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{run_dir} is not an mmgrpo run folder: no {METRICS_FILE} or {CONFIG_FILE}")
        return cls(
            name=run_dir.name,
            path=run_dir,
            config=_read_yaml(run_dir / CONFIG_FILE),
            summary=_read_json(run_dir / SUMMARY_FILE),
            rows=read_metrics(run_dir / METRICS_FILE),
            completions=read_metrics(run_dir / COMPLETIONS_FILE),
            evaluations=_read_json(run_dir / EVALUATIONS_FILE),
            failure=_read_json(run_dir / FAILURE_FILE),
        )

    def config_changes(self) -> list[tuple[str, Any, Any]]:
        """(key, default, this run's value) of every config key the run set away from the defaults."""
        from mmgrpo.config import Config

        return config_diff(flatten(Config().to_dict()), flatten(self.config))


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (lists are values)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat |= flatten(value, dotted + ".")
        else:
            flat[dotted] = value
    return flat


def config_diff(defaults: dict[str, Any], values: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, default, value) for each key of ``values`` that differs from ``defaults`` (a key the
    defaults no longer have: default None). Keys ``values`` lacks (added after the run) are left out."""
    return [(key, defaults.get(key), values[key]) for key in sorted(values) if defaults.get(key) != values[key]]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _read_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {} if path.is_file() else {}
