"""``audio_count``: how many sounds (e.g. beeps) does the clip play? Answer: an integer.

Rows: ``id``, ``problem``, ``answer`` (int or ``"3"``), ``audio``. Grading rules:
:mod:`tasks.counting`.
"""

from __future__ import annotations

from tasks.counting import CountingTask
from tasks.registry import register_task


@register_task("audio_count")
class AudioCountTask(CountingTask):
    required_media = "audio"
