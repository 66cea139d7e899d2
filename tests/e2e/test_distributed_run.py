"""``mmgrpo train`` on 2 ranks (torchrun, gloo on CPU) with each distributed back end: it trains,
stops on SIGTERM with a sharded checkpoint, resumes to exactly the uninterrupted run, and
every checkpoint is a consolidated model that plain transformers loads and generates with.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, AutoProcessor

from mmgrpo.cli import main
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.checkpoint import latest_checkpoint
from tests.torchrun import torchrun

from tests.e2e import distributed_train

pytestmark = pytest.mark.distributed
NEEDS_DEEPSPEED = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is not installed (pip install 'mmgrpo[deepspeed]'): ZeRO runs NOT tested",
)
EXTENSIONS_CACHE = Path(tempfile.gettempdir()) / "mmgrpo-torch-extensions"
STEPS = 3
# fp32 on CPU, same ranks, same order of every reduction: a resumed run repeats the uninterrupted one.
RESUME_TOLERANCE = 1e-6


def _torchrun(
    *arguments: str, stop_in_step: int | None = None, hang_in_step: int | None = None, ranks: int = 2, nodes: int = 1
) -> subprocess.CompletedProcess:
    stop = ["--stop-in-step", str(stop_in_step)] if stop_in_step else []
    stop += ["--hang-in-step", str(hang_in_step)] if hang_in_step else []
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))
    return torchrun(ranks, [distributed_train.__file__, *stop, *arguments], env={"TORCH_EXTENSIONS_DIR": extensions},
                    nodes=nodes)


def _succeeded(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}"


def _stopped_after_step_one(done: subprocess.CompletedProcess, checkpoints: Path) -> None:
    """A run stopped by SIGTERM in step 2 fails (143 from each rank) with step 1 saved."""
    output = f"{done.stdout[-3000:]}\n{done.stderr[-8000:]}"
    assert done.returncode != 0, f"the stopped run succeeded:\n{output}"
    saved = latest_checkpoint(checkpoints)
    assert saved is not None and saved.name == "step-1", f"latest checkpoint {saved} after the stop:\n{output}"


@pytest.fixture(scope="session")
def rate_per_prompt_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward that succeeds at a rate that differs by prompt (1 in ``answer`` completions, by a
    checksum of the text), from any policy."""
    plugin = tmp_path_factory.mktemp("plugins") / "rate_per_prompt.py"
    plugin.write_text(RATE_PER_PROMPT_PLUGIN)
    return plugin


RATE_PER_PROMPT_PLUGIN = '''
import zlib

from tasks import register_reward

@register_reward("one_in_answer")
def one_in_answer(completions, answer, **_):
    return [float(zlib.crc32(text.encode()) % int(n) == 0) for text, n in zip(completions, answer)]
'''


@pytest.mark.parametrize(
    ("backend", "nodes", "fewer_ranks"),
    # ZeRO-2 with dynamic group sizes: ranks hold groups of other sizes, and as many micro-batches
    # (a reward succeeding at a rate per prompt, and 8 training prompts: step 3 meets step 1's prompts with their success counts)
    [pytest.param(["train.backend=deepspeed", "train.zero_stage=2", "algo.dynamic_group_size=true",
                   "rollout.num_generations=8", "algo.group_size_min=2", "algo.group_size_max=12",
                   "data.train.0.recipe_args={n: 10, test_fraction: 0.2}",
                   "task.reward_plugins=[{rate_per_prompt_plugin}]", "task.rewards={one_in_answer: 1.0}"], 1, False,
                  marks=NEEDS_DEEPSPEED, id="zero2"),
     # ZeRO-3 with DAPO's dynamic sampling: the ranks agree on the resampling rounds (groups of
     # prompts whose answer is 1 always succeed, so some are resampled; the others differ). Its
     # stopped run also continues on one rank (converted to DeepSpeed's universal checkpoint)
     pytest.param(["train.backend=deepspeed", "train.zero_stage=3", "algo.dynamic_sampling=true",
                   "task.reward_plugins=[{rate_per_prompt_plugin}]", "task.rewards={one_in_answer: 1.0}"], 1, True,
                  marks=NEEDS_DEEPSPEED, id="zero3"),
     # FSDP2 with held-out evaluations before, during and after (forward passes on every rank), its two
     # ranks on two torchrun nodes meeting through a c10d rendezvous (as two machines would); its stopped
     # run also continues on one rank (FSDP2 checkpoints hold the whole optimizer state)
     pytest.param(["train.backend=fsdp2", "eval.before=true", "eval.after=true", "eval.every_n_steps=2",
                   "eval.limit=4"], 2, True, id="fsdp2-two-nodes")],
)
def test_two_ranks_train_stop_resume_exactly_and_export(
    backend, nodes, fewer_ranks, small_config, tiny_qwen25vl, rate_per_prompt_plugin, tmp_path
):
    config = small_config(
        f"train.steps={STEPS}", "checkpoint.every_n_steps=1", "algo.beta=0.04", "log.completions_per_log=100",
        "log.log_completions_every=1", "eval.before=false", "eval.after=false",
        *(override.replace("{rate_per_prompt_plugin}", str(rate_per_prompt_plugin)) for override in backend),
    )
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    runs = Path(config.log.output_dir)

    _succeeded(_torchrun(str(recipe), "log.run_name=whole", nodes=nodes))
    _stopped_after_step_one(_torchrun(str(recipe), "log.run_name=cut", stop_in_step=2, nodes=nodes),
                            runs / "cut" / "checkpoints")
    if fewer_ranks:
        shutil.copytree(runs / "cut", runs / "fewer")
    _succeeded(_torchrun(str(recipe), "log.run_name=cut", "--resume", nodes=nodes))
    if fewer_ranks:
        _continues_on_one_rank(recipe, runs / "fewer", config.train.backend)

    whole, cut = runs / "whole", runs / "cut"
    assert [row["step"] for row in read_metrics(whole / "metrics.jsonl")] == list(range(1, STEPS + 1))  # rank 0 alone logs
    for expected, resumed in zip(read_metrics(whole / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")):
        assert set(resumed) == set(expected)  # e.g. a step without a trainable group on both or neither
        for name in {"reward/total", "loss", "kl", "grad_norm", "length/total", "rollout_rounds"} & set(expected):
            assert resumed[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (expected["step"], name)
    step_one = [row for row in read_metrics(whole / "completions.jsonl") if row["step"] == 1]
    if config.algo.dynamic_group_size:  # the ranks' trackers agree, so every rank keeps the same statistics
        assert max(row["group_size/max"] - row["group_size/min"] for row in read_metrics(whole / "metrics.jsonl")) > 0
    if config.algo.dynamic_sampling:  # resampled (the ranks agreed on the rounds), logged groups are the kept ones
        assert max(row["rollout_rounds"] for row in read_metrics(whole / "metrics.jsonl")) > 1
    else:
        assert len({row["sample_id"] for row in step_one}) == config.rollout.prompts_per_step  # ranks drew apart
        assert len(step_one) == config.rollout.prompts_per_step * config.rollout.num_generations  # both ranks' groups

    final = f"checkpoints/step-{STEPS}/model.safetensors"
    initial = load_file(str(tiny_qwen25vl / "model.safetensors"))
    expected_weights, resumed_weights = load_file(str(whole / final)), load_file(str(cut / final))
    assert expected_weights.keys() == resumed_weights.keys()
    worst = max(float((expected_weights[n] - resumed_weights[n]).abs().max()) for n in expected_weights)
    assert worst <= RESUME_TOLERANCE
    moved = max(float((expected_weights[n] - initial[n]).abs().max()) for n in initial if n in expected_weights)
    assert moved > 1e-4  # the steps changed the weights: the comparison is not vacuous

    export = whole / "checkpoints" / f"step-{STEPS}"
    model = AutoModelForImageTextToText.from_pretrained(export, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(export)
    inputs = processor.tokenizer("How many objects?", return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]
    if config.eval.after:
        evaluations = json.loads((whole / "evaluations.json").read_text())
        assert set(evaluations) == {"before GRPO", "after GRPO"}
        assert "eval/accuracy" in read_metrics(whole / "metrics.jsonl")[1]  # the eval after step 2


def _continues_on_one_rank(recipe: Path, run: Path, backend: str) -> None:
    """The data position is global; FSDP2 checkpoints hold the whole optimizer state, DeepSpeed's
    are converted to its universal format: a 2-rank run stopped after step 1 continues on 1 rank
    (not bit-equal to 2 ranks: each rank samples with its own seed)."""
    _succeeded(_torchrun(str(recipe), f"log.run_name={run.name}", "--resume", ranks=1))
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert latest_checkpoint(run / "checkpoints").name == f"step-{STEPS}"
    if backend == "deepspeed":
        assert "to DeepSpeed's universal checkpoint" in (run / "train.log").read_text()


def _trained_ids(run: Path) -> dict[int, list[str]]:
    """Per step, the sample ids of the groups trained on, every rank's (completions.jsonl)."""
    steps: dict[int, list[str]] = {}
    for record in read_metrics(run / "completions.jsonl"):
        ids = steps.setdefault(record["step"], [])
        if record["sample_id"] not in ids:
            ids.append(record["sample_id"])
    return steps


ASYNC = ("rollout.mode=async", "rollout.worker_threads=1")


def _async_configs(small_config, tmp_path: Path, backend: list[str], variants: dict[str, tuple[str, ...]]) -> dict[str, Path]:
    """A recipe per variant of one 2-rank run, logging every rank's completions every step."""
    common = (f"train.steps={STEPS}", "algo.beta=0.04", "eval.before=false", "eval.after=false",
              "log.log_completions_every=1", "log.completions_per_log=100", *backend)
    recipes = {}
    for name, overrides in variants.items():
        recipes[name] = tmp_path / f"{name}.yaml"
        small_config(*common, *overrides).save_yaml(recipes[name])
    return recipes


def test_two_ranks_with_a_rollout_worker_each_train_as_sync_mode_and_resume_their_batches_in_flight(
    small_config, tmp_path
):
    """Each rank's worker samples its share of the prompts with sync mode's per-rank seeds from the
    rank's whole weights, gathered one tensor at a time from the FSDP2 shards (ZeRO-3 gathers the same
    way, through the same whole-weights iterator): at max_staleness=0 the run is the sync run. One step
    off-policy, a stop records every rank's batches in flight and the resumed run trains on the sync
    run's prompts in the same order. (ZeRO-2 and one process hand over the module's own weights: the
    single-process tests cover that path.)"""
    backend = ["train.backend=fsdp2"]
    recipes = _async_configs(small_config, tmp_path, backend, {
        "sync": (), "async0": (*ASYNC, "rollout.max_staleness=0"),
        "async1": (*ASYNC, "rollout.max_staleness=1", "algo.is_correction=tis", "checkpoint.every_n_steps=1")})
    output = Path(small_config().log.output_dir)
    for name in ("sync", "async0"):
        _succeeded(_torchrun(str(recipes[name]), f"log.run_name={name}"))
    sync_rows, async_rows = (read_metrics(output / name / "metrics.jsonl") for name in ("sync", "async0"))
    assert sync_rows[-1]["kl"] > 0  # later steps sample from updated weights
    for expected, got in zip(sync_rows, async_rows, strict=True):
        assert got["async/staleness_max"] == 0
        for key in ("loss", "reward/total", "grad_norm", "length/mean"):
            assert got[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), (expected["step"], key)
    assert _trained_ids(output / "async0") == _trained_ids(output / "sync")

    _stopped_after_step_one(_torchrun(str(recipes["async1"]), "log.run_name=cut", stop_in_step=2),
                            output / "cut" / "checkpoints")
    _succeeded(_torchrun(str(recipes["async1"]), "log.run_name=cut", "--resume"))
    assert max(row["async/staleness_max"] for row in read_metrics(output / "cut" / "metrics.jsonl")) == 1
    assert _trained_ids(output / "cut") == _trained_ids(output / "sync")


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
    _succeeded(done)
    assert done.stdout.count('"grpo_steps": 2') == 2  # both ranks ran the whole job
    run = Path(config.log.output_dir) / config.log.run_name
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == [1, 2]  # logged once, by rank 0


def test_a_hanging_rank_fails_the_run_at_the_collective_timeout(small_config, tmp_path):
    config = small_config("train.steps=2", "train.backend=fsdp2", "train.collective_timeout_s=10",
                          "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    started = time.monotonic()
    done = _torchrun(str(recipe), hang_in_step=1)
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
    done = _torchrun(str(recipe))
    _succeeded(done)
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
