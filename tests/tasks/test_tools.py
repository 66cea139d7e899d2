"""Tools: the registry, the calls a completion holds, running them (every failure an error observation), and the
built-in zoom_in, calculator and python."""

from __future__ import annotations

import time

import pytest
from PIL import Image

from mmgrpo.types import Sample
from processors import ImageBudget
from tasks.base import ModelInfo
from tasks.tools import TOOLS, Observation, ToolContext, find_calls, register_tool, run_call
from tasks.tools.schema import argument_errors

CONTEXT = ToolContext(Sample("s", "t", []))
ALL = {name: TOOLS.get(name) for name in ("calculator", "zoom_in", "python")}


def call_text(name: str, arguments: object) -> str:
    import json

    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_calls_are_read_in_order_and_what_cannot_be_read_says_why():
    text = ("I will compute. " + call_text("calculator", {"expression": "1+1"}) + " and "
            + '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"2\\"}"}</tool_call>'
            + "<tool_call>{not json}</tool_call><tool_call>[1, 2]</tool_call>")
    first, as_string, broken, not_a_call = find_calls(text)
    assert (first.name, first.arguments) == ("calculator", {"expression": "1+1"})
    assert as_string.arguments == {"expression": "2"}  # arguments written as a JSON string, as some templates do
    assert "not JSON" in broken.problem and '"name"' in not_a_call.problem
    assert find_calls("no call here <tool_call> unclosed") == []


@pytest.mark.parametrize(("arguments", "message"), [
    ({}, "arguments.expression is missing"),
    ({"expression": 3}, "arguments.expression must be string, got int"),
    ({"expression": "1", "extra": 1}, "arguments.extra is not an argument"),
])
def test_arguments_the_schema_refuses_are_named(arguments, message):
    observation, outcome = run_call(find_calls(call_text("calculator", arguments))[0], ALL, CONTEXT)
    assert outcome == "bad_arguments" and observation.error and message in observation.text


def test_schema_checks_arrays_numbers_enums_and_refuses_booleans_as_numbers():
    schema = {"type": "object", "properties": {
        "box": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
        "mode": {"enum": ["a", "b"]}, "k": {"type": "integer", "minimum": 1}}}
    assert argument_errors({"box": [1, 2, 3.5, 4], "mode": "a", "k": 2}, schema) == []
    assert argument_errors({"box": [1, 2, True, 4], "mode": "c", "k": 0}, schema) == [
        "arguments.box[2] must be number, got bool", "arguments.mode must be one of ['a', 'b'], got 'c'",
        "arguments.k must be >= 1, got 0"]
    assert argument_errors({"box": [1]}, schema) == ["arguments.box must hold 4 items, got 1"]


@register_tool("test_raises", "Always raises.", {"type": "object"})
def _raises(arguments, context):
    raise RuntimeError("broken tool")


@register_tool("test_sleeps", "Sleeps past its timeout.", {"type": "object"}, timeout_s=0.2)
def _sleeps(arguments, context):
    time.sleep(1.0)
    return Observation(text="late")


@register_tool("test_returns_text", "Returns a plain string.", {"type": "object"})
def _returns_text(arguments, context):
    return "not an observation"


@pytest.mark.parametrize(("text", "outcome", "message"), [
    (call_text("nope", {}), "unknown_tool", "no tool 'nope'"),
    (call_text("test_raises", {}), "raised", "RuntimeError: broken tool"),
    (call_text("test_sleeps", {}), "timeout", "took longer than 0.2 s"),
    (call_text("test_returns_text", {}), "raised", "returned str, not an observation"),
    ("<tool_call>{</tool_call>", "unparsable", "not JSON"),
])
def test_every_failure_is_an_error_observation_never_an_exception(text, outcome, message):
    tools = {name: TOOLS.get(name) for name in ("test_raises", "test_sleeps", "test_returns_text", "calculator")}
    started = time.monotonic()
    observation, got = run_call(find_calls(text)[0], tools, CONTEXT)
    assert (got, observation.error) == (outcome, True) and message in observation.text
    assert time.monotonic() - started < 0.9  # a hung tool is abandoned at its timeout


def test_a_tool_name_cannot_be_claimed_by_another_function():
    with pytest.raises(KeyError, match="registered twice"):
        register_tool("calculator", "another", {"type": "object"})(lambda arguments, context: Observation())


@pytest.mark.parametrize(("expression", "value"), [("(3 + 4) * 12 / 5", "16.8"), ("2 ** 10 - 7 // 2", "1021"),
                                                   ("-(1.5) % 1", "0.5")])
def test_the_calculator_computes(expression, value):
    assert run_call(find_calls(call_text("calculator", {"expression": expression}))[0], ALL,
                    CONTEXT) == (Observation(text=value), "ok")


@pytest.mark.parametrize("expression", ["9 ** 9 ** 9", "__import__('os').system('id')", "1 / 0", "(1 << 5000)"])
def test_the_calculator_refuses_what_is_not_cheap_arithmetic(expression):
    observation, outcome = run_call(find_calls(call_text("calculator", {"expression": expression}))[0],
                                    ALL, CONTEXT)
    assert outcome == "failed" and observation.error


def red_square_image(tmp_path) -> str:
    """A 400x200 white image with a red 40x40 square at x 300-340, y 100-140."""
    image = Image.new("RGB", (400, 200), "white")
    image.paste((255, 0, 0), (300, 100, 340, 140))
    path = tmp_path / "scene.png"
    image.save(path)
    return str(path)


def zoom(tmp_path, box, coords="norm1000", **extra):
    sample = Sample("s", "t", [{"role": "user", "content": [{"type": "image", "image": red_square_image(tmp_path)}]}])
    context = ToolContext(sample, ModelInfo(image_budget=ImageBudget(max_pixels=100 * 28 * 28)), coords)
    return run_call(find_calls(call_text("zoom_in", {"bbox_2d": box, **extra}))[0], {"zoom_in": TOOLS.get("zoom_in")},
                    context)


def test_zoom_in_returns_the_region_in_the_models_coordinates_at_full_resolution(tmp_path):
    observation, outcome = zoom(tmp_path, [750, 500, 850, 700])  # 0-1000 on both axes: x 300-340, y 100-140
    assert outcome == "ok" and len(observation.images) == 1
    region = observation.images[0]
    assert region.size == (40, 40) and region.getpixel((20, 20)) == (255, 0, 0)
    resized, _ = zoom(tmp_path, [50, 50, 50, 50], coords="absolute_resized")  # a point: widened to 28 pixels
    assert min(resized.images[0].size) == 28


def test_zoom_in_off_the_image_or_past_its_images_is_an_error_observation(tmp_path):
    assert zoom(tmp_path, [1100, 1100, 1200, 1200])[1] == "failed"
    observation, outcome = zoom(tmp_path, [0, 0, 10, 10], image_index=1)
    assert outcome == "failed" and "has 1 image(s)" in observation.text


def test_python_runs_in_the_code_sandbox_and_returns_its_prints_or_error():
    tools = {"python": TOOLS.get("python")}
    printed, outcome = run_call(find_calls(call_text("python", {"code": "print(sum(range(10)))"}))[0], tools, CONTEXT)
    if outcome == "raised" and "SandboxUnavailable" in printed.text:
        pytest.skip(f"no sandbox here: {printed.text}")
    assert (printed.text, outcome) == ("45\n", "ok")
    script = "import sys\nif __name__ == '__main__':\n    print('main')\n    sys.exit(0)\nprint('never')"
    assert run_call(find_calls(call_text("python", {"code": script}))[0], tools, CONTEXT) == (
        Observation(text="main\n"), "ok")  # run as a script: its main block runs, exit(0) ends it quietly
    failed, outcome = run_call(find_calls(call_text("python", {"code": "open('/etc/shadow').read()"}))[0], tools,
                               CONTEXT)
    assert failed.error and outcome == "failed"


def test_rewards_see_each_trajectorys_calls_and_a_negative_weight_charges_each_call():
    from mmgrpo.trainer.rollouts import ScoringRule
    from mmgrpo.types import Completion, Sample

    rule = ScoringRule(weights={"tool_calls_ok": 1.0, "tool_calls": -0.1}, reward_options={}, max_new_tokens=8)
    completions = [Completion("a", [1], tool_outcomes=["ok"]), Completion("b", [1], tool_outcomes=["ok", "ok"]),
                   Completion("c", [1], tool_outcomes=["ok", "timeout"]), Completion("d", [1])]
    totals, breakdown = rule.score(Sample("s", "test", []), completions)
    assert breakdown.components["tool_calls_ok"] == [1.0, 1.0, 0.0, 0.0]
    assert breakdown.components["tool_calls"] == [1.0, 2.0, 2.0, 0.0]
    assert totals == pytest.approx([0.9, 0.8, -0.2, 0.0])


def test_a_process_reward_scores_each_turn_that_called_a_tool_by_how_the_call_went():
    from mmgrpo.trainer.rollouts import ScoringRule
    from mmgrpo.types import Completion, Sample

    rule = ScoringRule(weights={"tool_call_steps": 1.0}, reward_options={}, max_new_tokens=8)
    completions = [Completion("callanswer", [1], tool_outcomes=["ok"], turn_text_ends=[4]),
                   Completion("call1call2done", [1], tool_outcomes=["ok", "timeout"], turn_text_ends=[5, 10]),
                   Completion("just an answer", [1])]
    _, breakdown = rule.score(Sample("s", "test", []), completions)
    assert breakdown.steps == [[(0, 4, 1.0)], [(0, 5, 1.0), (5, 10, 0.0)], []]
