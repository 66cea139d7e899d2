"""Process rewards in the trainer: steps placed on tokens, and a run that learns from steps alone."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from mmgrpo.models.loading import load_processor
from mmgrpo.models.token_text import TokenTextEnds
from mmgrpo.trainer.process_steps import step_advantages
from mmgrpo.trainer.rollouts import Group, Rollouts
from mmgrpo.types import Completion, Sample

from tests.training import reward_at_start_and_end
from tests.trainer.test_grpo_trainer import train

# One step over the whole completion scoring its share of "3"s: the outcome test's reward, reaching
# the policy only through the process path (spans -> tokens -> group-normalised token advantages).
PROCESS_PLUGIN = '''
from tasks import register_reward

@register_reward("threes_as_a_step")
def threes_as_a_step(completions, **_):
    return [[(0, len(text), text.count("3") / max(1, len(text)))] for text in completions]
'''


@pytest.fixture(scope="module")
def process_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plugin = tmp_path_factory.mktemp("process_plugin") / "threes_as_a_step.py"
    plugin.write_text(PROCESS_PLUGIN)
    return plugin


def test_steps_land_on_their_tokens(tiny_qwen25vl) -> None:
    tokenizer = load_processor(tiny_qwen25vl).tokenizer
    texts = ["red square\nblue circle", "3 3 3"]
    completions = [Completion(text=text, token_ids=tokenizer(text)["input_ids"]) for text in texts]
    first_line_end = texts[0].index("\n")
    group = Group(
        sample=Sample(id="s", task="t", messages=[]), completions=completions, rewards=[0.0, 0.0], components={},
        steps=[[(0, first_line_end, 1.0)], [(0, len(texts[1]), -1.0)]],
    )
    length = max(len(c.token_ids) for c in completions) + 2
    ends = TokenTextEnds(tokenizer)

    advantages = step_advantages(Rollouts(groups=[group]), ends, length, scale_std=True, eps=0.0)  # [2, length]

    # R = {1, -1}: mean 0, std sqrt(2); the first line's tokens get +1/sqrt(2), the rest of completion 0
    # nothing; every token of completion 1 gets -1/sqrt(2) (and padding past it too, masked by the loss).
    line_tokens = ends(completions[0].token_ids, texts[0]).index(first_line_end) + 1
    expected = torch.zeros(2, length)
    expected[0, :line_tokens] = 1 / math.sqrt(2)
    expected[1, : len(completions[1].token_ids)] = -1 / math.sqrt(2)
    torch.testing.assert_close(advantages, expected)
    without = Group(sample=group.sample, completions=completions, rewards=[0.0, 0.0], components={})
    assert step_advantages(Rollouts(groups=[without]), ends, length, scale_std=True, eps=0.0) is None


def test_token_text_ends_follow_the_decoded_text(tiny_qwen25vl) -> None:
    tokenizer = load_processor(tiny_qwen25vl).tokenizer
    text = "<think>\nred square\n</think><answer>1</answer>"
    ids = tokenizer(text)["input_ids"]
    ends = TokenTextEnds(tokenizer)(ids, text)
    assert ends[-1] == len(text) and ends == sorted(ends)
    assert [text[: end] for end in ends] == [tokenizer.decode(ids[: k + 1]) for k in range(len(ids))]


def test_a_tool_trajectorys_steps_land_on_the_policys_own_turns(tiny_qwen25vl) -> None:
    """The text of a trajectory leaves its tool turns out: a step ending with the first turn ends on that turn's
    last token, not inside the tool's text; a step of the second turn ends on the second turn's."""
    tokenizer = load_processor(tiny_qwen25vl).tokenizer
    first, tool, second = "red square", "<|im_end|>\n<|im_start|>tool\n4 objects<|im_end|>\n<|im_start|>assistant\n", "3"
    ids = [tokenizer(part, add_special_tokens=False)["input_ids"] for part in (first, tool, second)]
    observed = (len(ids[0]), len(ids[0]) + len(ids[1]))
    completion = Completion(text=first + second, token_ids=[*ids[0], *ids[1], *ids[2]], observation_spans=[observed],
                            turn_text_ends=[len(first)])
    ends = TokenTextEnds(tokenizer)(completion.token_ids, completion.text, completion.observation_spans)
    assert ends[observed[0] - 1] == len(first) and ends[-1] == len(completion.text)
    assert ends[observed[0]:observed[1]] == [len(first)] * len(ids[1])  # the tool's tokens add no text
    group = Group(sample=Sample(id="s", task="t", messages=[]), completions=[completion, completion],
                  rewards=[0.0, 0.0], components={}, steps=[[(0, len(first), 1.0)], [(len(first), len(first) + 1, -1.0)]])
    advantages = step_advantages(Rollouts(groups=[group]), TokenTextEnds(tokenizer), len(completion.token_ids),
                                 scale_std=True, eps=0.0)  # [2, T]
    assert (advantages[0, :observed[0]] > 0).all() and (advantages[0, observed[0]:] == 0).all()
    assert (advantages[1] < 0).all()  # the second turn's step covers every token before it


@pytest.mark.slow
def test_a_process_reward_alone_raises_what_it_rewards(small_config, tmp_path, process_plugin):
    """Fails if steps never reach the token advantages (flat) or their sign is flipped (falls)."""
    config = small_config(
        f"task.reward_plugins=[{process_plugin}]", "task.rewards={threes_as_a_step: 1.0}",
        "train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8",
    )
    train(config, tmp_path / "run")
    first, last = reward_at_start_and_end(tmp_path / "run", key="reward/threes_as_a_step")
    assert last > first + 0.25, f"step reward did not rise: first steps {first:.3f}, last steps {last:.3f}"
    first_total, last_total = reward_at_start_and_end(tmp_path / "run")
    assert first_total == last_total == 0.0  # the steps never entered the outcome total
