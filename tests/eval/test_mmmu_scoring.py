"""MMMU's scorer on tricky completions: the published rules' verdicts, checked against lmms-eval."""

from __future__ import annotations

import random

import pytest

from eval.benchmarks import BENCHMARKS, Item
from tests.eval.oracle import lmms_verdicts, needs_oracle

MMMU = BENCHMARKS.get("mmmu_val")
RANDOM = None  # nothing parseable: the seeded random letter


def item(answer, options: list[str] | None = None, item_id: str = "validation_Math_1") -> Item:
    fields = {"options": options or [], "question_type": "multiple-choice" if options else "open"}
    return Item(item_id, "q", (), (), answer, fields)


PRICE = item("B", ["$10", "$12", "$14", "$16"])
SHAPE = item("C", ["triangle", "circle", "square", "pentagon"])

# completion, item, the letter read (RANDOM: none), the official verdict (None: random)
CHOICES = [
    ("B", PRICE, "B", True),
    ("(B)", PRICE, "B", True),
    ("B.", PRICE, "B", True),  # trailing punctuation stripped
    ("The answer is B.", PRICE, "B", True),  # untagged free text
    ("The best answer is B", PRICE, "B", True),
    ("Best option:(B)", PRICE, "B", True),
    ("Answer: B", PRICE, "B", True),
    ("(B) $12", PRICE, "B", True),
    ("(A) is wrong, (B) is right", PRICE, "B", True),  # several "(X)": the last one written
    ("A or B", PRICE, "B", True),  # two answers: the last one written
    ("B, C", PRICE, "C", False),  # "B," is not a lone letter; " C " is
    ("I think it is $12 because 5+7 = 12", PRICE, "B", True),  # > 5 words: option text counts
    ("$12", PRICE, RANDOM, None),  # option text in <= 5 words is not read
    ("b", PRICE, RANDOM, None),  # lower-case letters are not read
    ("", PRICE, RANDOM, None),
    ("The answer is square.", SHAPE, RANDOM, None),  # 4 words: option text not read
    ("I believe the correct shape is the square", SHAPE, "C", True),
    ("A square has four sides, so C", SHAPE, "C", True),  # " A " (an article) and " C ": the last
    ("A square.", SHAPE, "A", False),  # the article "A" reads as option A
    ("It could be a triangle or a circle, I pick the circle", SHAPE, "B", False),  # text: the last mentioned
]
# completion, answer, the official verdict
OPEN = [
    ("3.5", "3.5", True),
    ("The ratio is 3.50.", "3.5", True),
    ("3.499", "3.5", True),  # numbers compare rounded to 2 decimals
    ("7/2", "3.5", False),  # a fraction is text, not a number
    ("The answer is 3.5 or 4", "3.5", True),  # two answers: any candidate counts
    ("so the ratio is 4", "3.5", False),
    ("The total is 1,200 dollars", "1200", True),  # thousands comma
    ("1.2e3", "1200", True),  # scientific notation
    ("It is photosynthesis.", "photosynthesis", True),
    ("PHOTOSYNTHESIS", "photosynthesis", True),  # case
    ("It is respiration.", "photosynthesis", False),
    ("3.43", ["24/7", "3.429"], True),  # an answer list: any of them
    ("x = 12\ny = 5", "5", True),  # "=" is read on the last line
]


@pytest.mark.parametrize(("completion", "question", "letter", "correct"), CHOICES)
def test_multiple_choice_verdicts_follow_the_published_rules(completion, question, letter, correct):
    verdict = MMMU.judge(completion, question)
    if letter is RANDOM:
        assert verdict.note == "random choice" and verdict.prediction in "ABCD"
        assert MMMU.judge(completion, question).prediction == verdict.prediction  # seeded: the same pick
    else:
        assert (verdict.prediction, verdict.correct, verdict.note) == (letter, correct, "")


@pytest.mark.parametrize(("completion", "answer", "correct"), OPEN)
def test_open_verdicts_follow_the_published_rules(completion, answer, correct):
    assert MMMU.judge(completion, item(answer)).correct is correct


def test_random_picks_are_seeded_per_item_and_spread_over_options():
    picks = {MMMU.judge("no idea", item("A", ["w", "x", "y", "z"], f"validation_Math_{n}")).prediction
             for n in range(40)}
    assert picks == set("ABCD")


@needs_oracle
def test_lmms_eval_reads_the_same_letters_and_open_verdicts():
    parsed = [case for case in CHOICES if case[2] is not RANDOM]
    verdicts = lmms_verdicts({
        "mmmu_choice": [[completion, question.fields["options"]] for completion, question, *_ in parsed],
        "mmmu_open": [[completion, answer] for completion, answer, _ in OPEN],
    })
    assert verdicts["mmmu_choice"] == [letter for _, _, letter, _ in parsed]
    assert verdicts["mmmu_open"] == [correct for *_, correct in OPEN]


# Where lmms-eval departs from the published parser: it also takes "X " without a space before
# and "X." anywhere, so these responses get a letter there and a random one in the published code.
DEPARTURES = [("Answer:B", PRICE, "B"), ("The answer is B.\n", PRICE, "B")]


@needs_oracle
@pytest.mark.parametrize(("completion", "question", "theirs"), DEPARTURES)
def test_lmms_eval_departs_on_letters_without_spaces_around(completion, question, theirs):
    assert MMMU.judge(completion, question).note == "random choice"
    assert lmms_verdicts({"mmmu_choice": [[completion, question.fields["options"]]]})["mmmu_choice"] == [theirs]


def generated_responses(count: int, seed: int = 0) -> list[str]:
    """Responses of words, option texts, numbers and letters (bare or bracketed), joined by spaces or lines.
    Capital letters appear only as lone letters, where the published parser and lmms-eval's agree."""
    rng = random.Random(seed)
    pieces = ["the", "answer", "is", "so", "therefore", "final", "=", "could be", "(A)", "(B)", "(C)", "(D)",
              "A", "B", "C", "D", "triangle", "circle", "square", "3.5", "1,200", "-2", "7/2", "2e3", "result",
              "photosynthesis", "x", "i think", "\n"]
    return [" ".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) + rng.choice(["", ".", " .", "!"])
            for _ in range(count)]


@needs_oracle
def test_lmms_eval_agrees_on_generated_responses():
    responses = generated_responses(300)
    verdicts = lmms_verdicts({
        "mmmu_choice": [[response, SHAPE.fields["options"]] for response in responses],
        "mmmu_open": [[response, answer] for response in responses for answer in ("3.5", "1200", "photosynthesis")],
    })
    ours = [MMMU.judge(response, SHAPE) for response in responses]
    read = [(verdict.prediction, theirs) for verdict, theirs in zip(ours, verdicts["mmmu_choice"]) if not verdict.note]
    assert len(read) > 150 and all(mine == theirs for mine, theirs in read)
    open_ours = [MMMU.judge(response, item(answer)).correct for response in responses
                 for answer in ("3.5", "1200", "photosynthesis")]
    assert open_ours == verdicts["mmmu_open"]
