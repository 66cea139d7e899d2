"""MME (Fu et al., 2023): yes/no questions in 14 subtasks, ``mme`` (2,374 questions, two per image).

Files: the Hub dataset ``lmms-lab/MME``, ``data/test-*.parquet``: ``question_id`` (the image, e.g.
``code_reasoning/0020.png``: both questions of an image share it, so the second is ``<id>#2``),
``question`` (ending "Please answer yes or no."), ``answer`` (``Yes``/``No``), ``category`` (the
subtask), ``image`` (bytes).

Prompt: MME's own: the question as published, its "Please answer yes or no." included (lmms-eval's
default swaps that for "Answer the question using a single word or phrase.").
Reading and scoring: MME's ``calculation.py`` (:func:`eval.scoring.binary.mme_answer`: yes/no in the
first four lower-cased characters, else "other", wrong).
Results: accuracy overall and per subtask, and MME's own numbers
(:func:`eval.scoring.binary.mme_scores`): per subtask ``acc`` and ``acc_plus`` (images with both
questions right) in percent and their sum ``score``; ``perception`` (10 subtasks, out of 2000) and
``cognition`` (4, out of 800) totals. Only images with both questions scored count there
(``incomplete_images`` says how many were left out, e.g. under ``--limit``).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import BENCHMARKS, Item, Scored
from eval.benchmarks.short_answer import ShortAnswer
from eval.scoring.binary import (
    MME_COGNITION,
    MME_PERCEPTION,
    MME_QUESTIONS_PER_IMAGE,
    MmeAnswer,
    mme_answer,
    mme_scores,
)

SUBTASK_KEY = "category"
LABELS = ("yes", "no")


class MME(ShortAnswer):
    id_column = "question_id"
    max_new_tokens = 16
    instruction = ""  # the published question asks for yes or no itself
    layout = "Hub lmms-lab/MME: data/test-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answer = str(raw.get("answer") or "").strip().lower()
        if answer not in LABELS:
            raise BadRow("bad field", f"answer {raw.get('answer')!r} is not Yes/No")
        subtask = str(raw.get(SUBTASK_KEY) or "")
        if subtask not in MME_PERCEPTION + MME_COGNITION:
            raise BadRow("bad field", f"unknown MME subtask {subtask!r}")
        fields = {"image": str(raw.get("question_id") or item_id)}
        return self.question_item(raw, item_id, folder, path, answer, fields, {SUBTASK_KEY: subtask})

    def extract(self, completion: str, item: Item) -> MmeAnswer:
        return mme_answer(completion)

    def credit(self, prediction: MmeAnswer, item: Item) -> float:
        return float(prediction == item.answer)

    def aggregate(self, scored: Sequence[Scored]) -> dict[str, float]:
        """``<subtask>/acc``, ``acc_plus``, ``score``; ``perception``, ``cognition``; ``incomplete_images``."""
        by_image: dict[tuple[str, str], list[bool]] = defaultdict(list)
        for item, _, metric in scored:
            by_image[(item.categories[SUBTASK_KEY], item.fields["image"])].append(metric == 1.0)
        pairs = [(subtask, image, correct) for (subtask, image), answers in by_image.items()
                 if len(answers) == MME_QUESTIONS_PER_IMAGE for correct in answers]
        scores = mme_scores(pairs)
        numbers = {f"{subtask}/{name}": value for subtask, subtask_scores in scores.subtasks.items()
                   for name, value in dataclasses.asdict(subtask_scores).items()}
        incomplete = sum(len(answers) != MME_QUESTIONS_PER_IMAGE for answers in by_image.values())
        return numbers | {"perception": scores.perception, "cognition": scores.cognition,
                          "incomplete_images": float(incomplete)}


BENCHMARKS.add("mme", MME("mme", "test"))
