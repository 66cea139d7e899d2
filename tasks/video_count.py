"""``video_count``: how many objects or events does the clip show? Answer: an integer.

Rows: ``id``, ``problem``, ``answer`` (int or ``"3"``), ``video``. Grading rules:
:mod:`tasks.counting`.
"""

from __future__ import annotations

from tasks.counting import CountingTask
from tasks.registry import register_task


@register_task("video_count")
class VideoCountTask(CountingTask):
    required_media = "video"
