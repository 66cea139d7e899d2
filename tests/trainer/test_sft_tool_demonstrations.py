"""SFT on demonstrations that call tools: the tools run between the task's scripted turns as in a rollout (the crop
comes back inside the trajectory), the tool's tokens carry no loss, and the policy learns to make the call."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from data_recipes.generators import GENERATORS, example_rng
from mmgrpo.inputs import media_budgets, task_model_info
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.trainer.setup import build_engine, demonstrator
from mmgrpo.trainer.sft import reference_examples, run_sft, sft_targets
from tasks import get_task


@pytest.fixture()
def zoom_setup(small_config, tiny_qwen25vl):
    config = small_config("rollout.tools=[zoom_in]", "rollout.max_turns=2", "rollout.max_new_tokens=96",
                          "sft.batch_size=8", "sft.micro_batch_size=8", "sft.lr=0.003")
    model, processor = load_model_and_processor(tiny_qwen25vl)
    task = get_task("zoom_texture", model=task_model_info(config.model, tiny_qwen25vl))
    generator = GENERATORS.get("zoom_texture")()
    samples = []
    for index in range(8):
        example = generator.example(example_rng(1, index))
        row = {**example.fields, "id": f"z{index}", "image": Image.open(io.BytesIO(example.media.data))}
        samples.append(task.to_sample(row, think=False))
    return config, model, processor, reference_examples(samples, {"zoom_texture": task})


def test_a_demonstration_becomes_the_trajectory_a_rollout_would_make(zoom_setup):
    config, model, processor, examples = zoom_setup
    batch = [*examples[:3], examples[0]]  # one example twice: each its own demonstration
    targets = sft_targets(processor, model, batch, demonstrator(config, model, processor))
    tokenizer = processor.tokenizer
    for example, target in zip(batch, targets):
        call, answer = example.tool_turns
        assert target.tool_outcomes == ["ok"] and target.media.counts == {"image": 1}
        (start, end), = target.observation_spans
        assert tokenizer.decode(target.token_ids[:start]) == f"{call}<|im_end|>"
        assert tokenizer.decode(target.token_ids[end:]) == f"{answer}<|im_end|>"
        assert target.policy_token_count == start + len(target.token_ids) - end
    with pytest.raises(ValueError, match="rollout.tools"):
        sft_targets(processor, model, batch, None)


def test_sft_on_tool_demonstrations_teaches_the_call(zoom_setup):
    """After SFT on eight demonstrations the greedy policy zooms on each one's quadrant by itself."""
    config, model, processor, examples = zoom_setup
    config.sft.steps = 100
    run_sft(model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=0,
            progress_bar=False, demonstrate=demonstrator(config, model, processor))
    engine = build_engine(config, model, processor)
    groups = engine.generate([e.sample for e in examples], SamplingParams(n=1, max_new_tokens=96, temperature=0.0))
    trajectories = [group[0] for group in groups]
    made = [t for t, e in zip(trajectories, examples) if t.text.startswith(e.tool_turns[0])]
    assert len(made) >= 6, [t.text[:120] for t in trajectories]
    assert all(t.tool_outcomes == ["ok"] and t.media is not None for t in made)


def test_mmgrpo_eval_takes_tool_turns(zoom_policy, tmp_path):
    """``mmgrpo eval`` with ``rollout.tools`` scores trajectories: the SFT policy zooms, reads the crop and answers."""
    from eval.benchmark import run_config
    from mmgrpo.config import load_config

    evaluated = load_config(None, [
        f"model.name_or_path={zoom_policy()}", f"data.dir={tmp_path / 'data'}", "task.name=zoom_texture",
        "task.reward_plugins=[]", "data.test.0.recipe=zoom_texture", "data.test.0.recipe_args={n: 40}",
        "eval.limit=8", "eval.max_new_tokens=96", "rollout.tools=[zoom_in]", "rollout.max_turns=2",
    ])
    (result,) = run_config(evaluated, tmp_path / "eval").values()
    completions = [c for item in result.items for c in item.completions]
    assert len(completions) == 8
    called = [c for c in completions if c.tool_outcomes == ["ok"]]
    assert len(called) >= 4 and all(c.rewards["zoom_on_region"] == 1.0 for c in called)
    assert all(c.tool_calls == ["zoom_in"] and c.turns == 2 and c.tool_images == 1 and c.observation_tokens > 16
               for c in called)
    summary = result.summary()  # the records' tool use, as a training step reports it
    assert summary["tools/calls/zoom_in"] == pytest.approx(sum(len(c.tool_calls) for c in completions) / 8)
    assert summary["tools/turns_per_completion"] == pytest.approx(sum(c.turns for c in completions) / 8)
