"""A tool-using task trains end to end: SFT on zoom demonstrations, then GRPO whose trajectories call ``zoom_in``
and see its crops, in async mode (the rollout worker runs the tools) and on 2 ranks from the async run's SFT policy
(FSDP2; ZeRO-3 after a few more SFT steps on the 2 ranks). ZeRO-2, whose forwards are no collectives, trains tool
batches as one process does (``tests/trainer/test_backends_distributed.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrpo.config import Config
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.resume import SFT_MODEL
from tests.e2e.ranks import succeeded, torchrun_train
from tests.training import small_run_config

ZOOM = (
    "data.train.0.recipe=zoom_texture", "data.test.0.recipe=zoom_texture", "task.name=zoom_texture", "task.rewards={}",
    "task.reward_plugins=[]", "rollout.tools=[zoom_in]", "rollout.max_turns=2", "rollout.max_new_tokens=96",
    "sft.enabled=true", "sft.steps=100", "sft.batch_size=8", "sft.micro_batch_size=8", "sft.lr=0.003",
    "train.steps=2", "train.lr=0.0005", "eval.before=false", "eval.after=false",
)


def tool_use(run: Path) -> list[dict]:
    rows = read_metrics(run / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:  # the SFT policy calls the tool in some trajectories (19-44% measured), and sees its crops
        assert row["tools/calls_per_completion"] > 0.05 and row["tools/ok_frac"] > 0, row
        assert row["tools/images_per_completion"] > 0 and row["tools/observation_tokens"] > 0, row
    return rows


@pytest.fixture(scope="module")
def async_zoom_run(tmp_path_factory, tiny_qwen25vl, digit_reward_plugin) -> tuple[Config, dict]:
    """SFT on zoom demonstrations, then 2 GRPO steps in async mode: its config and summary (made once per module:
    the two-rank runs start GRPO from its SFT policy instead of each training its own)."""
    from mmgrpo.trainer.pipeline import run_training

    config = small_run_config(tmp_path_factory.mktemp("zoom"), tiny_qwen25vl, digit_reward_plugin,
                              *ZOOM, "rollout.mode=async", "rollout.worker_threads=1")
    return config, run_training(config)


def test_a_tool_task_trains_in_async_mode(async_zoom_run):
    config, summary = async_zoom_run
    assert summary["grpo_steps"] == 2
    rows = tool_use(Path(config.log.output_dir) / "test")
    assert all(row["async/staleness_max"] <= 1 for row in rows)


@pytest.mark.distributed
@pytest.mark.parametrize("backend", [("train.backend=fsdp2", "sft.enabled=false"),
                                     ("train.backend=deepspeed", "train.zero_stage=3", "sft.steps=4", "sft.lr=1e-4")],
                         ids=["fsdp2", "zero3"])
def test_a_tool_task_trains_on_two_ranks(async_zoom_run, small_config, tmp_path, backend):
    """Under FSDP2 and ZeRO-3 each forward is a collective: ranks take as many turns (a rank whose trajectories
    ended decodes a stand-in) and run the vision tower on crops as often (a dummy where a rank has none). Both start
    from the async run's SFT policy; ZeRO-3 first runs a few SFT steps on the 2 ranks (demonstrations whose crops
    differ in count between ranks), at a rate that keeps the policy's tool calls (a fresh AdamW at the first SFT's
    3e-3 made them unparsable)."""
    start = f"model.name_or_path={Path(async_zoom_run[0].log.output_dir) / 'test' / SFT_MODEL}"
    config = small_config(*ZOOM, start, "rollout.prompts_per_step=4", "train.collective_timeout_s=60", *backend)
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    succeeded(torchrun_train(str(recipe), "log.run_name=run"))
    tool_use(Path(config.log.output_dir) / "run")
