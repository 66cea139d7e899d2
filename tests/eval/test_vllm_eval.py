"""``mmgrpo eval`` with ``rollout.engine=vllm``: a dataset and a benchmark answered by the colocated vLLM
engine as by the HF engine (greedy). Needs vLLM: on CPU, ``scripts/vllm_cpu_env.sh`` builds the environment
``.ci/run`` runs this file in; elsewhere it is skipped."""

from __future__ import annotations

import importlib.util
import json

import pytest

import eval as evaluation
from data_recipes.make import make_dataset
from eval import EvalOptions
from mmgrpo.config import BenchmarkConfig, DatasetConfig, RolloutConfig, TaskConfig
from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from tests.eval import published

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: scripts/vllm_cpu_env.sh builds the CPU environment .ci/run tests it in",
)


@pytest.mark.slow
def test_eval_on_the_vllm_engine_answers_as_the_hf_engine(peaked_model_dir, tmp_path):
    model = peaked_model_dir("qwen2_5_vl", **VLLM_CPU_TINY_OPTIONS)
    make_dataset("clevr_count", 8, tmp_path / "clevr", seed=0, test_fraction=0.5)
    mmmu = published.write_mmmu(tmp_path / "MMMU")
    rows = {}
    for engine in ("hf", "vllm"):
        out = tmp_path / engine
        evaluation.run(
            [str(model)], [DatasetConfig(path=str(tmp_path / "clevr"), split="test", task="clevr_count")], out,
            options=EvalOptions(max_new_tokens=8, batch_size=2, progress=False), task=TaskConfig(think=False),
            engine=engine, rollout=RolloutConfig(), benchmarks=[BenchmarkConfig("mmmu_val", str(mmmu), limit=3)],
            benchmark_max_new_tokens=8,
        )
        rows[engine] = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    ids = {engine: [(row["task"], row["prompt_id"]) for row in engine_rows] for engine, engine_rows in rows.items()}
    assert ids["vllm"] == ids["hf"]
    assert len(rows["vllm"]) == 4 + 3
    assert [row["completion"] for row in rows["vllm"]] == [row["completion"] for row in rows["hf"]]
    assert [row["metric"] for row in rows["vllm"]] == [row["metric"] for row in rows["hf"]]
    assert len({row["completion"] for row in rows["vllm"]}) > 1  # real, prompt-dependent decoding was compared
