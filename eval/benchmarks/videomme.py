"""Video-MME (Fu et al., CVPR 2025): 2,700 four-option questions on 900 videos, ``videomme`` (frames only)
and ``videomme_w_subtitle`` (frames and subtitles).

Files: the Hub dataset ``lmms-lab/Video-MME``: ``videomme/test-*.parquet`` (``video_id``, ``duration``
(short/medium/long), ``domain``, ``sub_category``, ``url``, ``videoID``, ``question_id``, ``task_type``,
``question``, ``options`` (``"A. ..."`` strings), ``answer`` (a letter)); the videos of its
``videos_chunked_*.zip`` as ``data/<videoID>.mp4`` and the subtitles of ``subtitle.zip`` as
``subtitle/<videoID>.srt``; pass the folder holding all three.

Prompt: Video-MME's own (its README): "Select the best answer to the following multiple-choice question based
on the video. Respond with only the letter (A, B, C, or D) of the correct option.", the question, the
options on their own lines, "The best answer is:"; with subtitles, "This video's subtitles are listed below:"
and the subtitle text go first and the instruction says "based on the video and the subtitles". The
subtitle text is every line of the video's ``.srt`` (markup removed; "No subtitles available" without one).
Reading: ``eval_your_results.py`` (:func:`eval.scoring.choice.videomme_choice`).
Results: accuracy over every question (an unanswered one -- no capital A-D -- is wrong, noted
``unanswered``), per duration, domain and task type; and the published script's own accuracy, over the
answered questions only, as ``official_accuracy`` overall and ``official_accuracy/<key>/<label>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import (
    BENCHMARKS,
    Benchmark,
    Item,
    Scored,
    Verdict,
    category_labels,
)
from eval.scoring.aggregate import summarize
from eval.scoring.choice import videomme_choice

INSTRUCTION = ("Select the best answer to the following multiple-choice question based on the video{subtitles}. "
               "Respond with only the letter (A, B, C, or D) of the correct option.")
SUBTITLES_HEADER = "This video's subtitles are listed below:"
NO_SUBTITLES = "No subtitles available"
ANSWER_CUE = "The best answer is:"
CATEGORY_KEYS = ("duration", "domain", "task_type")
VIDEO_SUFFIXES = (".mp4", ".MP4", ".mkv")  # the release holds a few videos in other containers
UNANSWERED = "unanswered"
_SRT_TIMING = re.compile(r"^\d+:\d+:\d+[,.]\d+\s*-->")
_MARKUP = re.compile(r"<[^>]+>")


def subtitle_text(path: Path) -> str:
    """The spoken lines of an ``.srt`` file, one per line, without cue numbers, timings and font markup;
    ``NO_SUBTITLES`` when the video has no subtitle file."""
    if not path.is_file():
        return NO_SUBTITLES
    lines = (_MARKUP.sub("", line).strip() for line in path.read_text(encoding="utf-8", errors="replace").splitlines())
    return "\n".join(line for line in lines if line and not line.isdigit() and not _SRT_TIMING.match(line))


class VideoMME(Benchmark):
    id_column = "question_id"
    max_new_tokens = 16
    layout = ("Hub lmms-lab/Video-MME: videomme/test-*.parquet, data/<videoID>.mp4, subtitle/<videoID>.srt; "
              "pass the folder")

    def __init__(self, name: str, split: str, *, subtitles: bool) -> None:
        super().__init__(name, split)
        self.subtitles = subtitles

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        root = folder or Path(path)
        video_id = str(raw.get("videoID") or "")
        options = [str(option) for option in raw.get("options") or []]
        if not video_id or not options:
            raise BadRow("missing field", "'videoID'" if not video_id else "'options'")
        video = files.video(root / "data", video_id, VIDEO_SUFFIXES)
        fields = {"options": options}
        if self.subtitles:
            fields["subtitles"] = subtitle_text(root / "subtitle" / f"{video_id}.srt")
        answer = str(raw.get("answer") or "").strip() or None
        return Item(item_id, str(raw.get("question") or "").strip(), (), (video,), answer, fields,
                    category_labels(raw, CATEGORY_KEYS), videos=(video,))

    def task_question(self, item: Item) -> str:
        return "\n".join([item.question, *item.fields["options"]])

    def official_prompt(self, item: Item) -> str:
        instruction = INSTRUCTION.format(subtitles=" and the subtitles" if self.subtitles else "")
        prompt = f"{instruction}\n{self.task_question(item)}\n{ANSWER_CUE}"
        return f"{SUBTITLES_HEADER}\n{item.fields['subtitles']}\n{prompt}" if self.subtitles else prompt

    def extract(self, completion: str, item: Item) -> str | None:
        return videomme_choice(completion)

    def score(self, extracted: str | None, item: Item) -> Verdict:
        correct = None if item.answer is None else extracted == item.answer
        return Verdict(extracted, extracted, correct, "" if extracted is not None else UNANSWERED)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction

    def aggregate(self, scored: Sequence[Scored]) -> dict[str, float]:
        """``official_accuracy`` (and per category): ``eval_your_results.py``'s accuracy over answered questions."""
        summary = summarize(((None if prediction is None else metric, item.categories)
                             for item, prediction, metric in scored), CATEGORY_KEYS)
        by = {f"official_accuracy/{key}/{label}": value for key, labels in summary.by.items()
              for label, value in labels.items()}
        return {"official_accuracy": summary.overall, "answered": float(summary.answered)} | by


BENCHMARKS.add("videomme", VideoMME("videomme", "test", subtitles=False))
BENCHMARKS.add("videomme_w_subtitle", VideoMME("videomme_w_subtitle", "test", subtitles=True))
