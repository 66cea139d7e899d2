"""ScienceQA-IMG (Lu et al., NeurIPS 2022): the test questions with an image, ``scienceqa_img`` (2,017).

Files: the Hub dataset ``lmms-lab/ScienceQA``, config folder ``ScienceQA-IMG/test-*.parquet`` (pass that
folder: its sibling ``ScienceQA-FULL`` holds test files too): ``question``, ``choices`` (a list),
``answer`` (the right choice's index), ``hint`` (the context), ``image`` (bytes), ``subject``,
``grade`` (``grade1`` .. ``grade12``), ``topic``, ``category``, ``skill``, ``lecture``, ``solution``;
no id column (the row number is the id).

Prompt: lmms-eval's ``scienceqa_img`` task (its default format, LLaVA's): "Context: <hint>" on its own
line when there is a hint, the question, the choices as ``A. text`` lines, then "Answer with the
option's letter from the given choices directly."
Reading: LLaVA's ``eval_science_qa.py`` (:func:`eval.scoring.choice.scienceqa_choice`; an unread
answer is wrong, as the script scores it today).
Results: overall, per subject (natural/social/language science) and per grade band (G1-6, G7-12), as
the ScienceQA paper reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.lettered import LetterChoice, answer_letter, row_options
from eval.scoring.choice import scienceqa_choice

LOWER_GRADES = range(1, 7)  # the paper's G1-6; grades 7 to 12 are G7-12


def grade_band(grade: str) -> str:
    """``grade3`` -> ``G1-6``, ``grade9`` -> ``G7-12``; any other value as it is."""
    number = grade.removeprefix("grade")
    if not number.isdigit():
        return grade
    return "G1-6" if int(number) in LOWER_GRADES else "G7-12"


class ScienceQAImg(LetterChoice):
    id_column = None
    max_new_tokens = 16
    layout = "Hub lmms-lab/ScienceQA: ScienceQA-IMG/test-*.parquet (image bytes); pass the ScienceQA-IMG folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        options = row_options(raw, "choices")
        images, refs = files.images(raw, ("image",), folder, item_id=item_id, file_label=str(path))
        labels = {"subject": str(raw.get("subject") or "unknown")}
        if raw.get("grade"):
            labels["grade"] = grade_band(str(raw["grade"]))
        fields = {"options": options, "hint": str(raw.get("hint") or "")}
        return Item(item_id, str(raw.get("question") or ""), images, refs, answer_letter(raw.get("answer"), options),
                    fields, labels)

    def task_question(self, item: Item) -> str:
        context = f"Context: {item.fields['hint']}\n" if item.fields["hint"] else ""
        return f"{context}{super().task_question(item)}"

    def read_letter(self, completion: str, item: Item) -> str | None:
        return scienceqa_choice(completion, len(item.fields["options"]))


BENCHMARKS.add("scienceqa_img", ScienceQAImg("scienceqa_img", "test"))
