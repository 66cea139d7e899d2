"""AI2D (Kembhavi et al., ECCV 2016): science-diagram multiple choice, ``ai2d`` (3,088 test questions).

Files: the Hub dataset ``lmms-lab/ai2d``, ``data/test-*.parquet``: ``question``, ``options`` (a list),
``answer`` (the right option's index, as a string), ``image`` (bytes); no id column (the row number is the id).

Prompt: lmms-eval's ``ai2d`` task (its default ``mcq`` format): the question, the options as ``A. text``
lines, "Answer with the option's letter from the given choices directly."
Reading: VLMEvalKit's exact matching (:func:`eval.scoring.choice.vlmevalkit_choice`).
Results: accuracy over all questions (AI2D reports no categories).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.lettered import LetterChoice, answer_letter, row_options
from eval.scoring.choice import vlmevalkit_choice


class AI2D(LetterChoice):
    id_column = None
    max_new_tokens = 16
    layout = "Hub lmms-lab/ai2d: data/test-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        options = row_options(raw, "options")
        images, refs = files.images(raw, ("image",), folder, item_id=item_id, file_label=str(path))
        answer = answer_letter(raw.get("answer"), options)
        return Item(item_id, str(raw.get("question") or ""), images, refs, answer, {"options": options})

    def read_letter(self, completion: str, item: Item) -> str | None:
        return vlmevalkit_choice(completion, item.fields["options"])


BENCHMARKS.add("ai2d", AI2D("ai2d", "test"))
