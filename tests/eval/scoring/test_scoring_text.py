"""TextVQA VQA accuracy, DocVQA ANLS and ChartQA relaxed accuracy against their tables."""

from __future__ import annotations

import pytest

from eval.scoring.anls import anls, levenshtein
from eval.scoring.relaxed import relaxed_correctness
from eval.scoring.vqa import normalize_answer, vqa_accuracy

from . import tables
from .tables import Case


@pytest.mark.parametrize("table", [tables.TEXTVQA, tables.DOCVQA, tables.CHARTQA])
def test_every_table_has_twenty_tricky_rows(table: list[Case]) -> None:
    assert len(table) >= 20


@pytest.mark.parametrize("case", tables.TEXTVQA, ids=[case.why for case in tables.TEXTVQA])
def test_textvqa_accuracy(case: Case) -> None:
    assert vqa_accuracy(case.completion, case.gold) == pytest.approx(case.verdict)


@pytest.mark.parametrize("case", tables.DOCVQA, ids=[case.why for case in tables.DOCVQA])
def test_docvqa_anls(case: Case) -> None:
    assert anls(case.completion, case.gold) == pytest.approx(case.verdict)


@pytest.mark.parametrize("case", tables.CHARTQA, ids=[case.why for case in tables.CHARTQA])
def test_chartqa_relaxed_correctness(case: Case) -> None:
    assert relaxed_correctness(case.completion, case.gold) is case.verdict


@pytest.mark.parametrize(("raw", "normalised"), [
    ("The Dog's bone!", "dog 's bone"),
    ("Don't stop", "don't stop"),
    ("cant", "can't"),
    ("a-b c", "b c"),  # "-" between letters becomes a space, then the article "a" goes
    ("(five)", "5"),
    ("3.14 m.", "3.14 m"),
    ("x\ty\nz", "x y z"),
    ("x" + "." * 40, "x" + "." * 8),  # the published call removes at most 32 periods
])
def test_evalai_normalisation(raw: str, normalised: str) -> None:
    assert normalize_answer(raw) == normalised


def test_vqa_accuracy_of_a_lone_human_answer_and_none() -> None:
    assert vqa_accuracy("cat", ["cat"]) == 0.0  # leave-one-out: no other human left to agree
    with pytest.raises(ValueError, match="at least one"):
        vqa_accuracy("cat", [])


def test_levenshtein_and_anls_edges() -> None:
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == levenshtein("abc", "") == 3
    assert anls("Lon", ["London"], threshold=0.6) == 0.0
    with pytest.raises(ValueError, match="at least one"):
        anls("x", [])


def test_relaxed_tolerance_is_a_parameter() -> None:
    assert relaxed_correctness("11", "10", max_relative_change=0.1)
    assert not relaxed_correctness("11", "10")
