"""DocVQA (Mathew et al., WACV 2021): questions about document pages, ``docvqa_val`` (5,349 questions).

Files: the Hub dataset ``lmms-lab/DocVQA``, config folder ``DocVQA/validation-*.parquet``: ``questionId``,
``question``, ``question_types`` (a list: ``handwritten``, ``table/list``, ``form`` ...), ``answers``
(a list), ``image`` (bytes), ``docId``, ``ucsf_document_id``, ``ucsf_document_page_no``, ``data_split``.

Prompt: lmms-eval's ``docvqa_val`` task: the question, then "Answer the question using a single word or
phrase." Scoring: ANLS (:func:`eval.scoring.anls.anls`, the Robust Reading Competition's script) of the
completion as it is against the answers: partial credit, 0 below a similarity of 0.5.
Results: mean ANLS overall and per question type (a question counts under each of its types), as the
competition's leaderboard reports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import BENCHMARKS, Item, category_labels
from eval.benchmarks.short_answer import ShortAnswer
from eval.scoring.anls import anls


class DocVQA(ShortAnswer):
    id_column = "questionId"
    max_new_tokens = 32
    layout = "Hub lmms-lab/DocVQA: DocVQA/validation-*.parquet (image bytes); pass the DocVQA folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answers = [str(answer) for answer in raw.get("answers") or []]
        if not answers:
            raise BadRow("missing field", "'answers'")
        return self.question_item(raw, item_id, folder, path, answers,
                                  categories=category_labels(raw, ("question_types",)))

    def credit(self, prediction: str, item: Item) -> float:
        return anls(prediction, item.answer)


BENCHMARKS.add("docvqa_val", DocVQA("docvqa_val", "validation"))
