"""``clevr_count``: how many objects (of some kind) does the image show? Answer: an integer.

Rows: ``id``, ``problem`` ("How many red cubes are there?"), ``answer`` (int, ``"3"`` or
the CLEVR-70k ``"<answer> 3 </answer>"``), ``image``. Grading rules: :mod:`tasks.counting`.
"""

from __future__ import annotations

from tasks.counting import CountingTask
from tasks.registry import register_task


@register_task("clevr_count")
class ClevrCountTask(CountingTask):
    required_media = "image"
