"""Completions are read in time linear in their length: adversarial text (a fence opener and a long run of
spaces, unbalanced ``\\boxed{``, nested wrappers, repeated tags) costs the trainer well under a second, and the
code task does not read past ``max_completion_chars``."""

from __future__ import annotations

import time
from typing import Callable

import pytest

from tasks import REWARDS, get_task
from tasks.code import code_blocks, only_one_block, single_block
from tasks.code_fence import fenced_blocks
from tasks.guards import scan_answers
from tasks.parsing import boxed_spans, strip_decoration

SIZE = 200_000


def seconds(call: Callable[[], object]) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


@pytest.mark.parametrize("text", [
    "```" + " " * SIZE + "x",
    "```" + "\t" * SIZE,
    "```" * (SIZE // 3),
    "```python\n" * (SIZE // 10),
    "``` \t " * (SIZE // 5) + "\n",
    "</think>" * (SIZE // 8) + "```python\nx\n```",
], ids=["spaces", "tabs", "fences", "openers", "fence-ish", "think-ends"])  # short ids: a test's id goes in the env
def test_adversarial_completions_cost_the_code_rewards_well_under_a_second(text):
    for name in ("code_format", "code_syntax"):
        assert seconds(lambda: REWARDS.get(name)([text])) < 0.5, name
    assert seconds(lambda: (code_blocks(text), single_block(text), only_one_block(text))) < 0.5


@pytest.mark.parametrize("call", [
    lambda: boxed_spans("\\boxed{" * (SIZE // 7)),
    lambda: scan_answers("\\boxed{" * (SIZE // 7)),
    lambda: strip_decoration("\\text{" * (SIZE // 12) + "}" * (SIZE // 12)),
    lambda: strip_decoration("$" * SIZE),
    lambda: REWARDS.get("think_format")(["<think></think><answer>" * (SIZE // 23) + "x"]),
    lambda: REWARDS.get("answer_format")(["<answer></answer>" * (SIZE // 17) + "x"]),
])
def test_adversarial_answers_cost_the_parsing_well_under_a_second(call):
    assert seconds(call) < 0.5


def test_the_fence_scan_reads_what_the_format_says():
    assert [block.body for block in fenced_blocks("````\nx\n``` ```python \ny\n```")] == ["x\n", "y\n"]
    assert fenced_blocks("```ruby\nx\n```") == [] and fenced_blocks("```python\nno closing fence") == []
    assert only_one_block("  ```py\nx = 1\n```\n") and not only_one_block("```py\nx = 1\n``` and more")
    assert not only_one_block("```py\na\n```b```")  # text after the block's closing fence


def test_decoration_and_boxes_read_as_before():
    assert strip_decoration(" $\\boxed{\\text{The answer is B}}$ ") == "B"
    assert strip_decoration("\\text{a} + \\text{b}") == "\\text{a} + \\text{b}"
    assert [span.content for span in boxed_spans("\\boxed{a{b}} \\boxed{c \\boxed {d}")] == ["a{b}", "d"]


def test_completions_longer_than_the_cap_are_not_graded():
    task = get_task("code", max_completion_chars=100)
    completion = "```python\ndef add(a, b):\n    return a + b\n```"
    assert task.parse_answer(completion) is not None
    assert task.parse_answer(completion + " " * 100) is None
    options = task.reward_options(["code_format", "code_syntax"])
    assert REWARDS.get("code_format")([completion + " " * 100], **options["code_format"]) == [0.0]
    assert REWARDS.get("code_syntax")([completion], **options["code_syntax"]) == [1.0]
    with pytest.raises(ValueError, match="max_completion_chars"):
        get_task("code", max_completion_chars=0)
