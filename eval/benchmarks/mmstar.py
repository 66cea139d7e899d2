"""MMStar (Chen et al., 2024): 1,500 vision-indispensable multiple-choice questions, ``mmstar``.

Files: the Hub dataset ``Lin-Chen/MMStar``, one file ``mmstar.parquet`` (its split is ``val``):
``index``, ``question`` (the stem, then ``Options: A: ..., B: ..., C: ..., D: ...`` on its last
line), ``image`` (bytes), ``answer`` (a letter), ``category`` (6 core capabilities) and
``l2_category`` (18 detailed axes), ``meta_info``.

Prompt: lmms-eval's ``mmstar`` task (its default): the question as published, options included,
then "Answer with the option's letter from the given choices directly" (no final period, as there).
Reading: VLMEvalKit's exact matching (:func:`eval.scoring.choice.vlmevalkit_choice`), the toolkit
MMStar's authors evaluate with; the options it matches by text are parsed from the question.
Results: overall, per category and per l2-category, micro-averaged over questions as VLMEvalKit
reports them.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Item, category_labels
from eval.benchmarks.lettered import MC_INSTRUCTION, LetterChoice
from eval.scoring.choice import vlmevalkit_choice

_OPTIONS_LINE = "Options:"


def split_options(question: str) -> dict[str, str]:
    """The options of MMStar's question, letter -> text: they follow its last ``Options:``, ``A: text``
    first, then each next letter as ``, X: text`` (an option's own commas stay in its text)."""
    _, marker, listed = question.rpartition(_OPTIONS_LINE)
    text = listed.strip()
    spans: list[tuple[str, int, int]] = []  # letter, where its marker starts, where its text starts
    for letter in string.ascii_uppercase:
        marker_text = f", {letter}: " if spans else f"{letter}: "
        found = text.find(marker_text, spans[-1][2] if spans else 0)
        if found < 0 or (not spans and found != 0):
            break
        spans.append((letter, found, found + len(marker_text)))
    if not marker or len(spans) < 2:
        raise BadRow("bad field", f"no 'Options: A: ..., B: ...' in the question: {question[-80:]!r}")
    ends = [start for _, start, _ in spans[1:]] + [len(text)]
    return {letter: text[begin:end] for (letter, _, begin), end in zip(spans, ends)}


class MMStar(LetterChoice):
    id_column = "index"
    max_new_tokens = 128
    instruction = f"\n{MC_INSTRUCTION.rstrip('.')}"
    layout = "Hub Lin-Chen/MMStar: mmstar.parquet (image bytes); pass the file"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        question = str(raw.get("question") or "").strip()
        options = split_options(question)
        images, refs = files.images(raw, ("image",), folder, item_id=item_id, file_label=str(path))
        fields = {"options": options}
        return Item(item_id, question, images, refs, str(raw.get("answer") or "").strip() or None, fields,
                    category_labels(raw, ("category", "l2_category")))

    def task_question(self, item: Item) -> str:
        return item.question  # the options are part of the published question

    def read_letter(self, completion: str, item: Item) -> str | None:
        return vlmevalkit_choice(completion, item.fields["options"])


BENCHMARKS.add("mmstar", MMStar("mmstar", "val"))
