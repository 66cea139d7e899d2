"""A tool-using task trains end to end: GRPO from the zoom task's SFT policy (``zoom_policy``), whose trajectories
call ``zoom_in`` and see its crops, in async mode (the rollout worker runs the tools) and on 2 ranks (FSDP2; ZeRO-3
after a few more SFT steps on the 2 ranks). ZeRO-2, whose forwards are no collectives, trains tool batches as one
process does (``tests/trainer/test_backends_distributed.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.ranks import NEEDS_DEEPSPEED, succeeded, torchrun_train
from tests.training import ZOOM, tool_use


def test_a_tool_task_trains_in_async_mode(small_config, zoom_policy):
    from mmgrpo.trainer.pipeline import run_training

    config = small_config(*ZOOM, f"model.name_or_path={zoom_policy()}", "sft.enabled=false", "rollout.mode=async",
                          "rollout.worker_threads=1")
    assert run_training(config)["grpo_steps"] == 2
    rows = tool_use(Path(config.log.output_dir) / "test")
    assert all(row["async/staleness_max"] <= 1 for row in rows)


@pytest.mark.distributed
@pytest.mark.parametrize("backend", [
    pytest.param(("train.backend=fsdp2", "sft.enabled=false"), id="fsdp2"),
    pytest.param(("train.backend=deepspeed", "train.zero_stage=3", "sft.steps=4", "sft.lr=1e-4"), id="zero3",
                 marks=NEEDS_DEEPSPEED),
])
def test_a_tool_task_trains_on_two_ranks(zoom_policy, small_config, tmp_path, backend):
    """Under FSDP2 and ZeRO-3 each forward is a collective: ranks take as many turns (a rank whose trajectories
    ended decodes a stand-in) and run the vision tower on crops as often (a dummy where a rank has none). Both start
    from the zoom task's SFT policy; ZeRO-3 first runs a few SFT steps on the 2 ranks (each rank's demonstrations
    bring their crops into its forwards), at a rate that keeps the policy's tool calls (a fresh AdamW at the first
    SFT's 3e-3 made them unparsable)."""
    config = small_config(*ZOOM, f"model.name_or_path={zoom_policy()}", "rollout.prompts_per_step=4",
                          "train.collective_timeout_s=60", *backend)
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    succeeded(torchrun_train(str(recipe), "log.run_name=run"))
    tool_use(Path(config.log.output_dir) / "run")
