"""A task written outside the repository, as a plain file and as a pip-installed package, goes
through every job with no launcher and no edit to the repository: train (sync, async, 2 ranks
under torchrun), eval, sweep (the file) and reject. A file task reaches a fresh process the way each torchrun
rank loads it (the config names it in task.plugins), which the sweep's trial process shows; the ranks themselves
are shown with the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmgrpo.cli import main

FILE_TASK = '''
from tasks import register_reward, register_task
from tasks.clevr_count import ClevrCountTask


@register_reward("outside_short")
def short(completions, **fields):
    """Shorter completions score higher: a reward a random policy moves on."""
    return [1.0 - min(1.0, len(text) / 32) for text in completions]


@register_task("outside_count")
class OutsideCount(ClevrCountTask):
    default_rewards = {"outside_short": 1.0, "count_accuracy": 1.0}
'''


@pytest.fixture(scope="session")
def outside_task_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file per session: in one process a name is registered by one definition."""
    plugin = tmp_path_factory.mktemp("elsewhere") / "outside_task.py"
    plugin.write_text(FILE_TASK)
    return plugin


@pytest.fixture()
def outside_recipe(small_config, tmp_path: Path, outside_task_file: Path) -> Path:
    """A recipe naming a task that only a file outside the repository registers."""
    plugin = outside_task_file
    config = small_config(
        f"task.plugins=[{plugin}]", "task.name=outside_count", "task.rewards={}", "train.steps=3",
        "eval.limit=4", "data.train.0.recipe_args={n: 20, test_fraction: 0.2}",
        "data.test.0.recipe_args={n: 20, test_fraction: 0.2}",
    )
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    return recipe


def run_summary(recipe: Path, run_name: str) -> dict:
    """The summary of run ``run_name`` of the recipe (small_config writes runs next to it)."""
    return json.loads((recipe.parent / "runs" / run_name / "summary.json").read_text())


@pytest.mark.slow
def test_a_file_task_trains_sync_and_async_evaluates_and_is_rejection_sampled(outside_recipe: Path, tmp_path: Path):
    assert main(["train", str(outside_recipe)]) == 0
    assert run_summary(outside_recipe, "test")["grpo_steps"] == 3
    assert main(["train", str(outside_recipe), "rollout.mode=async", "log.run_name=async"]) == 0  # a worker process
    metrics = [json.loads(line) for line in (tmp_path / "runs" / "async" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 3 and all("reward/outside_short" in row for row in metrics)

    assert main(["eval", "--recipe", str(outside_recipe), "--out", str(tmp_path / "eval"), "--limit", "3"]) == 0
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    (entry,) = results["models"].values()
    assert list(entry["datasets"]) == ["outside_count"]

    kept = tmp_path / "kept.jsonl"
    assert main(["reject", str(outside_recipe), "--out", str(kept), "--threshold", "0.0"]) == 0
    assert all(json.loads(line)["task"] == "outside_count" for line in kept.read_text().splitlines())


@pytest.mark.slow
def test_a_file_task_sweeps(outside_recipe: Path, tmp_path: Path):
    pytest.importorskip("optuna")
    space = tmp_path / "space.yaml"
    space.write_text("train.lr: {type: log_uniform, low: 1.0e-4, high: 1.0e-2}\n")
    out = tmp_path / "sweep"
    assert main(["sweep", str(outside_recipe), "--space", str(space), "--trials", "1", "--out", str(out)]) == 0
    assert "| 0 | complete |" in (out / "sweep.md").read_text()  # the trial process found the task


@pytest.mark.slow
@pytest.mark.distributed
def test_an_installed_task_package_trains_on_two_ranks_and_evaluates(tmp_path: Path, tiny_qwen25vl: Path):
    assert main(["task", "new", "leftmost", "--modality", "image", "--out", str(tmp_path)]) == 0
    venv = tmp_path / "venv"  # this environment's packages, plus the task package installed by pip
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                    "--no-build-isolation", "-e", str(tmp_path / "mmgrpo-leftmost")], check=True, capture_output=True)
    work = tmp_path / "work"  # a folder that knows nothing of the package
    work.mkdir()
    overrides = [
        f"model.name_or_path={tiny_qwen25vl}", f"log.output_dir={work / 'runs'}", "log.progress_bar=false",
        "log.tensorboard=false", f"data.dir={work / 'data'}", "data.train.0.recipe_args={n: 24}",
        "data.test.0.recipe_args={n: 24}", "sft.steps=2", "train.steps=2", "rollout.prompts_per_step=4",
        "rollout.num_generations=2", "train.micro_batch_size=4", "sft.batch_size=8", "sft.micro_batch_size=4",
        "eval.limit=4", "train.backend=fsdp2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    trained = subprocess.run([python, "-m", "mmgrpo", "train", str(tmp_path / "mmgrpo-leftmost" / "recipe.yaml"), *overrides,
                              "--nproc", "2"], cwd=work, env=env, capture_output=True, text=True, check=False)
    assert trained.returncode == 0, trained.stderr[-3000:]
    summary = json.loads((work / "runs" / "leftmost" / "summary.json").read_text())
    assert summary["grpo_steps"] == 2
    assert trained.stdout.count('"grpo_steps": 2') == 2  # --nproc 2 started two ranks, each ran the whole job
    evaluated = subprocess.run(
        [python, "-m", "mmgrpo", "eval", "--model", str(tiny_qwen25vl), "--task", "leftmost", "--data",
         str(next((work / "data").iterdir())), "--limit", "3", "--out", str(work / "evaluation")],
        cwd=work, env=env, capture_output=True, text=True, check=False,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (entry,) = json.loads((work / "evaluation" / "results.json").read_text())["models"].values()
    assert list(entry["datasets"]) == ["leftmost"]
    one_process = [arg for arg in overrides if arg != "train.backend=fsdp2"]
    recipe = str(tmp_path / "mmgrpo-leftmost" / "recipe.yaml")
    asynchronous = subprocess.run(  # the rollout worker process finds the installed task too
        [python, "-m", "mmgrpo", "train", recipe, *one_process, "rollout.mode=async", "log.run_name=async", "sft.steps=0",
         "eval.before=false", "eval.after=false"], cwd=work, env=env, capture_output=True, text=True, check=False,
    )
    assert asynchronous.returncode == 0, asynchronous.stderr[-3000:]
    kept = work / "kept.jsonl"
    rejected = subprocess.run([python, "-m", "mmgrpo", "reject", recipe, *one_process, "--out", str(kept),
                               "--threshold", "0.0"], cwd=work, env=env, capture_output=True, text=True, check=False)
    assert rejected.returncode == 0, rejected.stderr[-3000:]
    assert all(json.loads(line)["task"] == "leftmost" for line in kept.read_text().splitlines())
