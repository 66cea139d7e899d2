"""Our scorers against lmms-eval 0.7.3 on the same tables (optional: needs its separate environment).

Where lmms-eval agrees with the published code, its score must equal ours; where a row
records lmms-eval's departure (``Case.lmms``), lmms-eval must give exactly that and ours
must differ. The environment's interpreter is ``$MMGRPO_LMMS_EVAL_PYTHON`` (how to build it:
docs/benchmark_scoring.md); without it the test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from eval.scoring.aggregate import summarize
from eval.scoring.anls import anls
from eval.scoring.binary import mme_answer, pope_answer, pope_metrics
from eval.scoring.choice import (
    lmms_eval_choice,
    mvbench_answer,
    mvbench_correct,
    mvbench_prediction,
    scienceqa_choice,
    videomme_choice,
    vlmevalkit_choice,
)
from eval.scoring.counting import count_answer
from eval.scoring.relaxed import relaxed_correctness
from eval.scoring.vqa import vqa_accuracy

from . import tables
from .tables import SAME

ORACLE = Path(__file__).with_name("lmms_oracle.py")


def _mvbench(case: tables.Case, return_prompt: str) -> float:
    gold = mvbench_answer(case.gold, tables.MVBENCH_CANDIDATES["ABCD".index(case.gold)])
    return float(mvbench_correct(mvbench_prediction(case.completion, return_prompt), gold))


OURS = {
    "MMSTAR": lambda c: float(vlmevalkit_choice(c.completion, tables.MMSTAR_OPTIONS) == c.gold),
    "AI2D": lambda c: float(vlmevalkit_choice(c.completion, tables.AI2D_OPTIONS) == c.gold),
    "SCIENCEQA": lambda c: float(scienceqa_choice(c.completion, len(tables.SCIENCEQA_CHOICES)) == c.gold),
    "VIDEOMME": lambda c: float(videomme_choice(c.completion) == c.gold),
    "MVBENCH": lambda c: _mvbench(c, "("),
    "MVBENCH_NO_PREFILL": lambda c: _mvbench(c, ""),
    "TEXTVQA": lambda c: vqa_accuracy(c.completion, c.gold),
    "DOCVQA": lambda c: anls(c.completion, c.gold),
    "CHARTQA": lambda c: float(relaxed_correctness(c.completion, c.gold)),
    "POPE": lambda c: float(pope_answer(c.completion) == c.gold),
    "MME": lambda c: float(mme_answer(c.completion) == c.gold),
    "COUNTBENCH": lambda c: float(count_answer(c.completion) == c.gold),
}


def _oracle_python() -> str:
    python = os.environ.get("MMGRPO_LMMS_EVAL_PYTHON", "")
    if not (python and Path(python).exists()):
        pytest.skip(f"no lmms-eval environment (MMGRPO_LMMS_EVAL_PYTHON={python!r}; docs/benchmark_scoring.md builds one)")
    return python


@pytest.fixture(scope="module")
def oracle() -> dict:
    run = subprocess.run([_oracle_python(), str(ORACLE)], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        pytest.skip(f"the lmms-eval environment cannot score: {run.stderr.strip().splitlines()[-1:]}")
    return json.loads(run.stdout)


@pytest.mark.parametrize("table", sorted(OURS))
def test_lmms_eval_agrees_except_where_recorded(oracle: dict, table: str) -> None:
    for case, theirs in zip(getattr(tables, table), oracle["rows"][table], strict=True):
        ours = OURS[table](case)
        if case.lmms == SAME:
            assert theirs == pytest.approx(ours), f"{table} {case.completion!r}: lmms-eval {theirs}, ours {ours}"
        else:
            assert theirs == pytest.approx(case.lmms), f"{table} {case.completion!r}: lmms-eval gives {theirs}"
            assert ours != pytest.approx(theirs), f"{table} {case.completion!r}: recorded as a difference, but equal"


def test_lmms_eval_aggregates_depart_as_documented(oracle: dict) -> None:
    theirs = oracle["aggregates"]
    # POPE's yes-ratio is the share of "yes" PREDICTIONS; lmms-eval counts "yes" LABELS.
    labels = [case.gold for case in tables.POPE]
    assert theirs["pope_yes_ratio"] == pytest.approx(labels.count("yes") / len(labels))
    ours = pope_metrics([pope_answer(case.completion) for case in tables.POPE], labels).yes_ratio
    assert ours != pytest.approx(theirs["pope_yes_ratio"])
    # Video-MME leaves unanswered questions out of the accuracy; lmms-eval divides by every question.
    lmms_rows = oracle["rows"]["VIDEOMME"]
    assert theirs["videomme_accuracy"] == pytest.approx(sum(lmms_rows) / len(lmms_rows))
    video = summarize((None if videomme_choice(c.completion) is None else OURS["VIDEOMME"](c), {}) for c in tables.VIDEOMME)
    assert video.answered < video.count
    assert video.overall == pytest.approx(sum(map(OURS["VIDEOMME"], tables.VIDEOMME)) / video.answered)
    # MVBench divides by every question; lmms-eval leaves out empty replies.
    lmms_rows = [score for score, case in zip(oracle["rows"]["MVBENCH"], tables.MVBENCH) if case.completion != ""]
    assert theirs["mvbench_accuracy"] == pytest.approx(sum(lmms_rows) / len(lmms_rows))
    assert len(lmms_rows) < len(tables.MVBENCH)
    # MMStar's overall is the mean over questions; lmms-eval averages the l2-category means.
    mmstar = summarize(((score, {"l2": l2}) for score, l2 in tables.MMSTAR_MACRO), keys=["l2"])
    assert theirs["mmstar_average"] == pytest.approx(sum(mmstar.by["l2"].values()) / len(mmstar.by["l2"]))
    assert mmstar.overall == pytest.approx(0.75) and theirs["mmstar_average"] == pytest.approx(0.5)



@pytest.mark.parametrize("table", ["MMSTAR", "AI2D", "SCIENCEQA", "VIDEOMME", "MVBENCH", "MVBENCH_NO_PREFILL"])
def test_lmms_eval_choice_reads_as_lmms_eval(oracle: dict, table: str) -> None:
    for case, theirs in zip(getattr(tables, table), oracle["mcq_extract"][table], strict=True):
        assert lmms_eval_choice(case.completion) == (theirs or None), case.completion
