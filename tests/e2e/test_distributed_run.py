"""``mmgrpo train`` on 2 ranks (torchrun, gloo on CPU) with each distributed back end: it trains,
stops on SIGTERM with a sharded checkpoint, resumes to exactly the uninterrupted run (ZeRO-3 and FSDP2:
ZeRO-2 saves and loads through the same DeepSpeed calls as ZeRO-3), and every checkpoint is a
consolidated model that plain transformers loads and generates with.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForImageTextToText, AutoProcessor

from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.checkpoint import latest_checkpoint
from tests.e2e.ranks import NEEDS_DEEPSPEED, STEPS, stopped_after_step_one, succeeded, torchrun_train
from tests.training import DENSE_REWARD

pytestmark = pytest.mark.distributed
# fp32 on CPU, same ranks, same order of every reduction: a resumed run repeats the uninterrupted one.
RESUME_TOLERANCE = 1e-6


@pytest.mark.parametrize(
    ("backend", "nodes", "stops", "fewer_ranks"),
    # ZeRO-2 with dynamic group sizes: ranks hold groups of other sizes, and as many micro-batches
    # (a reward succeeding at a rate per prompt, and 8 training prompts: step 3 meets step 1's prompts with their success counts)
    # ReMax's greedy baselines too: one more greedy completion per prompt on each rank, merged for the advantages
    [pytest.param(["train.backend=deepspeed", "train.zero_stage=2", "algo.dynamic_group_size=true",
                   "algo.advantage_estimator=remax", "rollout.num_generations=8", "algo.group_size_min=2",
                   "algo.group_size_max=12",
                   "data.train.0.recipe_args={n: 10, test_fraction: 0.2}",
                   "task.reward_plugins=[{rate_per_prompt_plugin}]", "task.rewards={one_in_answer: 1.0}"], 1, False,
                  False, marks=NEEDS_DEEPSPEED, id="zero2"),
     # ZeRO-3 with DAPO's dynamic sampling: the ranks agree on the resampling rounds (groups of
     # prompts whose answer is 1 always succeed, so some are resampled; the others differ). Its
     # stopped run also continues on one rank (converted to DeepSpeed's universal checkpoint). The optimal token
     # baseline: each rank's forward of its own groups under ZeRO-3, the advantages logged from both ranks
     pytest.param(["train.backend=deepspeed", "train.zero_stage=3", "algo.dynamic_sampling=true",
                   "algo.advantage_estimator=optimal_token_baseline",
                   "task.reward_plugins=[{rate_per_prompt_plugin}]", "task.rewards={one_in_answer: 1.0}"], 1, True,
                  True, marks=NEEDS_DEEPSPEED, id="zero3"),
     # FSDP2 with held-out evaluations before, during and after, data-parallel (5 items in batches of 2: blocks
     # of 3 and 2, so the second rank decodes a discarded item in lockstep to keep each FSDP2 forward collective
     # matched), its two ranks on two torchrun nodes meeting through a c10d rendezvous (as two machines would); its
     # stopped run also continues on one rank (FSDP2 checkpoints hold the whole optimizer state). Clip-Cov draws its
     # detached tokens from each rank's generator (restored exactly on resume); GDPO whitens over both ranks
     pytest.param(["train.backend=fsdp2", "eval.before=true", "eval.after=true", "eval.every_n_steps=2",
                   "eval.limit=5", "eval.batch_size=2", "algo.policy_loss=clip_cov", "algo.clip_cov_ratio=0.1", "algo.clip_cov_lb=-100",
                   "algo.clip_cov_ub=100", "algo.advantage_estimator=gdpo"], 2, True, True, id="fsdp2-two-nodes")],
)
def test_two_ranks_train_and_export_and_resume_exactly(
    backend, nodes, stops, fewer_ranks, small_config, tiny_qwen25vl, rate_per_prompt_plugin, tmp_path
):
    config = small_config(
        f"train.steps={STEPS}", "checkpoint.every_n_steps=1", "algo.beta=0.04", "log.completions_per_log=100",
        "log.log_completions_every=1", "eval.before=false", "eval.after=false",
        *(override.replace("{rate_per_prompt_plugin}", str(rate_per_prompt_plugin)) for override in backend),
    )
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    runs = Path(config.log.output_dir)

    succeeded(torchrun_train(str(recipe), "log.run_name=whole", nodes=nodes))
    whole = runs / "whole"
    assert [row["step"] for row in read_metrics(whole / "metrics.jsonl")] == list(range(1, STEPS + 1))  # rank 0 alone logs
    if stops:
        _stops_and_resumes_exactly(recipe, runs, nodes, fewer_ranks, config.train.backend)
    step_one = [row for row in read_metrics(whole / "completions.jsonl") if row["step"] == 1]
    if config.algo.dynamic_group_size:  # the ranks' trackers agree, so every rank keeps the same statistics
        assert max(row["group_size/max"] - row["group_size/min"] for row in read_metrics(whole / "metrics.jsonl")) > 0
    if config.algo.dynamic_sampling:  # resampled (the ranks agreed on the rounds), logged groups are the kept ones
        assert max(row["rollout_rounds"] for row in read_metrics(whole / "metrics.jsonl")) > 1
    else:
        assert len({row["sample_id"] for row in step_one}) == config.rollout.prompts_per_step  # ranks drew apart
        assert len(step_one) == config.rollout.prompts_per_step * config.rollout.num_generations  # both ranks' groups

    initial = load_file(str(tiny_qwen25vl / "model.safetensors"))
    expected_weights = load_file(str(whole / f"checkpoints/step-{STEPS}/model.safetensors"))
    moved = max(float((expected_weights[n] - initial[n]).abs().max()) for n in initial if n in expected_weights)
    assert moved > 1e-4  # the steps changed the weights: a resumed run's equal weights are not vacuous

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
        _sharded_eval_equals_one_process(recipe, whole, tmp_path / "one-process")


def _stops_and_resumes_exactly(recipe: Path, runs: Path, nodes: int, fewer_ranks: bool, backend: str) -> None:
    """Stopped in step 2 (SIGTERM) and resumed, the run repeats ``runs/whole``: its metrics and final weights."""
    stopped_after_step_one(torchrun_train(str(recipe), "log.run_name=cut", stop_in_step=2, nodes=nodes),
                            runs / "cut" / "checkpoints")
    if fewer_ranks:
        shutil.copytree(runs / "cut", runs / "fewer")
    succeeded(torchrun_train(str(recipe), "log.run_name=cut", "--resume", nodes=nodes))
    if fewer_ranks:
        _continues_on_one_rank(recipe, runs / "fewer", backend)
    whole, cut = runs / "whole", runs / "cut"
    expected_rows, resumed_rows = read_metrics(whole / "metrics.jsonl"), read_metrics(cut / "metrics.jsonl")
    for expected, resumed in zip(expected_rows, resumed_rows, strict=True):
        assert set(resumed) == set(expected)  # e.g. a step without a trainable group on both or neither
        for name in {"reward/total", "loss", "kl", "grad_norm", "length/total", "rollout_rounds"} & set(expected):
            assert resumed[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (expected["step"], name)
    final = f"checkpoints/step-{STEPS}/model.safetensors"
    expected_weights, resumed_weights = load_file(str(whole / final)), load_file(str(cut / final))
    assert expected_weights.keys() == resumed_weights.keys()
    worst = max(float((expected_weights[n] - resumed_weights[n]).abs().max()) for n in expected_weights)
    assert worst <= RESUME_TOLERANCE


def _sharded_eval_equals_one_process(recipe: Path, run: Path, out: Path) -> None:
    """The evaluation after GRPO, each rank its block of the items under FSDP2, gives what one process gives on the
    exported final weights: the same items, the same greedy completions."""
    done = subprocess.run([sys.executable, "-m", "mmgrpo", "eval", "--recipe", str(recipe), "--model",
                           str(run / "checkpoints" / f"step-{STEPS}"), "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    sharded = read_metrics(run / "eval" / "after" / "samples.jsonl")
    whole = read_metrics(next(out.rglob("samples.jsonl")))
    assert len(sharded) == 5 and [row["prompt_id"] for row in sharded] == [row["prompt_id"] for row in whole]
    assert [row["completion"] for row in sharded] == [row["completion"] for row in whole]


def _continues_on_one_rank(recipe: Path, run: Path, backend: str) -> None:
    """The data position is global; FSDP2 checkpoints hold the whole optimizer state, DeepSpeed's
    are converted to its universal format: a 2-rank run stopped after step 1 continues on 1 rank
    (not bit-equal to 2 ranks: each rank samples with its own seed)."""
    succeeded(torchrun_train(str(recipe), f"log.run_name={run.name}", "--resume", ranks=1))
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert latest_checkpoint(run / "checkpoints").name == f"step-{STEPS}"
    if backend == "deepspeed":
        assert "to DeepSpeed's universal checkpoint" in (run / "train.log").read_text()


def test_lora_on_two_fsdp2_ranks_stops_and_resumes_exactly(small_config, tmp_path):
    """LoRA under FSDP2, the PEFT model made on the meta device on rank 1 (sharded loading), at the start and on
    resume (the checkpoint's adapter arrives from the main process): the resumed run's adapter is the whole run's."""
    config = small_config(f"train.steps={STEPS}", "checkpoint.every_n_steps=1", "algo.beta=0.04", "train.backend=fsdp2",
                          "lora.enabled=true", "lora.r=4", "lora.dropout=0", "train.lr=0.05", DENSE_REWARD,
                          "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    runs = Path(config.log.output_dir)
    succeeded(torchrun_train(str(recipe), "log.run_name=whole"))
    stopped_after_step_one(torchrun_train(str(recipe), "log.run_name=cut", stop_in_step=2), runs / "cut" / "checkpoints")
    succeeded(torchrun_train(str(recipe), "log.run_name=cut", "--resume"))
    final = f"checkpoints/step-{STEPS}/adapter_model.safetensors"
    expected, resumed = load_file(str(runs / "whole" / final)), load_file(str(runs / "cut" / final))
    assert expected.keys() == resumed.keys() and any("lora_B" in name for name in expected)
    assert max(float((expected[n] - resumed[n]).abs().max()) for n in expected) <= RESUME_TOLERANCE
    assert max(float(expected[n].abs().max()) for n in expected if "lora_B" in n) > 1e-4  # B left zero: it trained
    for whole_row, cut_row in zip(read_metrics(runs / "whole" / "metrics.jsonl"), read_metrics(runs / "cut" / "metrics.jsonl")):
        assert cut_row["loss"] == pytest.approx(whole_row["loss"], rel=1e-5, abs=1e-7)
