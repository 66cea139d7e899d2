"""Multiple-choice readers: each benchmark's table of tricky completions with the published verdict."""

from __future__ import annotations

import pytest

from eval.scoring.choice import (
    lmms_eval_choice,
    mvbench_answer,
    mvbench_correct,
    mvbench_gold,
    mvbench_prediction,
    mvbench_reply,
    option_letters,
    scienceqa_choice,
    videomme_choice,
    vlmevalkit_choice,
)

from . import tables
from .tables import SAME, Case


def _ids(table: list[Case]) -> list[str]:
    return [case.why for case in table]


@pytest.mark.parametrize("table", [tables.MMSTAR, tables.AI2D, tables.SCIENCEQA, tables.VIDEOMME,
                                   tables.MVBENCH + tables.MVBENCH_NO_PREFILL])
def test_every_table_has_twenty_tricky_rows(table: list[Case]) -> None:
    assert len(table) >= 20
    assert any(case.verdict in (None, False) for case in table) and any(case.verdict not in (None, False) for case in table)


@pytest.mark.parametrize("case", tables.MMSTAR, ids=_ids(tables.MMSTAR))
def test_mmstar_reads_as_vlmevalkit(case: Case) -> None:
    assert vlmevalkit_choice(case.completion, tables.MMSTAR_OPTIONS) == case.verdict


@pytest.mark.parametrize("case", tables.AI2D, ids=_ids(tables.AI2D))
def test_ai2d_reads_as_vlmevalkit(case: Case) -> None:
    assert vlmevalkit_choice(case.completion, tables.AI2D_OPTIONS) == case.verdict


@pytest.mark.parametrize("case", tables.SCIENCEQA, ids=_ids(tables.SCIENCEQA))
def test_scienceqa_reads_as_llava(case: Case) -> None:
    assert scienceqa_choice(case.completion, len(tables.SCIENCEQA_CHOICES)) == case.verdict


@pytest.mark.parametrize("case", tables.VIDEOMME, ids=_ids(tables.VIDEOMME))
def test_videomme_reads_as_eval_your_results(case: Case) -> None:
    assert videomme_choice(case.completion) == case.verdict


def _mvbench_gold(letter: str) -> str:
    return mvbench_answer(letter, tables.MVBENCH_CANDIDATES["ABCD".index(letter)])


@pytest.mark.parametrize("case", tables.MVBENCH, ids=_ids(tables.MVBENCH))
def test_mvbench_check_ans_after_the_prefilled_parenthesis(case: Case) -> None:
    assert mvbench_correct(mvbench_prediction(case.completion), _mvbench_gold(case.gold)) is case.verdict


@pytest.mark.parametrize("case", tables.MVBENCH_NO_PREFILL, ids=_ids(tables.MVBENCH_NO_PREFILL))
def test_mvbench_check_ans_without_a_prefill(case: Case) -> None:
    assert mvbench_correct(mvbench_prediction(case.completion, return_prompt=""), _mvbench_gold(case.gold)) is case.verdict


def test_mvbench_prediction_is_the_first_line_after_the_prefill() -> None:
    assert mvbench_prediction("  B) dancing\nbecause ...") == "(B) dancing"
    assert mvbench_answer("C", "running") == "(C) running"


def test_mvbench_reply_is_the_notebooks_answer_post_processing() -> None:
    assert mvbench_reply("Human: x Assistant: B) dancing ### Human: y") == "B) dancing"
    assert mvbench_reply("A) one Assistant: C) two Assistant: D) three") == "D) three"  # the last 'Assistant:'
    assert mvbench_reply("###B)") == ""


def test_mvbench_gold_is_the_last_equal_candidate_or_the_letter_before_a() -> None:
    assert mvbench_gold(["yes", "no", "yes"], "yes") == "C"  # qa_template's loop never breaks
    assert mvbench_gold(["yes", "no"], "maybe") == "@"
    gold = mvbench_answer(mvbench_gold(["yes", "no"], "maybe"), "maybe")
    assert [mvbench_correct(mvbench_prediction(reply), gold) for reply in ("", "A) yes", "B) no")] == [True, False, False]


def test_mvbench_an_empty_answer_text_is_scored_by_its_option() -> None:
    """The notebook's ``check_ans`` raises on it (``gt_content[-1]``); we compare the options as for any answer."""
    gold = mvbench_answer("A", "")
    assert mvbench_correct(mvbench_prediction("A)"), gold) and not mvbench_correct(mvbench_prediction("B)"), gold)


def test_option_letters_and_options_beyond_the_row() -> None:
    assert option_letters(5) == ["A", "B", "C", "D", "E"]
    five = dict(zip(option_letters(5), ["one", "two", "three", "four", "five"]))
    assert vlmevalkit_choice("E", five) == "E"
    assert vlmevalkit_choice("E", tables.MMSTAR_OPTIONS) is None
    assert scienceqa_choice("E", 5) == "E" and scienceqa_choice("D", 3) is None


@pytest.mark.parametrize("case", tables.MMSTAR + tables.VIDEOMME, ids=_ids(tables.MMSTAR + tables.VIDEOMME))
def test_lmms_eval_choice_gives_the_recorded_lmms_eval_verdict(case: Case) -> None:
    """lmms-eval 0.7.3 reads MMStar and Video-MME with its generic reader: its verdict is the
    table's ``lmms`` column where recorded, the published verdict elsewhere."""
    published = float(case.verdict == case.gold)
    assert float(lmms_eval_choice(case.completion) == case.gold) == (published if case.lmms == SAME else case.lmms)


def test_lmms_eval_choice_ranks_forms() -> None:
    assert lmms_eval_choice("B or C") == "B"  # alone at the start beats alone at the end
    assert lmms_eval_choice("Option (A) or C.") == "C"  # at the end (9) beats parentheses (6)
    assert lmms_eval_choice("I think (A) fits, not B:") == "B"  # ... edge ':' stripped, B alone at the end
    assert lmms_eval_choice("Based on it") == "B"  # anywhere, as the last resort
    assert lmms_eval_choice("  ") is None and lmms_eval_choice("none") is None
    assert lmms_eval_choice("E", letters=["A", "B", "C", "D", "E"]) == "E"
