"""MathVista's scorer on tricky completions: the published rules' verdicts, checked against lmms-eval."""

from __future__ import annotations

import random

import pytest

from eval.benchmarks import BENCHMARKS, Item
from tests.eval.oracle import lmms_verdicts, needs_oracle

MATHVISTA = BENCHMARKS.get("mathvista_testmini")


def item(answer: str, *, choices: list[str] | None = None, answer_type: str = "text", precision: int | None = None) -> Item:
    fields = {"choices": choices or [], "question_type": "multi_choice" if choices else "free_form",
              "answer_type": answer_type, "precision": precision, "unit": "", "query": ""}
    return Item("0", "q", (), (), answer, fields)


BLOCK = item("Moved right.", choices=["Moved left.", "Moved right.", "Stayed still."])
ANGLE = item("45", choices=["30", "45", "60", "90"])
COUNT = item("12", answer_type="integer")
MONEY = item("1200", answer_type="integer")
LENGTH = item("1.5", answer_type="float", precision=1)
RATIO = item("0.25", answer_type="float", precision=2)
HEIGHTS = item("[1, 2, 3]", answer_type="list")

# completion, item, what is read from it, the official verdict
TABLE = [
    ("Moved right.", BLOCK, "Moved right.", True),  # an option's text, as given
    ("B", BLOCK, "B", True),
    ("(B) Moved right.", BLOCK, "B", True),  # letter and option text with its trailing period
    ("B.", BLOCK, "B", True),
    ("b", BLOCK, "B", True),  # lower-case letter
    ("The answer is B.", BLOCK, "B", True),  # untagged free text
    ("The best answer is B", BLOCK, "B", True),
    ("Best option:(B)", BLOCK, "B", True),
    ("Moved right", BLOCK, "Moved right.", True),  # option text without its trailing punctuation
    ("moved RIGHT.", BLOCK, "Moved right.", True),
    ("(A) or (B)", BLOCK, "", False),  # two answers: none read; the scorer takes the closest option to ""
    ("", BLOCK, "", False),  # empty: the closest option to "" is the shortest one, "Moved left."
    ("(C)", BLOCK, "C", False),
    ("45", ANGLE, "45", True),
    ("B) 45", ANGLE, "B", True),
    ("The angle is 45 degrees, so the answer is (B).", ANGLE, "B", True),
    ("Answer: 60", ANGLE, "60", False),
    ("12", COUNT, "12", True),
    ("12.0", COUNT, "12.0", True),  # integer answers compare as str(int(float(x)))
    ("There are 12 cubes.", COUNT, "12", True),
    ('The answer is "12".', COUNT, "12", True),  # the reference's quick extraction
    ("twelve", COUNT, "", False),  # a number word is not read
    ("12 or 13", COUNT, "13", False),  # two answers: the last one counts
    ("The total is 1,200 dollars.", MONEY, "1200", True),  # thousands comma and unit
    ("1.54", LENGTH, "1.54", True),  # rounded to the item's precision (1): 1.5
    ("1.46 cm", LENGTH, "1.46", True),  # unit dropped, rounded: 1.5
    ("The length is 1.5 cm.", LENGTH, "1.5", True),
    ("1.56", LENGTH, "1.56", False),  # rounds to 1.6
    ("$1.50", LENGTH, "1.50", True),
    ("0.254", RATIO, "0.254", True),  # precision 2: 0.25
    (".25", RATIO, "0.25", True),
    ("[1, 2, 3]", HEIGHTS, "[1, 2, 3]", True),
    ("The heights are [1, 2, 3].", HEIGHTS, "[1, 2, 3]", True),
    ("[1,2,3]", HEIGHTS, "[1,2,3]", False),  # lists compare as written
    ('The answer is "inf".', COUNT, "inf", False),  # int(float("inf")) overflows: no prediction, wrong (not a crash)
    ('The answer is "1e400".', COUNT, "1e400", False),
    ('The answer is "nan".', COUNT, "nan", False),
]


@pytest.mark.parametrize(("completion", "question", "extracted", "correct"), TABLE)
def test_verdicts_follow_the_published_rules(completion, question, extracted, correct):
    verdict = MATHVISTA.judge(completion, question)
    assert (verdict.extracted, verdict.correct) == (extracted, correct)


def test_the_task_prompt_style_reads_the_answer_tag():
    completion = "<think>The block went from left to right, not (A).</think><answer>(B)</answer>"
    assert MATHVISTA.judge(completion, BLOCK, style="task").correct is True
    assert MATHVISTA.judge(completion, BLOCK).extracted != "B"  # the official style reads the whole text


def oracle_case(extracted: str, question: Item, precision: float | None = None) -> list:
    fields = question.fields
    return [extracted, fields["choices"], fields["question_type"], fields["answer_type"],
            fields["precision"] if precision is None else precision, question.answer]


@needs_oracle
def test_lmms_eval_scores_each_extraction_the_same():
    verdicts = lmms_verdicts({"mathvista": [oracle_case(extracted, question) for _, question, extracted, _ in TABLE]})
    assert verdicts["mathvista"] == [correct for *_, correct in TABLE]


@needs_oracle
def test_lmms_eval_departs_where_the_parquet_stores_precision_as_a_float():
    """The Hub parquet stores precision as 1.0; lmms-eval passes it to round() as is, which raises, so
    every float answer scores 0 there. The published scorer (int precision from its json) and ours: 1."""
    ours = MATHVISTA.judge("1.54", LENGTH).correct
    theirs = lmms_verdicts({"mathvista": [oracle_case("1.54", LENGTH, precision=1.0)]})["mathvista"]
    assert (ours, theirs) == (True, [False])


def test_a_judge_extracts_only_what_the_reference_rules_cannot_read():
    asked = []

    def judge(questions: list[str]) -> list[str]:
        asked.extend(questions)
        return [" B\n"]

    plain = MATHVISTA.judge("Moved right.", BLOCK, ask=judge)  # an option's text: the reference reads it
    assert (plain.correct, plain.note, asked) == (True, "", [])
    extracted = MATHVISTA.judge("It went to the right, away from the wall.", BLOCK, ask=judge)
    assert (extracted.extracted, extracted.correct, extracted.note) == ("B", True, "judge-extracted")
    (question,) = asked
    assert "Choices:\n(A) Moved left." in question and "It went to the right, away from the wall." in question


def generated_extractions(count: int, seed: int = 0) -> list[tuple[str, Item]]:
    """Extractions of every kind the scorer meets: letters in any case and brackets, option texts with typos,
    numbers in several spellings, lists, junk, nothing."""
    rng = random.Random(seed)
    texts = ["A", "b", "(B)", "(c) x", "D", "Moved rihgt.", "moved left", "Stayed", "45", "4 5", "", " ", "12",
             "12.0", "12.5", "-3", "1e1", "1,200", "1.54", "1.449", "0.255", ".25", "[1, 2, 3]", "[1,2,3]", "abc"]
    questions = [BLOCK, ANGLE, COUNT, MONEY, LENGTH, RATIO, HEIGHTS]
    return [(rng.choice(texts) + rng.choice(["", "", " ", "0"]), rng.choice(questions)) for _ in range(count)]


@needs_oracle
def test_lmms_eval_scores_generated_extractions_the_same():
    cases = generated_extractions(400)
    theirs = lmms_verdicts({"mathvista": [oracle_case(extracted, question) for extracted, question in cases]})
    ours = [MATHVISTA.score(extracted, question) for extracted, question in cases]
    assert [verdict.prediction for verdict in ours] == theirs["mathvista_prediction"]
    assert [verdict.correct for verdict in ours] == theirs["mathvista"]
