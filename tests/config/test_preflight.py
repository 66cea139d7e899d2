"""Preflight: what a config names (plugins, rewards, tasks, data, model) is checked before any heavy work."""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mmgrpo.trainer.pipeline
from mmgrpo.cli import main
from mmgrpo.config import Config, ConfigError, load_config


def preflight_problems(config: Config) -> list[str]:
    from mmgrpo.commands.preflight import preflight_problems  # imported here: the command tests need only main

    return preflight_problems(config)


@pytest.fixture()
def no_heavy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a command gets as far as its job (data generation, model loading, SFT)."""

    def heavy_work(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the command started its job despite a bad config")

    monkeypatch.setattr(mmgrpo.trainer.pipeline, "run_training", heavy_work)
    monkeypatch.setattr(mmgrpo.trainer.pipeline, "load_run_policy", heavy_work)


def test_a_bad_reward_name_stops_train_at_once_with_one_line(tmp_path, no_heavy_work, capsys) -> None:
    started = time.perf_counter()
    status = main(["train", "task.rewards={count_acuracy: 1.0}", f"log.output_dir={tmp_path}", f"data.dir={tmp_path}"])
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(
        "mmgrpo train: error: task.rewards: unknown reward 'count_acuracy'. Did you mean 'count_accuracy'"
    )
    assert not any(tmp_path.iterdir()), "nothing is generated or written before the config is known to be good"
    assert elapsed < 5.0, f"took {elapsed:.1f} s"


@pytest.mark.parametrize("command", [["sft", "--out", "unused"], ["reject", "--out", "unused"]])
def test_every_config_command_runs_the_preflight(command, no_heavy_work, capsys) -> None:
    assert main([command[0], "task.rewards={nope: 1.0}", *command[1:]]) == 2
    assert "unknown reward 'nope'" in capsys.readouterr().err


def test_eval_checks_its_datasets_before_loading_a_model(tmp_path, monkeypatch, capsys) -> None:
    import eval

    monkeypatch.setattr(eval, "run_config", lambda *args, **kwargs: pytest.fail("eval started despite a bad dataset"))
    missing = tmp_path / "nowhere"
    assert main(["eval", "--data", str(missing), "--task", "clevr_count", "--adapter", "vlm-r1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["mmgrpo eval: error: data.test[0].adapter: unknown dataset adapter 'vlm-r1'. Did you mean "
                   "'vlm_r1'? Known: canonical, clevr70k, geometry3k, gsm8k, humaneval, mbpp, r1v_jsonl, swift, trl, "
                   "vlm_r1",
                   f"mmgrpo eval: error: data.test[0].path: dataset '{missing}' not found: not a local file or folder, "
                   "nor a Hub id (owner/name)"]


def test_mmgrpo_config_prints_the_config_then_the_problems(tmp_path, capsys) -> None:
    missing = tmp_path / "none.jsonl"
    assert main(["config", f"data.test=[{{path: {missing}}}]"]) == 2
    out, err = capsys.readouterr()
    assert "algo:" in out and err.strip() == (
        f"mmgrpo config: error: data.test[0].path: dataset '{missing}' not found: not a local file or folder, "
        "nor a Hub id (owner/name)"
    )


def test_every_named_thing_is_checked_and_listed(tmp_path) -> None:
    broken_plugin = tmp_path / "broken.py"
    broken_plugin.write_text("raise RuntimeError('plugin bug')\n")
    with pytest.raises(ConfigError) as caught:  # plugins load (and fail) while the config is checked
        load_config(None, [f"task.plugins=[{tmp_path / 'missing.py'}, {broken_plugin}]"])
    assert [problem.split(": plugin")[0] for problem in caught.value.problems] == ["task.plugins[0]", "task.plugins[1]"]
    assert "is not a file" in caught.value.problems[0] and "plugin bug" in caught.value.problems[1]
    config = load_config(None, [
        f"model.name_or_path={tmp_path / 'no-model'}",
        f"data.train=[{{path: {tmp_path}, adapter: clevr7k, task: clever_count, media_root: {tmp_path / 'imgs'}}}]",
        "data.test=[{recipe: clevr_cnt}]",
        f"sft.data=[{{path: {tmp_path / 'sft.jsonl'}}}]",
    ])
    problems = preflight_problems(config)
    expected = [
        "data.train[0].task: unknown task 'clever_count'. Did you mean 'clevr_count'",
        "data.train[0].adapter: unknown dataset adapter 'clevr7k'. Did you mean 'clevr70k'",
        "data.train[0].media_root:", "data.test[0].recipe: unknown data recipe 'clevr_cnt'", "sft.data[0].path:",
        "model.name_or_path: model",
    ]
    assert len(problems) == len(expected) and all(p.startswith(e) for p, e in zip(problems, expected)), problems


def test_rewards_of_plugins_are_known_after_loading(tmp_path) -> None:
    plugin = tmp_path / "judge.py"
    plugin.write_text(
        "from tasks import register_reward\n\n"
        "@register_reward('test_preflight_judge')\n"
        "def judge(completions, **_):\n    return [1.0] * len(completions)\n"
    )
    overrides = ["task.rewards={test_preflight_judge: 1.0}"]
    assert preflight_problems(load_config(None, overrides))[0].startswith("task.rewards: unknown reward")
    assert preflight_problems(load_config(None, [*overrides, f"task.plugins=[{plugin}]"])) == []


@pytest.mark.parametrize(
    ("model", "ok"),
    [("tiny:qwen2_5_vl", True), ("tiny:qwen9", False), ("Qwen/Qwen2.5-VL-3B-Instruct", True), ("/no/such/model", False),
     ("./no-model", False)],
)
def test_model_names(model: str, ok: bool, tmp_path: Path) -> None:
    problems = preflight_problems(load_config(None, [f"model.name_or_path={model}"]))
    assert (problems == []) is ok, problems


def test_the_preflight_is_fast() -> None:
    config = load_config(None, [])
    started = time.perf_counter()
    assert preflight_problems(config) == []
    assert time.perf_counter() - started < 2.0


def test_a_bad_reward_name_is_found_without_importing_model_code(tmp_path) -> None:
    """The check runs on the light import path (no torch, no transformers): a typo costs about a second."""
    code = (
        f"import sys; from mmgrpo.cli import main; status = main(['train', 'task.rewards={{nope: 1.0}}', "
        f"'log.output_dir={tmp_path}', 'data.dir={tmp_path}']); "
        "print(status, [name for name in ('torch', 'transformers') if name in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split("\n")[-2] == "2 []"


def test_defaults_the_checks_skip_are_registered() -> None:
    """Keys at their default are not looked up (that would import torch); so every default must be registered."""
    from mmgrpo.config.validation import REGISTERED_KEYS, value_of
    from mmgrpo.models.tiny import TINY_FAMILIES

    config = Config()
    for key, (module, attribute) in REGISTERED_KEYS.items():
        getattr(importlib.import_module(module), attribute).get(value_of(config, key))
    TINY_FAMILIES.get(config.model.name_or_path.removeprefix("tiny:"))


def test_a_non_finite_reward_weight_is_rejected() -> None:
    from mmgrpo.config import ConfigError

    with pytest.raises(ConfigError, match=r"task.rewards.format=nan: a reward weight must be a finite number"):
        load_config(None, ["task.rewards={format: .nan}"])


def test_task_options_and_guards_are_checked_for_every_task_of_the_run() -> None:
    config = load_config(None, [
        "task.options={coords: relative1000}", "task.guards={max_chars: 4000}",
        "data.train=[{recipe: grounding, task: grounding}, {recipe: clevr_count}]",
    ])
    problems = preflight_problems(config)
    assert len(problems) == 2, problems
    assert problems[0].startswith("task.options: task 'clevr_count' has no option(s) ['coords']")
    assert problems[1].startswith("task.guards: unknown guard option(s) ['max_chars']")
    assert preflight_problems(load_config(None, ["task.name=grounding", "task.options={coords: relative1000}",
                                                 "data.train=[{recipe: grounding}]", "data.test=[{recipe: grounding}]"])) == []
