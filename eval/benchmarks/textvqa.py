"""TextVQA (Singh et al., CVPR 2019): questions that need reading text in photos, ``textvqa_val``
(5,000 questions, 10 human answers each).

Files: the Hub dataset ``lmms-lab/textvqa``, ``data/validation-*.parquet``: ``question_id``, ``question``,
``answers`` (10), ``image`` (bytes), ``image_id``, ``ocr_tokens``, ``image_classes``, ``set_name`` ...

Prompt: lmms-eval's ``textvqa_val`` task (default, no OCR tokens): the question with its first letter
capitalised and the rest lower-cased (Python's ``str.capitalize``, as lmms-eval does), then "Answer the
question using a single word or phrase."
Scoring: VQA accuracy (:func:`eval.scoring.vqa.vqa_accuracy`, mmf's TextVQA evaluator: EvalAI
normalisation, the mean over leave-one-out subsets of min(1, matches / 3)) of the completion as it is.
Results: mean accuracy over all questions (TextVQA reports no categories).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.short_answer import ShortAnswer
from eval.scoring.vqa import vqa_accuracy


class TextVQA(ShortAnswer):
    id_column = "question_id"
    max_new_tokens = 128  # lmms-eval sets none for TextVQA: its models' default
    layout = "Hub lmms-lab/textvqa: data/validation-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answers = [str(answer) for answer in raw.get("answers") or []]
        if not answers:
            raise BadRow("missing field", "'answers'")
        return self.question_item(raw, item_id, folder, path, answers)

    def official_prompt(self, item: Item) -> str:
        return f"{item.question.capitalize()}{self.instruction}"

    def credit(self, prediction: str, item: Item) -> float:
        return vqa_accuracy(prediction, item.answer)


BENCHMARKS.add("textvqa_val", TextVQA("textvqa_val", "validation"))
