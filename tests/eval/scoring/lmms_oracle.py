"""Score the tables of ``tables.py`` with lmms-eval's own functions; prints JSON.

Run with the Python of a separate environment holding lmms-eval 0.7.3 (see
docs/benchmark_scoring.md), never imported by the project's tests:
``python lmms_oracle.py`` -> ``{"rows": {table: [score, ...]}, "aggregates": {...},
"mcq_extract": {table: [letter, ...]}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import tables  # noqa: E402
from lmms_eval.api.metrics import anls, exact_match_hf_evaluate  # noqa: E402
from lmms_eval.tasks._task_utils.mcq_extract import extract_mcq_answer  # noqa: E402
from lmms_eval.tasks.ai2d.utils import MultiChoiceRegexFilter  # noqa: E402
from lmms_eval.tasks.chartqa.utils import chartqa_process_results  # noqa: E402
from lmms_eval.tasks.countbench.utils import countbench_process_results  # noqa: E402
from lmms_eval.tasks.mme.utils import mme_process_results  # noqa: E402
from lmms_eval.tasks.mmstar.utils import mmstar_aggregate_results, mmstar_process_results  # noqa: E402
from lmms_eval.tasks.mvbench.utils import mvbench_aggregate_results, mvbench_process_results  # noqa: E402
from lmms_eval.tasks.pope.utils import pope_aggregate_yes_ratio, pope_process_results  # noqa: E402
from lmms_eval.tasks.scienceqa.utils import sqa_process_results  # noqa: E402
from lmms_eval.tasks.textvqa.utils import textvqa_process_results  # noqa: E402
from lmms_eval.tasks.videomme.utils import videomme_aggregate_results, videomme_process_results  # noqa: E402


def mmstar(case):
    doc = {"answer": case.gold, "category": "c", "l2_category": "l", "index": 0}
    return mmstar_process_results(doc, [case.completion])["average"]["score"]


def ai2d(case):
    letters = list(tables.AI2D_OPTIONS)
    doc = {"options": list(tables.AI2D_OPTIONS.values()), "answer": letters.index(case.gold)}
    extract = MultiChoiceRegexFilter(regex_pattern=r"([A-Z])\.", group_select=0, ignore_case=True, ignore_punctuation=True)
    filtered = extract.apply([[case.completion]], [doc])[0]
    return float(exact_match_hf_evaluate([filtered], [case.gold], ignore_case=True, ignore_punctuation=True)["exact_match"])


def scienceqa(case):
    doc = {"choices": tables.SCIENCEQA_CHOICES, "answer": "ABCDE".index(case.gold)}
    return sqa_process_results(doc, [case.completion])["exact_match"]


def _videomme_item(case):
    doc = {"answer": case.gold, "duration": "short", "domain": "Knowledge", "sub_category": "Astronomy",
           "task_type": "OCR Problems", "question_id": "0", "videoID": "v"}
    return next(iter(videomme_process_results(doc, [case.completion]).values()))


def videomme(case):
    return _videomme_item(case)["score"]


def _mvbench_item(case):
    doc = {"candidates": tables.MVBENCH_CANDIDATES, "answer": tables.MVBENCH_CANDIDATES["ABCD".index(case.gold)]}
    return mvbench_process_results(doc, [case.completion])["mvbench_accuracy"]


def mvbench(case):
    return _mvbench_item(case)["score"]


def textvqa(case):
    return textvqa_process_results({"answers": list(case.gold), "question_id": 0}, [case.completion])["exact_match"]


def docvqa(case):
    return anls(list(case.gold), [case.completion])["anls"]


def chartqa(case):
    return chartqa_process_results({"type": "human_test", "answer": case.gold}, [case.completion])["relaxed_overall"]


def pope(case):
    return pope_process_results({"answer": case.gold, "question_id": 0}, [case.completion])["pope_accuracy"]["score"]


def mme(case):
    doc = {"answer": case.gold, "category": "existence", "question_id": "img"}
    return next(iter(mme_process_results(doc, [case.completion]).values()))["score"]


def countbench(case):
    return countbench_process_results({"number": case.gold}, [case.completion])["acc"]


SCORERS = {
    "MMSTAR": mmstar, "AI2D": ai2d, "SCIENCEQA": scienceqa, "VIDEOMME": videomme, "MVBENCH": mvbench,
    "MVBENCH_NO_PREFILL": mvbench, "TEXTVQA": textvqa, "DOCVQA": docvqa, "CHARTQA": chartqa,
    "POPE": pope, "MME": mme, "COUNTBENCH": countbench,
}


def aggregates() -> dict:
    """lmms-eval's aggregate numbers on the tables, where they depart from the published ones."""
    pope_items = [pope_process_results({"answer": c.gold, "question_id": i}, [c.completion])["pope_yes_ratio"]
                  for i, c in enumerate(tables.POPE)]
    mmstar_items = [{"score": score, "l2_category": l2} for score, l2 in tables.MMSTAR_MACRO]
    return {
        "pope_yes_ratio": pope_aggregate_yes_ratio(pope_items),
        "videomme_accuracy": videomme_aggregate_results([_videomme_item(c) for c in tables.VIDEOMME]) / 100,
        "mvbench_accuracy": mvbench_aggregate_results([_mvbench_item(c) for c in tables.MVBENCH]) / 100,
        "mmstar_average": mmstar_aggregate_results(mmstar_items),
    }


CHOICE_TABLES = ("MMSTAR", "AI2D", "SCIENCEQA", "VIDEOMME", "MVBENCH", "MVBENCH_NO_PREFILL")


if __name__ == "__main__":
    rows = {name: [float(scorer(case)) for case in getattr(tables, name)] for name, scorer in SCORERS.items()}
    letters = {name: [extract_mcq_answer(case.completion, choices=["A", "B", "C", "D"]) for case in getattr(tables, name)]
               for name in CHOICE_TABLES}
    json.dump({"rows": rows, "aggregates": aggregates(), "mcq_extract": letters}, sys.stdout)
