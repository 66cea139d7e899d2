"""GRPO steps on CUDA (skipped without a GPU; tests/rollout/test_gpu_engines.py checks the engines).

Run on a lent GPU by scripts/gpu_check.sh. The model is the tiny Qwen2.5-VL at a larger size
(hidden 256, 4 layers, head_dim 32: a real architecture, built offline).
"""

from __future__ import annotations

import math

import pytest

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS

from .conftest import read_metrics
from .test_grpo_trainer import train

pytestmark = pytest.mark.gpu
# also in tests/rollout/test_gpu_engines.py
LARGER = {**VLLM_CPU_TINY_OPTIONS, "hidden_size": 256, "intermediate_size": 512, "num_layers": 4, "num_heads": 8,
          "num_kv_heads": 2}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_grpo_steps_on_cuda(small_config, tiny_model_dir, tmp_path, precision: str) -> None:
    model = tiny_model_dir("qwen2_5_vl", **LARGER)
    train(small_config(f"model.name_or_path={model}", "train.device=cuda", f"train.precision={precision}",
                       "train.steps=3"), tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 3 and all(math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) for row in rows)
    assert all(row["rollout/logprob_gap_max"] < (1e-3 if precision == "fp32" else 5e-2) for row in rows)
