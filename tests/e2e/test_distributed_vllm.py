"""Colocated vLLM under FSDP2 and ZeRO-3 on 2 ranks (torchrun, gloo on CPU): each rank samples its own prompts
with its own engine, every weight update gathers the sharded weights one tensor at a time into both engines,
and a stopped run resumes to exactly the uninterrupted one (under ZeRO-3: a resumed run's first push is any
step's push, the same for both back ends, whose own stop and resume ``test_distributed_run.py`` covers). One
engine over both ranks, LoRA's merged pushes and a tool task: ``test_distributed_vllm_engines.py`` (apart, so
the two test workers share these long runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import NEEDS_DEEPSPEED, STEPS, stopped_after_step_one, succeeded, torchrun_train
from tests.e2e.vllm_runs import NEEDS_VLLM, trained_in_step, vllm_recipe

pytestmark = [pytest.mark.distributed, NEEDS_VLLM]


@pytest.mark.parametrize(("backend", "stops"), [
    pytest.param(("train.backend=fsdp2",), False, id="fsdp2"),
    pytest.param(("train.backend=deepspeed", "train.zero_stage=3"), True, id="zero3", marks=NEEDS_DEEPSPEED),
])
def test_sharded_ranks_sample_with_their_colocated_vllm_engines(
    backend, stops, small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path
):
    config, recipe = vllm_recipe(small_config, tiny_model_dir, rate_per_prompt_plugin, tmp_path, *backend)
    runs = Path(config.log.output_dir)

    whole = trained_in_step(recipe, runs / "whole")
    step_one = [row for row in read_metrics(runs / "whole" / "completions.jsonl") if row["step"] == 1]
    assert len({row["sample_id"] for row in step_one}) == config.rollout.prompts_per_step  # the ranks drew apart
    if stops:
        _stops_and_resumes_exactly(recipe, runs, whole)


def _stops_and_resumes_exactly(recipe: Path, runs: Path, whole: list[dict]) -> None:
    """Stopped in step 2 (SIGTERM) and resumed, the run repeats ``runs/whole`` (``whole``: its metrics)."""
    stopped = torchrun_train(str(recipe), "log.run_name=cut", stop_in_step=2)
    stopped_after_step_one(stopped, runs / "cut" / "checkpoints")
    succeeded(torchrun_train(str(recipe), "log.run_name=cut", "--resume"))
    for expected, resumed in zip(whole, read_metrics(runs / "cut" / "metrics.jsonl"), strict=True):
        for name in ("reward/total", "loss", "kl", "grad_norm", "length/total", "rollout/logprob_gap_max"):
            assert resumed[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), (expected["step"], name)
    final = f"checkpoints/step-{STEPS}/model.safetensors"
    expected_weights, resumed_weights = load_file(str(runs / "whole" / final)), load_file(str(runs / "cut" / final))
    assert max(float((expected_weights[n] - resumed_weights[n]).abs().max()) for n in expected_weights) <= 1e-6
