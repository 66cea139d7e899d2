"""CountBench (Paiss et al., ICCV 2023) as CountBenchQA, ``countbench`` (491 images still online, 2 to 10 objects).

Files: the Hub dataset ``vikhyatk/CountBenchQA``, ``data/test-*.parquet``: ``image`` (bytes), ``text`` (the
LAION caption), ``question``, ``number`` (the count); no id column (the row number is the id).

Prompt: lmms-eval's ``countbench`` task: "Look at the image carefully and count the objects. Answer with just
a number, without any additional text. " then the question. Reading: the same task's rule
(:func:`eval.scoring.counting.count_answer`: the whole answer, stripped and lower-cased, as digits or a number
word up to twenty); the paper publishes no scorer for generated text. Results: accuracy (exact count).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.counts import CountQuestion
from eval.scoring.counting import count_answer

COUNT_INSTRUCTION = ("Look at the image carefully and count the objects. "
                     "Answer with just a number, without any additional text. ")


class CountBench(CountQuestion):
    id_column = None
    max_new_tokens = 16
    layout = "Hub vikhyatk/CountBenchQA: data/test-*.parquet (image bytes); pass the folder"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        return self.count_item(raw, item_id, folder, path, question=str(raw.get("question") or ""),
                               count=raw.get("number"), image_column="image")

    def official_prompt(self, item: Item) -> str:
        return f"{COUNT_INSTRUCTION}{item.question}"

    def read_count(self, completion: str) -> int | None:
        return count_answer(completion)


BENCHMARKS.add("countbench", CountBench("countbench", "test"))
