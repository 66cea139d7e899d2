"""Run a sweep: an Optuna study in an SQLite file beside the trials' run folders.

Each trial samples the search space (TPE), trains in a child process (:mod:`mmgrpo.sweep.trial`)
into ``<out>/trial-<number>/`` and is scored by its held-out evaluation after GRPO. Running the
same command again resumes: finished and pruned trials are kept, a trial that was running when
the sweep stopped is marked failed and its parameters are tried again first.
"""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmgrpo.sweep.space import SearchSpace
from mmgrpo.sweep.trial import PRUNED_EXIT, TrialSpec, pruner

STUDY_FILE = "study.db"
STUDY_NAME = "mmgrpo-sweep"
TRIAL_LOG = "trial.log"  # a trial's stdout and stderr, in its run folder


class TrialFailed(RuntimeError):
    """A trial's training process failed; the study records it and goes on."""


@dataclass(frozen=True)
class SweepOptions:
    recipe: str | None
    overrides: tuple[str, ...]
    space: SearchSpace
    out: Path
    trials: int
    parallel: int = 1
    metric: str = "accuracy"
    direction: str = "maximize"
    seed: int = 0
    prune: bool = True
    startup_trials: int = 2
    warmup_steps: int = 0


def run_sweep(options: SweepOptions) -> Any:
    """Run (or resume) the sweep until ``options.trials`` trials have finished or been pruned; returns the study."""
    import optuna
    from optuna.trial import TrialState

    options.out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{(options.out / STUDY_FILE).resolve()}"
    records = optuna.storages.RDBStorage(storage)
    spec = _trial_spec(options, storage, trial_id=-1, number=-1)
    study = optuna.create_study(
        storage=records, study_name=STUDY_NAME, direction=options.direction, load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=options.seed), pruner=pruner(spec),
    )
    _retry_interrupted(study, records)
    done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    remaining = options.trials - done
    if remaining > 0:
        study.optimize(
            lambda trial: _objective(trial, options, storage), n_trials=remaining, n_jobs=options.parallel,
            catch=(TrialFailed,),
        )
    return study


def _objective(trial: Any, options: SweepOptions, storage: str) -> float:
    import optuna

    params = options.space.suggest(trial)
    run_dir = options.out / f"trial-{trial.number}"
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = _trial_spec(options, storage, trial._trial_id, trial.number, SearchSpace.overrides(params))
    with open(run_dir / TRIAL_LOG, "w") as log:
        code = subprocess.run(
            [sys.executable, "-m", "mmgrpo.sweep.trial", spec.to_json()], stdout=log, stderr=subprocess.STDOUT,
        ).returncode
    if code == PRUNED_EXIT:
        raise optuna.TrialPruned()
    if code != 0:
        raise TrialFailed(f"trial {trial.number} failed with exit status {code}; see {run_dir / TRIAL_LOG}")
    return final_metric(run_dir, options.metric)


def final_metric(run_dir: Path, metric: str) -> float:
    """The metric of the run's held-out evaluation after GRPO."""
    from mmgrpo.reports.run_data import RunData

    numbers = RunData.load(run_dir).evaluation_numbers("after GRPO")
    if not numbers:
        raise TrialFailed(f"{run_dir} has no evaluation after GRPO (eval.after must stay true in a sweep)")
    value = numbers.get(metric)
    if value is None or not math.isfinite(value):
        raise TrialFailed(f"{run_dir}: the evaluation after GRPO has no finite {metric!r}")
    return float(value)


def _trial_spec(options: SweepOptions, storage: str, trial_id: int, number: int, params: list[str] = ()) -> TrialSpec:
    return TrialSpec(
        storage=storage, study_name=STUDY_NAME, trial_id=trial_id, metric=options.metric,
        startup_trials=options.startup_trials, warmup_steps=options.warmup_steps, prune=options.prune,
        recipe=options.recipe,
        overrides=(*options.overrides, *params, f"log.output_dir={options.out}", f"log.run_name=trial-{number}",
                   "log.progress_bar=false"),
    )


def _retry_interrupted(study: Any, records: Any) -> None:
    """Trials left running by a stopped sweep: marked failed, and their parameters queued to run again."""
    from optuna.trial import TrialState

    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        records.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        study.enqueue_trial(trial.params, skip_if_exists=False)
