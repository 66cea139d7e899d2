"""One sweep trial in its own process: a normal training run (its own folder, logs and seeds) that
reports each intermediate held-out evaluation to the study and stops when the pruner says so.

    python -m mmgrpo.sweep.trial SPEC_JSON

SPEC_JSON holds the study's storage URL and name, the trial id, the metric, the pruner settings,
the recipe and the overrides. Exit status 0: finished; PRUNED_EXIT: pruned; other: failed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

PRUNED_EXIT = 3


@dataclass(frozen=True)
class TrialSpec:
    storage: str
    study_name: str
    trial_id: int
    metric: str  # a held-out eval metric, e.g. accuracy
    startup_trials: int  # MedianPruner: trials completed before any pruning
    warmup_steps: int  # MedianPruner: steps of a trial before it can be pruned
    prune: bool
    recipe: str | None
    overrides: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def pruner(spec: TrialSpec):  # noqa: ANN201 - optuna is imported lazily
    import optuna

    if not spec.prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=spec.startup_trials, n_warmup_steps=spec.warmup_steps)


def run_trial(spec: TrialSpec) -> int:
    import optuna

    from mmgrpo.config import load_config
    from mmgrpo.trainer.pipeline import run_training

    study = optuna.load_study(study_name=spec.study_name, storage=spec.storage, pruner=pruner(spec))
    trial = optuna.trial.Trial(study, spec.trial_id)

    def report(step: int, numbers: dict[str, float]) -> None:
        if spec.metric not in numbers:
            raise KeyError(f"the evaluation has no metric {spec.metric!r}; it has {sorted(numbers)}")
        trial.report(numbers[spec.metric], step)
        if trial.should_prune():
            raise optuna.TrialPruned(f"pruned at step {step}: {spec.metric} = {numbers[spec.metric]:.4g}")

    try:
        run_training(load_config(spec.recipe, spec.overrides), on_eval=report)
    except optuna.TrialPruned as pruned:
        print(pruned, file=sys.stderr)
        return PRUNED_EXIT
    return 0


if __name__ == "__main__":
    data = json.loads(sys.argv[1])
    sys.exit(run_trial(TrialSpec(**{**data, "overrides": tuple(data["overrides"])})))
