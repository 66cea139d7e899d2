"""RefCOCO, RefCOCO+ (Yu et al., ECCV 2016) and RefCOCOg (Mao et al., CVPR 2016): referring-expression
grounding, one box per expression, right when its IoU with the annotated box is at least 0.5.

Files: the Hub datasets ``lmms-lab/RefCOCO`` (splits ``val``, ``test``, ``testA``, ``testB``),
``lmms-lab/RefCOCOplus`` (``val``, ``testA``, ``testB``) and ``lmms-lab/RefCOCOg`` (``val``, ``test``),
``data/<split>-*.parquet``: ``question_id`` (the annotation), ``image`` (bytes, the COCO image),
``question``, ``answer`` (the referring expressions of the object, a list), ``segmentation``, ``bbox``
(``[x, y, width, height]`` in COCO pixels), ``iscrowd``, ``file_name``. Each expression is one question,
as lmms-eval asks them: the k-th expression of an annotation is ``<question_id>#<k>`` (k >= 2).

Prompt: "Please provide the bounding box coordinate of the region this sentence describes: <expression>."
(the sentence of VLM-R1's and lmms-eval's grounding evaluations, without lmms-eval's request for 0-1
coordinates: each model family answers in its own coordinates).
Reading and scoring (:mod:`eval.scoring.boxes`): the first box in the model family's notation -- Qwen2.5-VL
``[x1, y1, x2, y2]`` in pixels of the image as resized for the model, Qwen2-VL ``(x1,y1),(x2,y2)`` on a
0-1000 grid -- mapped to the original image's pixels, a hit at IoU >= 0.5. The family and image budget come
from the model evaluated (:meth:`RefCOCO.for_model`); saved completions are read in the convention of the model
``eval.predictions_model`` (``--predictions-model``) names, else as Qwen2.5-VL's at the default image budget.
Results: accuracy per split (one benchmark name per split).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, Verdict
from eval.benchmarks.lettered import UNREAD
from eval.scoring.boxes import (
    box_in_original_pixels,
    coco_box,
    first_box,
    grounding_hit,
)
from mmgrpo.skipped_rows import SkippedRow
from processors.image import budget_size, decode_image
from tasks.base import ModelInfo

PROMPT = "Please provide the bounding box coordinate of the region this sentence describes: {expression}."
EXPRESSION = "expression"  # one of the row's referring expressions (its ``answer`` list), asked on its own
FAMILIES = ("qwen2_5_vl", "qwen2_vl")
DEFAULT_MODEL = ModelInfo(family="qwen2_5_vl")


class RefCOCO(Benchmark):
    id_column = "question_id"
    max_new_tokens = 128
    layout = ("Hub lmms-lab/RefCOCO, lmms-lab/RefCOCOplus or lmms-lab/RefCOCOg: data/<split>-*.parquet "
              "(image bytes); pass the folder")

    def __init__(self, name: str, split: str) -> None:
        super().__init__(name, split)
        self.model = DEFAULT_MODEL

    def for_model(self, model: ModelInfo) -> RefCOCO:
        if model.family not in FAMILIES:
            raise ValueError(f"{self.name}: no box convention for model family {model.family!r}; known: {FAMILIES}")
        scored = copy.copy(self)
        scored.model = model
        return scored

    def read(self, path: str, split: str) -> tuple[list[Item], list[SkippedRow]]:
        rows, folder = files.records(path, split)
        asked = ({**raw, EXPRESSION: expression} for raw in rows for expression in (raw.get("answer") or [None]))
        return self.read_rows(asked, folder, path)

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        expression = str(raw.get(EXPRESSION) or "").strip()
        if not expression:
            raise BadRow("missing field", "no referring expression in 'answer'")
        bbox = raw.get("bbox")
        if bbox is None or len(bbox) != 4 or bbox[2] <= 0 or bbox[3] <= 0:
            raise BadRow("bad field", f"bbox {bbox!r} is not [x, y, width, height]")
        images, refs = files.images(raw, ("image",), folder, item_id=item_id, file_label=str(path))
        size = decode_image(images[0], refs[0]).size
        return Item(item_id, expression, images, refs, [float(value) for value in coco_box(tuple(bbox))],
                    {"image_size": size})

    def official_prompt(self, item: Item) -> str:
        return PROMPT.format(expression=item.question)

    def task_question(self, item: Item) -> str:
        return self.official_prompt(item)

    def extract(self, completion: str, item: Item) -> tuple[float, ...] | None:
        return first_box(completion, self.model.family)

    def score(self, extracted: tuple[float, ...] | None, item: Item) -> Verdict:
        if extracted is None:
            return Verdict(None, None, False, UNREAD)
        size = item.fields["image_size"]
        box = box_in_original_pixels(extracted, self.model.family, size, budget_size(size, self.model.image_budget))
        return Verdict(list(extracted), [round(value, 2) for value in box], grounding_hit(box, tuple(item.answer)))

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction


for _split in ("val", "test", "testA", "testB"):
    BENCHMARKS.add(f"refcoco_{_split}", RefCOCO(f"refcoco_{_split}", _split))
for _split in ("val", "testA", "testB"):
    BENCHMARKS.add(f"refcoco+_{_split}", RefCOCO(f"refcoco+_{_split}", _split))
for _split in ("val", "test"):
    BENCHMARKS.add(f"refcocog_{_split}", RefCOCO(f"refcocog_{_split}", _split))
