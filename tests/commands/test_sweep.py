"""`mmgrpo sweep`: the search space file, trials as run folders, median pruning, resuming a stopped sweep."""

from __future__ import annotations


import pytest

from mmgrpo.cli import main
from mmgrpo.config import Config
from mmgrpo.reports.run_data import flatten
from mmgrpo.sweep.space import SearchSpace
from mmgrpo.sweep.study import STUDY_FILE, STUDY_NAME, SweepOptions, run_sweep
from mmgrpo.sweep.summary import write_summary

optuna = pytest.importorskip("optuna", reason="Optuna is not installed (pip install -e '.[sweep]')")

KNOWN_KEYS = set(flatten(Config().to_dict()))


def test_search_space_reads_every_kind_and_names_each_bad_key(tmp_path):
    good = tmp_path / "space.yaml"
    good.write_text(
        "train.lr: {type: log_uniform, low: 1.0e-5, high: 1.0e-3}\n"
        "algo.beta: {type: uniform, low: 0.0, high: 0.1}\n"
        "rollout.num_generations: {type: int, low: 4, high: 16, step: 4}\n"
        "algo.loss_agg: {type: categorical, choices: [token-mean, seq-mean-token-mean]}\n"
    )
    space = SearchSpace.load(good, KNOWN_KEYS)
    trial = optuna.trial.FixedTrial(
        {"train.lr": 1e-4, "algo.beta": 0.05, "rollout.num_generations": 8, "algo.loss_agg": "token-mean"}
    )
    params = space.suggest(trial)
    assert SearchSpace.overrides(params) == [
        "train.lr=0.0001", "algo.beta=0.05", "rollout.num_generations=8", "algo.loss_agg=token-mean"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("train.learning_rate: {type: uniform, low: 0, high: 1}\ntrain.lr: {type: log_uniform, low: 0, high: 1}\n"
                   "algo.beta: {type: normal}\n")
    with pytest.raises(ValueError) as error:
        SearchSpace.load(bad, KNOWN_KEYS)
    message = str(error.value)
    assert str(bad) in message and "train.learning_rate: not a config key" in message
    assert "train.lr: log_uniform needs low > 0" in message and "algo.beta: needs type" in message


@pytest.fixture()
def sweep_options(tmp_path, tiny_qwen25vl, digit_reward_plugin):
    def make(trials: int, **extra) -> SweepOptions:
        space = tmp_path / "space.yaml"
        space.write_text("rollout.max_new_tokens: {type: categorical, choices: [2, 6]}\n")
        overrides = (
            f"model.name_or_path={tiny_qwen25vl}", f"data.dir={tmp_path / 'data'}", "log.tensorboard=false",
            "data.train.0.recipe_args={n: 40, test_fraction: 0.2}", "data.test.0.recipe_args={n: 40, test_fraction: 0.2}",
            f"task.reward_plugins=[{digit_reward_plugin}]", "task.rewards={share_of_threes: 1.0}",
            "rollout.prompts_per_step=2", "rollout.num_generations=4", "train.micro_batch_size=8", "train.steps=2",
            "sft.enabled=false", "eval.limit=4", "eval.every_n_steps=2", "eval.before=false", "checkpoint.every_n_steps=0",
        )
        return SweepOptions(recipe=None, overrides=overrides, space=SearchSpace.load(space, KNOWN_KEYS),
                            out=tmp_path / "sweep", trials=trials, metric="mean_length", **extra)

    return make


def test_a_sweep_prunes_a_poor_trial_and_resumes_where_it_stopped(sweep_options, tmp_path):
    options = sweep_options(trials=2, startup_trials=2)
    storage = f"sqlite:///{(options.out / STUDY_FILE).resolve()}"
    options.out.mkdir(parents=True)
    study = optuna.create_study(storage=storage, study_name=STUDY_NAME, direction="maximize")
    for tokens in (6, 6, 2):  # two long-answer trials, then one whose mean length must fall below their median
        study.enqueue_trial({"rollout.max_new_tokens": tokens})
    study = run_sweep(options)
    assert [trial.state.name for trial in study.trials] == ["COMPLETE", "COMPLETE", "WAITING"]
    running = study.ask()  # the third trial left running, as when a sweep is stopped mid-trial
    assert running.suggest_categorical("rollout.max_new_tokens", [2, 6]) == 2

    resumed = run_sweep(sweep_options(trials=3, startup_trials=2))
    states = [trial.state.name for trial in resumed.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "PRUNED"]  # only the interrupted trial ran again, and pruned
    assert resumed.trials[3].params == {"rollout.max_new_tokens": 2}
    assert resumed.trials[3].intermediate_values.keys() == {2}  # reported at its first evaluation, then stopped
    for trial in (resumed.trials[0], resumed.trials[1], resumed.trials[3]):
        assert (options.out / f"trial-{trial.number}" / "metrics.jsonl").is_file()  # each trial is a run folder
    assert resumed.trials[0].value == pytest.approx(resumed.best_value) and resumed.best_value > 2
    summary = write_summary(resumed, options.out, "mean_length").read_text()
    assert "| 3 | pruned |" in summary and "Best: trial" in summary


def test_sweep_command_refuses_a_run_without_an_evaluation_after_grpo(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("train.lr: {type: log_uniform, low: 1.0e-5, high: 1.0e-3}\n")
    assert main(["sweep", "eval.after=false", "--space", str(space), "--trials", "1"]) == 2


def test_sweep_command_runs_trials_in_parallel_and_writes_the_summary(sweep_options, tmp_path):
    options = sweep_options(trials=2)
    space = tmp_path / "space.yaml"
    assert main(["sweep", *options.overrides, "--space", str(space), "--trials", "2", "--parallel", "2",
                 "--metric", "mean_length", "--out", str(options.out), "--no-pruning"]) == 0
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{(options.out / STUDY_FILE).resolve()}")
    assert [trial.state.name for trial in study.trials] == ["COMPLETE", "COMPLETE"]
    summary = (options.out / "sweep.md").read_text()
    assert "Best: trial" in summary and (options.out / "sweep_objective.png").is_file()
