"""``tasks.check``: the built-in tasks pass the hostile/trivial check; each planted fault is reported."""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Any, Mapping

import pytest

from data_recipes.generators import GENERATORS, example_rng
from tasks import get_task, register_reward
from tasks.check import (
    Finding,
    TaskCheckReport,
    check_dataset,
    check_rows,
    check_task,
    hostile_completions,
    trivial_completions,
)
from tasks.counting import CountingTask

PROBLEM = "How many red cubes are there?"
RELEASE = threading.Event()  # lets the hanging test reward return once its test is done


def generated_rows(recipe: str, count: int) -> list[dict[str, Any]]:
    """Rows of a procedural recipe, media files named but not written (prompts only refer to them)."""
    generator = GENERATORS.get(recipe)()
    rows = []
    for index in range(count):
        example = generator.example(example_rng(0, index))
        row = {"id": f"{recipe}-{index}", **example.fields}
        if example.media is not None:
            row[example.media.column] = f"/data/{recipe}-{index}{example.media.suffix}"
        rows.append(row)
    return rows


GEOMETRY_ROW = {"id": "g1", "problem": "Find x.", "choices": ["3", "4.5", "6", "12"], "answer": "B", "image": "/g.png"}
# task -> (rows, task options, rewards beyond the task's own). One row where math-verify reads the
# answers: each hostile answer it cannot read in time costs a timeout and a worker restart (~3 s).
BUILTIN = {
    "clevr_count": (lambda: generated_rows("clevr_count", 3), {}, {}),
    "video_count": (lambda: generated_rows("video_count", 2), {}, {}),
    "audio_count": (lambda: generated_rows("audio_count", 2), {}, {}),
    "math": (lambda: generated_rows("arithmetic", 1), {}, {}),
    "geometry": (lambda: [GEOMETRY_ROW], {}, {}),
    "grounding": (lambda: generated_rows("grounding", 2), {}, {"giou": 0.0}),
    "code": (lambda: generated_rows("code_functions", 2), {"sandbox": {"wall_seconds": 5}}, {}),
}


ROW = {"id": "r0", "problem": PROBLEM, "answer": 3, "image": "/a.png"}


def counting_samples(count: int = 2, answer: int = 3) -> tuple[CountingTask, list]:
    task = get_task("clevr_count")
    return task, [task.to_sample({**ROW, "id": f"r{index}", "answer": answer}) for index in range(count)]


def of_kind(report: TaskCheckReport, kind: str, reward: str | None = None) -> list[Finding]:
    return [finding for finding in report.findings if finding.kind == kind and reward in (None, finding.reward)]


def labels(findings: list[Finding]) -> set[str]:
    """The completion label each finding's detail starts with."""
    return {finding.detail.split(":")[0] for finding in findings}


@register_reward("check_test_raises_on_unclosed_answer")
def raises_on_unclosed_answer(completions: list[str], **_) -> list[float]:
    for text in completions:
        if text.count("<answer>") > text.count("</answer>"):
            raise ValueError("unclosed <answer>")
    return [0.0] * len(completions)


@register_reward("check_test_rewards_echo")
def rewards_echo(completions: list[str], problem: list[str], **_) -> list[float]:
    return [float(question in text) for text, question in zip(completions, problem)]


@register_reward("check_test_naive_float")
def naive_float(completions: list[str], **_) -> list[float]:
    """The answer tag's text read by float(): 'nan' and 9999... come back non-finite, 1,234,567 unbounded."""
    values = []
    for text in completions:
        match = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
        try:
            values.append(float(match.group(1).replace(",", "")))
        except (AttributeError, ValueError):
            values.append(0.0)
    return values


@register_reward("check_test_random")
def random_score(completions: list[str], **_) -> list[float]:
    return [random.random() for _ in completions]


@register_reward("check_test_slow")
def slow_score(completions: list[str], **_) -> list[float]:
    time.sleep(0.02)
    return [0.0] * len(completions)


@register_reward("check_test_hangs")
def hangs(completions: list[str], **_) -> list[float]:
    RELEASE.wait(timeout=5.0)  # a hang, bounded so that the test process never keeps it
    return [0.0] * len(completions)


class FragileTask(CountingTask):
    """A task whose prompt reads a column without checking it is there (KeyError, not RowError)."""

    name = "check_test_fragile"

    def question(self, row: Mapping[str, Any]) -> str:
        return f"How many {row['target']} are there?"


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_every_builtin_task_passes_the_check(name: str) -> None:
    make_rows, options, extra_rewards = BUILTIN[name]
    task, rows = get_task(name, **options), make_rows()
    report = check_dataset(task, rows, rewards={**task.default_rewards, **extra_rewards})
    assert report.ok, report.render()
    assert report.rows_checked == len(rows) and report.rows_refused == 0
    checked = {reward.reward for reward in report.rewards}
    assert checked == {*task.default_rewards, *extra_rewards, task.metric_reward}
    per_row = len(hostile_completions(task.to_sample(rows[0])))
    assert all(reward.calls > per_row * len(rows) for reward in report.rewards)
    assert report.render().splitlines()[-1] == "OK: no findings"


def test_a_reward_raising_on_an_unclosed_answer_is_reported_with_the_input() -> None:
    task, samples = counting_samples()
    name = "check_test_raises_on_unclosed_answer"
    report = check_task(task, samples, rewards={name: 1.0})
    raised = of_kind(report, "raised", name)
    assert labels(raised) == {"unclosed answer", "fake answer tag in quotes"}  # the two whose <answer> stays open
    unclosed = next(finding for finding in raised if finding.detail.startswith("unclosed answer"))
    assert "ValueError: unclosed <answer>" in unclosed.detail and "(2/2 rows)" in unclosed.detail
    assert "input '<think>Let me see.</think><answer>3'" in unclosed.detail
    assert not report.ok and f"    raised: {unclosed.detail}" in report.render()
    assert report.render().splitlines()[-1].startswith("FAILED: 2 findings (raised 2)")


def test_a_reward_paying_for_the_echoed_question_is_hackable() -> None:
    task, samples = counting_samples()
    report = check_task(task, samples, rewards={"check_test_rewards_echo": 1.0})
    hackable = of_kind(report, "hackable")
    assert labels(hackable) == {"question echoed", "question as the answer"}
    echo = next(finding for finding in hackable if finding.detail.startswith("question echoed"))
    assert echo.reward == "" and "weighted total 1.00 on average over 2 rows" in echo.detail
    assert "most from 'check_test_rewards_echo'" in echo.detail
    assert repr(PROBLEM) in echo.detail
    assert not of_kind(report, "hackable", "count_accuracy")  # the metric itself is not fooled


def test_a_constant_answer_that_the_metric_pays_for_is_hackable_by_metric() -> None:
    task, samples = counting_samples(answer=1)  # every row's count is 1: "1" always scores
    report = check_task(task, samples)
    hackable = of_kind(report, "hackable")
    assert labels(of_kind(report, "hackable", "count_accuracy")) == {"constant '1'"}
    assert labels(of_kind(report, "hackable", "")) == {"constant '1'"}  # total 0.1 + 1.0
    assert "most from 'count_accuracy'" in of_kind(report, "hackable", "")[0].detail
    assert all("constant '1'" in finding.detail for finding in hackable)


def test_non_finite_and_out_of_range_values_are_reported() -> None:
    task, samples = counting_samples(count=1)
    report = check_task(task, samples, rewards={"check_test_naive_float": 1.0})
    assert {"'nan'", "'inf'", "'-inf'", "long digit string"} <= labels(of_kind(report, "non-finite"))
    out_of_range = of_kind(report, "out of range", "check_test_naive_float")
    assert {"thousands commas", "duplicated tags"} <= labels(out_of_range)  # 1234567, and the answer 3
    assert any("returned 1.23457e+06, outside [-1, 1]" in finding.detail for finding in out_of_range)


def test_declared_bounds_replace_the_default_range(monkeypatch: pytest.MonkeyPatch) -> None:
    task, samples = counting_samples(count=1)
    monkeypatch.setattr(type(task), "reward_bounds", {"check_test_naive_float": (-10.0, 10.0)})
    report = check_task(task, samples, rewards={"check_test_naive_float": 1.0})
    assert labels(of_kind(report, "out of range")) == {"thousands commas"}  # 3 is in [-10, 10] now


def test_nondeterministic_and_slow_rewards_are_reported() -> None:
    task, samples = counting_samples(count=1)
    rewards = {"check_test_random": 1.0, "check_test_slow": 1.0, "format": 0.1}
    report = check_task(task, samples, rewards=rewards, slow_seconds=0.01)
    assert of_kind(report, "nondeterministic", "check_test_random")
    assert not of_kind(report, "nondeterministic", "check_test_slow")
    assert [finding.reward for finding in of_kind(report, "slow")] == ["check_test_slow"]
    slow = next(reward for reward in report.rewards if reward.reward == "check_test_slow")
    assert slow.seconds_per_call >= 0.02 and "median" in slow.findings[0].detail
    fast = next(reward for reward in report.rewards if reward.reward == "format")
    assert fast.seconds_per_call < 0.01 and fast.findings == []


def test_a_hanging_reward_costs_one_timeout_and_is_not_called_again() -> None:
    task, samples = counting_samples()
    try:
        report = check_task(task, samples, rewards={"check_test_hangs": 1.0, "format": 0.1}, timeout=0.2)
    finally:
        RELEASE.set()
    timeouts = of_kind(report, "timeout", "check_test_hangs")
    assert len(timeouts) == 1 and "no result after 0.2 s" in timeouts[0].detail
    hung = next(reward for reward in report.rewards if reward.reward == "check_test_hangs")
    assert hung.calls == 1
    assert not of_kind(report, "timeout", "format")


def test_a_row_raising_keyerror_is_named_and_a_row_error_is_only_counted() -> None:
    task = FragileTask()
    rows = [
        {"id": "good", "problem": PROBLEM, "answer": 2, "image": "/a.png", "target": "cubes"},
        {"id": "no-target", "problem": PROBLEM, "answer": 2, "image": "/b.png"},
        {"id": "no-answer", "problem": PROBLEM, "image": "/c.png", "target": "cubes"},
    ]
    samples, findings = check_rows(task, rows)
    assert [sample.id for sample in samples] == ["good"]
    assert findings == [Finding("", "to_prompt raised", "row 'no-target': KeyError: 'target'")]
    report = check_dataset(task, rows, rewards={"format": 0.1})
    assert report.rows_checked == 1 and report.rows_refused == 1
    assert report.findings[0] == findings[0] and not report.ok
    assert "1 bad rows skipped" in report.render() and "to_prompt raised: row 'no-target'" in report.render()


def test_trivial_completions_are_written_in_the_task_format() -> None:
    task, samples = counting_samples(count=1)
    trivial = dict(trivial_completions(samples[0], task))
    assert trivial["constant '0'"] == f"<think>{task.default_reasoning}</think><answer>0</answer>"
    assert trivial["format alone"].endswith("<answer></answer>") and trivial["question echoed"] == PROBLEM
    assert dict(trivial_completions(task.to_sample(ROW, think=False), task))["constant 'A'"] == "<answer>A</answer>"
    code = get_task("code")
    sample = code.to_sample(generated_rows("code_functions", 1)[0])
    assert dict(trivial_completions(sample, code))["constant '1'"].endswith("</think>\n```python\n1\n```")
    mute = type("MuteTask", (CountingTask,), {"reference_completion": lambda self, sample: "I will not say."})()
    assert dict(trivial_completions(samples[0], mute))["constant '0'"] == (
        f"<think>{mute.default_reasoning}</think><answer>0</answer>")  # no answer text to swap: the R1 tags


def test_a_check_of_no_rows_is_not_ok() -> None:
    task, _ = counting_samples()
    report = check_task(task, [])
    assert report.rows_checked == 0 and report.findings == [] and not report.ok
    assert report.render().splitlines()[-1] == "FAILED: no rows"


def test_hostile_completions_cover_the_advertised_inputs() -> None:
    _, samples = counting_samples(count=1)
    hostile = dict(hostile_completions(samples[0]))
    assert hostile["empty"] == "" and len(hostile["100k characters"]) >= 100_000
    assert "\x00" in hostile["NUL characters"] and "\u202e" in hostile["RTL marks"]
    assert hostile["unclosed answer"].endswith("<answer>3")
    assert "<answer>3</answer></think>" in hostile["answer inside think"]
    assert all(len(re.findall(r"\d", hostile[label])) > 4300 for label in ("long digit string", "boxed long number"))
    named = {"'nan'", "'inf'", "'-inf'", "prompt injection", "fake answer tag in quotes", "thousands commas"}
    assert named <= set(hostile)
