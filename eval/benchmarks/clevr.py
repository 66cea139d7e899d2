"""CLEVR (Johnson et al., CVPR 2017) counting questions, ``clevr`` (the val split's questions whose answer is a count).

Files: CLEVR v1.0 as released (``CLEVR_v1.0.zip``): ``questions/CLEVR_<split>_questions.json``
(``{"info": ..., "questions": [{question_index, image_filename, question, answer, program, ...}]}``) and
``images/<split>/*.png``; pass the ``CLEVR_v1.0`` folder. A question counts when its answer is a whole
number and its program (where given) ends in ``count``; every other question (yes/no, attribute,
comparison) is skipped as ``not a counting question``.

Prompt and reading: R1-V's counting evaluation (:class:`eval.benchmarks.counts.R1VCount`); CLEVR publishes
no generative protocol. Results: accuracy (exact count).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks.base import BENCHMARKS, Item
from eval.benchmarks.counts import R1VCount
from mmgrpo.skipped_rows import SkippedRow

NOT_COUNTING = "not a counting question"


def last_function(program: Any) -> str | None:
    """The function of a CLEVR program's last step (``function`` in v1.0, ``type`` in later releases)."""
    if not program:
        return None
    step = program[-1]
    return step.get("function") or step.get("type")


class CLEVR(R1VCount):
    id_column = "question_index"
    layout = ("CLEVR v1.0: questions/CLEVR_<split>_questions.json + images/<split>/*.png; "
              "pass the CLEVR_v1.0 folder")

    def read(self, path: str, split: str) -> tuple[list[Item], list[SkippedRow]]:
        root = Path(path).expanduser()
        questions = root / "questions" / f"CLEVR_{split}_questions.json"
        if not questions.is_file():
            raise FileNotFoundError(f"{questions} not found (expected: {self.layout})")
        rows = json.loads(questions.read_text())["questions"]
        return self.read_rows(rows, root / "images" / split, str(questions))

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        answer, function = str(raw.get("answer", "")), last_function(raw.get("program"))
        if not answer.isdigit() or function not in (None, "count"):
            raise BadRow(NOT_COUNTING, f"answer {answer!r}, program ends in {function!r}")
        return self.count_item(raw, item_id, folder, path, question=str(raw.get("question") or ""), count=answer,
                               image_column="image_filename")


BENCHMARKS.add("clevr", CLEVR("clevr", "val"))
