"""POPE (Li et al., EMNLP 2023): object-hallucination yes/no questions on COCO, ``pope`` (9,000: 3,000 in
each of the ``random``, ``popular`` and ``adversarial`` splits).

Files: the Hub dataset ``lmms-lab/POPE``, ``data/test-*.parquet`` (its ``Full`` folder holds other
subsets, not read for ``test``): ``id``, ``question_id``, ``question``, ``answer`` (``yes``/``no``),
``image_source``, ``image`` (bytes), ``category`` (the split).

Prompt: lmms-eval's ``pope`` task (LLaVA-1.5's): the question, then "Answer the question using a single
word or phrase." Reading: POPE's ``evaluate.py`` (:func:`eval.scoring.binary.pope_answer`: "no" when the
first sentence has the word No/no/not, else "yes").
Results: accuracy overall and per split, and per split POPE's accuracy, precision, recall, F1 and
yes-ratio ("yes" the positive class; :func:`eval.scoring.binary.pope_by_split`), reported as
``pope/<split>/<metric>``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import BENCHMARKS, Item, Scored, category_labels
from eval.benchmarks.short_answer import ShortAnswer
from eval.scoring.binary import YesNo, pope_answer, pope_by_split

SPLIT_KEY = "category"
LABELS = ("yes", "no")


class POPE(ShortAnswer):
    id_column = "question_id"
    max_new_tokens = 128
    layout = "Hub lmms-lab/POPE: data/test-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answer = str(raw.get("answer") or "").strip().lower()
        if answer not in LABELS:
            raise BadRow("bad field", f"answer {raw.get('answer')!r} is not yes/no")
        return self.question_item(raw, item_id, folder, path, answer, categories=category_labels(raw, (SPLIT_KEY,)))

    def extract(self, completion: str, item: Item) -> YesNo:
        return pope_answer(completion)

    def credit(self, prediction: YesNo, item: Item) -> float:
        return float(prediction == item.answer)

    def aggregate(self, scored: Sequence[Scored]) -> dict[str, float]:
        """POPE's numbers per split: ``<split>/accuracy``, ``precision``, ``recall``, ``f1``, ``yes_ratio``."""
        by_split = pope_by_split((item.categories.get(SPLIT_KEY, "all"), prediction, item.answer)
                                 for item, prediction, _ in scored)
        return {f"{split}/{name}": value for split, metrics in by_split.items()
                for name, value in dataclasses.asdict(metrics).items() if name != "count"}


BENCHMARKS.add("pope", POPE("pope", "test"))
