"""Process rewards: step rules, the spans a reward may return, how they enter the breakdown, and
the counting scene's object_mentions reward."""

from __future__ import annotations

import pytest

from mmgrpo.types import Sample
from tasks import get_task, register_reward
from tasks.object_mentions import mention_steps
from tasks.scoring import score_completions
from tasks.steps import split_steps

THINKING = "<think>\n  first line \n\nsecond. third!\n</think><answer>2</answer>"


def test_step_rules_split_inside_think() -> None:
    texts = lambda spans: [THINKING[start:end] for start, end in spans]  # noqa: E731
    assert texts(split_steps(THINKING, "lines")) == ["first line", "second. third!"]
    assert texts(split_steps(THINKING, "sentences")) == ["first line", "second.", "third!"]
    tagged = "<think><step> a </step>x<step>b</step></think>"
    assert [tagged[s:e] for s, e in split_steps(tagged, "step_tags")] == ["a", "b"]
    assert split_steps("one\ntwo", "lines") == [(0, 3), (4, 7)]  # no think: the whole text
    with pytest.raises(KeyError):
        split_steps("x", "paragraphs")


@register_reward("test_line_scores")
def _line_scores(completions, **_):
    """Per-step numbers: 1 for a line holding a digit, else 0 (placed by the task's step rule)."""
    return [[float(any(ch.isdigit() for ch in line)) for line in text.split("\n") if line.strip()]
            for text in completions]


@register_reward("test_spans")
def _spans(completions, **_):
    """Spans of its own; the second completion gets an outcome number instead, the fourth no steps."""
    return [[(0, 3, 2.0)], 0.5, [(0, 99, 1.0)], []][: len(completions)]


SAMPLE = Sample(id="s", task="t", messages=[], answer=1)


def test_step_scores_stay_out_of_the_total_and_arrive_weighted() -> None:
    completions = ["a1\nb", "xyz", "c\nd2"]
    breakdown = score_completions(completions, [SAMPLE] * 3, {"test_line_scores": 2.0})
    assert breakdown.total == [0.0, 0.0, 0.0]  # steps are not outcome rewards
    assert breakdown.steps == [[(0, 2, 2.0), (3, 4, 0.0)], [(0, 3, 0.0)], [(0, 1, 0.0), (2, 4, 2.0)]]
    assert breakdown.components["test_line_scores"] == [0.5, 0.0, 0.5]  # the mean step score, for reports


def test_spans_are_checked_and_numbers_still_count_as_outcomes() -> None:
    breakdown = score_completions(["abcdef", "abc", "abc", "a\nb"], [SAMPLE] * 4, {"test_spans": 1.0})
    assert breakdown.total == [0.0, 0.5, 0.0, 0.0]
    assert breakdown.steps == [[(0, 3, 2.0)], [], [], []]
    assert breakdown.components["test_spans"] == [2.0, 0.5, None, None]
    (error,) = breakdown.errors
    assert error.completion == 2 and error.kind == "bad steps" and "(0, 99)" in error.detail


def test_step_count_must_match_the_rule() -> None:
    @register_reward("test_two_steps")
    def two_steps(completions, **_):
        return [[1.0, 1.0] for _ in completions]

    breakdown = score_completions(["only one line"], [SAMPLE], {"test_two_steps": 1.0})
    assert breakdown.steps is None and breakdown.errors[0].kind == "bad steps"  # no completion has steps
    assert "finds 1 steps" in breakdown.errors[0].detail


def test_object_mentions_scores_real_hallucinated_double_counted_and_missed_objects() -> None:
    scene = [{"colour": "red", "shape": "square"}, {"colour": "blue", "shape": "circle"}]
    text = "<think>\nred square\nI count\ngreen triangle\nBlue Circles\nred square\n</think><answer>2</answer>"
    scored = [(text[s:e], score) for s, e, score in mention_steps(text, scene)]
    assert scored == [("red square", 1.0), ("green triangle", -1.0), ("Blue Circles", 1.0), ("red square", -1.0)]
    # Listing nothing must not beat listing with mistakes: each object never named is a -1 step
    # where the reasoning ends.
    silent = "<think>\n</think><answer>2</answer>"
    assert mention_steps(silent, scene) == [(8, 8, -1.0), (8, 8, -1.0)]
    one = "<think>\nblue circle\n</think><answer>1</answer>"
    assert [score for *_, score in mention_steps(one, scene)] == [1.0, -1.0]


def test_counting_rows_carry_objects_and_list_them_for_sft() -> None:
    row = {"id": "r", "problem": "How many objects are there?", "answer": 2, "image": "x.png",
           "objects": [{"colour": "red", "shape": "square", "size": "small", "box": [0, 0, 1, 1]},
                       {"colour": "blue", "shape": "circle", "size": "small", "box": [2, 2, 3, 3]}]}
    sample = get_task("clevr_count", list_objects=True).to_sample(row, think=True)
    assert sample.extra["objects"] == [{"colour": "red", "shape": "square"}, {"colour": "blue", "shape": "circle"}]
    reference = get_task("clevr_count", list_objects=True).reference_completion(sample)
    assert reference == "<think>\nred square\nblue circle\n</think><answer>2</answer>"
    breakdown = score_completions([reference], [sample], {"object_mentions": 1.0, "count_accuracy": 1.0})
    assert breakdown.total == [1.0] and [score for *_, score in breakdown.steps[0]] == [1.0, 1.0]
    plain = get_task("clevr_count").to_sample(row, think=True)
    assert "red square" not in get_task("clevr_count").reference_completion(plain)
    assert score_completions(["x"], [SAMPLE], {"object_mentions": 1.0}).components["object_mentions"] == [None]
