"""ChartQA (Masry et al., ACL Findings 2022): questions about charts, ``chartqa`` (2,500 test questions:
1,250 written by people, 1,250 generated).

Files: the Hub dataset ``lmms-lab/ChartQA``, ``data/test-*.parquet``: ``type`` (``human_test`` /
``augmented_test``), ``question``, ``answer``, ``image`` (bytes); no id column (the row number is the id).

Prompt: lmms-eval's ``chartqa`` task: the question, then "Answer the question with a single word."
Scoring: relaxed accuracy (:func:`eval.scoring.relaxed.relaxed_correctness`, pix2struct's rule: numbers
within 5%, anything else exact after lower-casing) on the completion as it is.
Results: overall and per ``type`` (the paper's human and augmented splits).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.benchmarks.base import BENCHMARKS, Item, category_labels, hidden
from eval.benchmarks.short_answer import ShortAnswer
from eval.scoring.relaxed import relaxed_correctness


class ChartQA(ShortAnswer):
    id_column = None
    max_new_tokens = 16
    instruction = "\nAnswer the question with a single word."
    layout = "Hub lmms-lab/ChartQA: data/test-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answer = None if hidden(raw.get("answer")) else str(raw["answer"])
        return self.question_item(raw, item_id, folder, path, answer, categories=category_labels(raw, ("type",)))

    def credit(self, prediction: str, item: Item) -> float:
        return float(relaxed_correctness(prediction, item.answer))


BENCHMARKS.add("chartqa", ChartQA("chartqa", "test"))
