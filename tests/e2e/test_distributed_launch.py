"""Starting and failing 2-rank runs: a global batch that does not divide, ``accelerate launch``, a hanging rank,
and rows with and without media on different ranks."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mmgrpo.cli import main
from mmgrpo.run_files import read_metrics
from tests.e2e import distributed_train
from tests.e2e.ranks import STEPS, succeeded, torchrun_train

pytestmark = pytest.mark.distributed


def test_a_global_batch_that_does_not_divide_across_ranks_fails_before_launch(small_config, tmp_path, capsys):
    config = small_config("train.backend=fsdp2", "rollout.prompts_per_step=5", "train.micro_batch_size=4")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    assert main(["train", str(recipe), "--nproc", "2"]) == 2
    error = capsys.readouterr().err
    assert "rollout.prompts_per_step=5" in error and "2 ranks" in error
    assert "WORLD_SIZE" not in os.environ
    assert not (Path(config.log.output_dir) / config.log.run_name).exists()


def test_accelerate_launch_starts_two_ranks(small_config, tmp_path):
    """``accelerate launch`` in place of torchrun (``mmgrpo train --nproc 2`` starts the installed-task
    package's 2-rank run in tests/e2e/test_outside_task.py)."""
    if importlib.util.find_spec("accelerate") is None:
        pytest.skip("accelerate is not installed: its launcher NOT tested")
    config = small_config("train.steps=2", "train.backend=fsdp2", "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "mmgrpo", "train", str(recipe)]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=900)
    succeeded(done)
    assert done.stdout.count('"grpo_steps": 2') == 2  # both ranks ran the whole job
    run = Path(config.log.output_dir) / config.log.run_name
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == [1, 2]  # logged once, by rank 0


def test_a_hanging_rank_fails_the_run_at_the_collective_timeout(small_config, tmp_path):
    config = small_config("train.steps=2", "train.backend=fsdp2", "train.collective_timeout_s=10",
                          "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    started = time.monotonic()
    done = torchrun_train(str(recipe), hang_in_step=1)
    assert done.returncode != 0
    assert time.monotonic() - started < distributed_train.HANG_SECONDS / 2  # did not wait for the hung rank
    failure = next(line for line in done.stderr.splitlines() if line.startswith("mmgrpo train: rank 0 of 2 failed"))
    assert "Timed out" in failure  # the rank that gave up says why


@pytest.mark.parametrize(
    "backend",
    # FSDP2 gathers the tower's weights in each forward and reduces its gradients: the stricter of the two
    # (ZeRO-2, which only reduces them, was run too when the pass landed)
    [pytest.param({"backend": "fsdp2"}, id="fsdp2")],
)
def test_rows_with_and_without_media_train_on_several_ranks(backend, tiny_qwen25vl, tmp_path):
    """Image counting mixed with text-only arithmetic: in a step where one rank's prompt has an image and the
    other's has none, the rank without media runs the dummy media pass (the vision tower on a tiny input at
    weight zero) in rollout, reference and training forwards, so the ranks' collectives match and the run
    trains (without the pass ZeRO-2 and FSDP2 abort in the first such step; the short collective timeout
    turns a mismatch that would hang into a failure)."""
    recipe = tmp_path / "mixed.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"name_or_path": str(tiny_qwen25vl)},
        "log": {"run_name": "mixed", "output_dir": str(tmp_path / "runs"), "progress_bar": False, "tensorboard": False,
                "log_completions_every": 1, "completions_per_log": 100},
        "data": {"dir": str(tmp_path / "data"), "train": [
            {"recipe": "clevr_count", "task": "clevr_count", "recipe_args": {"n": 20}},
            {"recipe": "arithmetic", "task": "math", "recipe_args": {"n": 20}},
        ]},
        "sft": {"enabled": False}, "eval": {"before": False, "after": False}, "algo": {"beta": 0.04},
        "rollout": {"prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 6},
        "train": {"steps": STEPS, "micro_batch_size": 4, "collective_timeout_s": 60, **backend},
    }))
    done = torchrun_train(str(recipe))
    succeeded(done)
    run = tmp_path / "runs" / "mixed"
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    tasks = _trained_tasks(run)  # one prompt per rank and step
    assert any(sorted(step) == ["clevr_count", "math"] for step in tasks.values()), tasks  # one rank text-only


def _trained_tasks(run: Path) -> dict[int, list[str]]:
    """Per step, the task of each group trained on, every rank's (completions.jsonl)."""
    steps: dict[int, dict[str, str]] = {}
    for record in read_metrics(run / "completions.jsonl"):
        steps.setdefault(record["step"], {})[record["sample_id"]] = record["task"]
    return {step: list(groups.values()) for step, groups in steps.items()}
