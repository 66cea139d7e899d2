"""``sweep.md`` and its plots: every trial with its parameters and score, the best, parameter importances."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SUMMARY_FILE = "sweep.md"
OBJECTIVE_PLOT = "sweep_objective.png"
IMPORTANCE_PLOT = "sweep_importances.png"


def write_summary(study: Any, out: Path, metric: str) -> Path:
    """Write ``out/sweep.md`` (and its plots) for ``study``."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    keys = sorted({key for trial in trials for key in trial.params})
    lines = [f"# Sweep: {len(trials)} trial(s), objective {metric} after GRPO ({study.direction.name.lower()})", ""]
    complete = [trial for trial in trials if trial.state == TrialState.COMPLETE]
    if complete:
        best = study.best_trial
        lines += [f"Best: trial {best.number}, {metric} = {best.value:.4g}, run folder `trial-{best.number}/`, with "
                  + ", ".join(f"`{key}={value}`" for key, value in best.params.items()), ""]
    lines += ["| trial | state | " + " | ".join(keys) + f" | {metric} | last reported |",
              "|---|---|" + "---|" * len(keys) + "---|---|"]
    for trial in trials:
        reported = trial.intermediate_values
        last = f"{reported[max(reported)]:.4g} (step {max(reported)})" if reported else ""
        value = f"{trial.value:.4g}" if trial.value is not None else ""
        cells = " | ".join(_fmt(trial.params.get(key)) for key in keys)
        lines.append(f"| {trial.number} | {trial.state.name.lower()} | {cells} | {value} | {last} |")
    importances = parameter_importances(study)
    if importances:
        lines += ["", "Parameter importances (fANOVA over the finished trials):", ""]
        lines += [f"- `{key}`: {value:.3f}" for key, value in importances.items()]
    lines += ["", *_plots(study, out, metric, importances)]
    path = out / SUMMARY_FILE
    path.write_text("\n".join(lines) + "\n")
    return path


def parameter_importances(study: Any) -> dict[str, float]:
    """Optuna's importances, or nothing while fewer than two trials have finished with different values."""
    import optuna
    from optuna.trial import TrialState

    complete = [trial for trial in study.get_trials(deepcopy=False) if trial.state == TrialState.COMPLETE]
    if len(complete) < 2 or len({trial.value for trial in complete}) < 2:
        return {}
    return optuna.importance.get_param_importances(study)


def _plots(study: Any, out: Path, metric: str, importances: dict[str, float]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scored = [(trial.number, trial.value) for trial in study.get_trials(deepcopy=False) if trial.value is not None]
    lines = []
    if scored:
        figure, axis = plt.subplots(figsize=(5, 3))
        axis.plot(*zip(*scored), "o")
        axis.set_xlabel("trial")
        axis.set_ylabel(metric)
        axis.set_title(f"{metric} after GRPO per trial")
        figure.tight_layout()
        figure.savefig(out / OBJECTIVE_PLOT, dpi=100)
        plt.close(figure)
        lines.append(f"![objective per trial]({OBJECTIVE_PLOT})")
    if importances:
        figure, axis = plt.subplots(figsize=(5, 0.5 + 0.4 * len(importances)))
        axis.barh(list(importances), list(importances.values()))
        axis.set_title("parameter importances")
        figure.tight_layout()
        figure.savefig(out / IMPORTANCE_PLOT, dpi=100)
        plt.close(figure)
        lines.append(f"![parameter importances]({IMPORTANCE_PLOT})")
    return lines


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else "" if value is None else str(value)
