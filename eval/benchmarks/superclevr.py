"""SuperCLEVR counting (Li et al., CVPR 2023), ``superclevr``: the 200 questions R1-V evaluates out of domain.

Files: R1-V's ``src/eval/prompts/superclevr_test200_counting_problems.jsonl`` (``image_path``, ``question``,
``ground_truth`` an int) and the SuperCLEVR images it names (``image_path`` relative to the jsonl's
folder, or absolute); pass the jsonl. No id column: the line number is the id.

Prompt and reading: R1-V's (:class:`eval.benchmarks.counts.R1VCount`). Results: accuracy (exact count).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.counts import R1VCount


class SuperCLEVR(R1VCount):
    id_column = None
    layout = "R1-V superclevr_test200_counting_problems.jsonl + the images it names; pass the jsonl"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        return self.count_item(raw, item_id, folder, path, question=str(raw.get("question") or ""),
                               count=raw.get("ground_truth"), image_column="image_path")


BENCHMARKS.add("superclevr", SuperCLEVR("superclevr", "test"))
