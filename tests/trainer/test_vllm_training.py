"""GRPO with the colocated vLLM engine learns like it does with the HF engine (needs vLLM: .ci/run
runs this file in the CPU vLLM environment)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS

from tests.training import DENSE_REWARD, reward_at_start_and_end
from tests.trainer.test_grpo_trainer import train

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: scripts/vllm_cpu_env.sh builds the CPU environment .ci/run tests it in",
)

LEARNING_STEPS = ("train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8")


def test_reward_rises_with_the_vllm_engine_as_with_the_hf_engine(small_config, tiny_model_dir, tmp_path) -> None:
    model = f"model.name_or_path={tiny_model_dir('qwen2_5_vl', **VLLM_CPU_TINY_OPTIONS)}"
    rises = {}
    for engine in ("vllm", "hf"):
        run = tmp_path / engine
        train(small_config(model, f"rollout.engine={engine}", *LEARNING_STEPS), run)
        first, last = reward_at_start_and_end(run)
        rises[engine] = last - first
        assert last > first + 0.25, f"{engine}: reward did not rise: first steps {first:.3f}, last {last:.3f}"
    assert abs(rises["vllm"] - rises["hf"]) < 0.3, f"the engines' learning curves differ: {rises}"
    metrics = [json.loads(line) for line in (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines()]
    gaps = [m["rollout/logprob_gap_max"] for m in metrics if "rollout/logprob_gap_max" in m]
    assert len(gaps) == 40 and max(gaps) < 1e-4, "vLLM's sampled-token log-probs differ from the trainer's"


def test_async_worker_samples_with_the_vllm_engine_and_gets_every_update(small_config, tiny_model_dir, tmp_path):
    """rollout.mode=async with rollout.engine=vllm: the worker process runs its own vLLM engine; at
    staleness 0 its sampled-token log-probs equal the trainer's after every weight update. ReMax: the same
    engine decodes each prompt's greedy completion too."""
    model = f"model.name_or_path={tiny_model_dir('qwen2_5_vl', **VLLM_CPU_TINY_OPTIONS)}"
    config = small_config(
        model, "rollout.engine=vllm", "rollout.mode=async", "rollout.max_staleness=0", "train.steps=8",
        "rollout.num_generations=8", "algo.advantage_estimator=remax",
    )
    train(config, tmp_path / "run")
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["async/staleness_max"] for m in metrics] == [0] * 8
    assert any(m["grad_norm"] > 0 for m in metrics[:-1])  # the policy moved before the last sampling
    assert max(m["rollout/logprob_gap_max"] for m in metrics) < 1e-4, "the worker's vLLM engine missed an update"
    assert all(m["reward/greedy_frac"] == 1.0 for m in metrics)


def test_a_frozen_tower_reaches_the_vllm_engine_once(small_config, tiny_model_dir, tmp_path, monkeypatch):
    """model.freeze_vision_tower=true: the engine gets the tower with the first weights only, every later push leaves
    it out, and the sampled-token log-probs still equal the trainer's at every step."""
    from mmgrpo.rollout import vllm as vllm_module

    left_out, real = [], vllm_module.policy_weights

    def recording(model_or_state_dict, backend=None, skip=frozenset()):  # noqa: ANN001, ANN202
        left_out.append(skip)
        return real(model_or_state_dict, backend, skip)

    monkeypatch.setattr(vllm_module, "policy_weights", recording)
    model = f"model.name_or_path={tiny_model_dir('qwen2_5_vl', **VLLM_CPU_TINY_OPTIONS)}"
    config = small_config(model, "rollout.engine=vllm", "model.freeze_vision_tower=true", "train.steps=3",
                          "eval.before=false", "eval.after=false", DENSE_REWARD)
    train(config, tmp_path / "run")
    assert len(left_out) == 4 and not left_out[0]  # built with every weight, then one push per step
    assert all(skip and all(name.startswith("model.visual.") for name in skip) for skip in left_out[1:])
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(m["grad_norm"] > 0 for m in metrics[:-1])
    assert max(m["rollout/logprob_gap_max"] for m in metrics) < 1e-4, "the engine's tower is not the trainer's"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_tool_task_trains_with_the_vllm_engine(small_config, zoom_policy, mode):
    """From the zoom task's SFT policy, GRPO whose trajectories the vLLM engine samples turn by turn (each next turn
    with the crops so far) in the trainer's process or in the rollout worker's: the policy calls the tool, sees its
    crops, and the engine's log-probs of every policy turn equal the trainer's."""
    from mmgrpo.trainer.pipeline import run_training
    from tests.training import ZOOM, tool_use

    model = f"model.name_or_path={zoom_policy(**VLLM_CPU_TINY_OPTIONS)}"
    async_mode = ("rollout.mode=async", "rollout.max_staleness=0", "rollout.worker_threads=1") if mode == "async" else ()
    config = small_config(*ZOOM, model, "sft.enabled=false", "rollout.engine=vllm", *async_mode)
    assert run_training(config)["grpo_steps"] == 2
    rows = tool_use(Path(config.log.output_dir) / "test")
    assert max(row["rollout/logprob_gap_max"] for row in rows) < 1e-4
