"""GRPO steps on CUDA in fp32, bf16 and fp16, single process and DeepSpeed ZeRO-2 on one rank
(skipped without a GPU; tests/rollout/test_gpu_engines.py checks the engines).

Run on a lent GPU by scripts/gpu_check.sh. The model is the tiny Qwen2.5-VL at a larger size
(hidden 256, 4 layers, head_dim 32: a real architecture, built offline).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS

from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import NEEDS_DEEPSPEED, succeeded, torchrun_train
from tests.trainer.test_grpo_trainer import train

pytestmark = pytest.mark.gpu
# also in tests/rollout/test_gpu_engines.py
LARGER = {**VLLM_CPU_TINY_OPTIONS, "hidden_size": 256, "intermediate_size": 512, "num_layers": 4, "num_heads": 8,
          "num_kv_heads": 2}


STEPS = 3


def check_steps(run_dir, precision: str) -> None:
    """STEPS finite steps whose sampler agreed with the trainer; fp16 logs its loss scale and skips none."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert len(rows) == STEPS and all(math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) for row in rows)
    assert all(row["rollout/logprob_gap_max"] < (1e-3 if precision == "fp32" else 5e-2) for row in rows)
    if precision == "fp16":
        assert all(row["precision/loss_scale"] >= 1 for row in rows) and rows[-1]["precision/skipped_steps"] < STEPS


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_grpo_steps_on_cuda(small_config, tiny_model_dir, tmp_path, precision: str) -> None:
    model = tiny_model_dir("qwen2_5_vl", **LARGER)
    train(small_config(f"model.name_or_path={model}", "train.device=cuda", f"train.precision={precision}",
                       f"train.steps={STEPS}"), tmp_path / "run")
    check_steps(tmp_path / "run", precision)


@NEEDS_DEEPSPEED
def test_deepspeed_zero2_steps_in_fp16_on_cuda(small_config, tiny_model_dir, tmp_path) -> None:
    config = small_config(f"model.name_or_path={tiny_model_dir('qwen2_5_vl', **LARGER)}", "train.device=cuda",
                          "train.precision=fp16", "train.backend=deepspeed", "train.zero_stage=2",
                          f"train.steps={STEPS}", "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    succeeded(torchrun_train(str(recipe), "log.run_name=zero2-fp16", ranks=1))
    check_steps(Path(config.log.output_dir) / "zero2-fp16", "fp16")
