"""A step's (and an evaluation's) tool-use numbers: calls per trajectory and per tool, turns, outcomes, the tools'
tokens and images."""

from __future__ import annotations

import pytest

from mmgrpo.rollout.tool_metrics import ToolUse, tool_metrics
from mmgrpo.types import Completion


def test_tool_use_of_a_trajectory_and_the_numbers_of_several():
    two_calls = Completion(
        "a b c", list(range(20)), observation_spans=[(3, 8), (10, 14)], turn_text_ends=[1, 3],
        tool_calls=[{"name": "zoom_in", "arguments": {}}, {"name": None, "problem": "not JSON"}],
        tool_outcomes=["ok", "unparsable"],
    )
    use = ToolUse.of(two_calls)
    assert use == ToolUse(calls=("zoom_in", "?"), outcomes=("ok", "unparsable"), turns=3, observation_tokens=9)
    made_up = Completion("x", [1], tool_calls=[{"name": "rm -rf /; x", "arguments": {}}],
                         tool_outcomes=["unknown_tool"])
    assert ToolUse.of(made_up).calls == ("?",)  # no metric named by what the policy wrote
    one_call = ToolUse(("calculator",), ("failed",), turns=2, observation_tokens=3, images=1)
    numbers = tool_metrics([use, one_call, ToolUse.of(Completion("answered", [1, 2]))])
    assert numbers == pytest.approx({
        "tools/calls_per_completion": 1.0, "tools/calls/zoom_in": 1 / 3, "tools/calls/?": 1 / 3,
        "tools/calls/calculator": 1 / 3, "tools/ok_frac": 1 / 3, "tools/unparsable_frac": 1 / 3,
        "tools/failed_frac": 1 / 3, "tools/turns_per_completion": 2.0, "tools/observation_tokens": 4.0,
        "tools/images_per_completion": 1 / 3,
    })
    assert tool_metrics([ToolUse.of(Completion("no tools", [1]))]) == {}


def test_an_eval_record_written_before_the_tool_fields_reads_its_turns_from_its_calls():
    from eval.results import ItemRecord

    old = {"text": "t", "n_tokens": 3, "truncated": False, "metric": 1.0, "parsed_answer": None, "rewards": {},
           "reward": 1.0, "tool_outcomes": ["ok", "failed"]}
    item = ItemRecord.from_dict({"sample_id": "s", "task": "t", "answer": 1, "media": [], "completions": [old]})
    assert item.completions[0].tool_use() == ToolUse(calls=("?", "?"), outcomes=("ok", "failed"), turns=3)
