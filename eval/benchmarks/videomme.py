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
and the subtitles go first, the instruction unchanged (the README's subtitled example says "based on the
video.", as every version of it has). The subtitles
are, as the authors use them, those on screen at the frames the model samples (under its video budget:
:meth:`VideoMME.for_model`; every line of the ``.srt`` when no model is known, e.g. ``--predictions``),
markup removed; "No subtitles available" for a video without a subtitle file.
Reading: the ``eval_your_results.py`` Video-MME's README links (:func:`eval.scoring.choice.videomme_choice`).
Results: accuracy over every question (an unanswered one -- no capital A-D -- is wrong, noted
``unanswered``), per duration, domain and task type; and the published script's own accuracy, over the
answered questions only, as ``official_accuracy`` overall and ``official_accuracy/<key>/<label>`` (0 where
none was answered, as the script gives).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

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
from processors.budgets import VideoBudget
from processors.sizing import sample_frame_count, sample_frame_indices
from processors.video_backends import VIDEO_BACKENDS, default_video_backend
from tasks.base import ModelInfo

INSTRUCTION = ("Select the best answer to the following multiple-choice question based on the video. "
               "Respond with only the letter (A, B, C, or D) of the correct option.")
SUBTITLES_HEADER = "This video's subtitles are listed below:"
NO_SUBTITLES = "No subtitles available"
ANSWER_CUE = "The best answer is:"
CATEGORY_KEYS = ("duration", "domain", "task_type")
VIDEO_SUFFIXES = (".mp4", ".MP4", ".mkv")  # the release holds a few videos in other containers
UNANSWERED = "unanswered"
_SRT_TIMING = re.compile(r"^\s*\d+:\d+:\d+[,.]\d+\s*-->")
_MARKUP = re.compile(r"<[^>]+>")


class Cue(NamedTuple):
    """One subtitle: shown from ``start`` to ``end`` (seconds)."""

    start: float
    end: float
    text: str


def read_cues(path: Path) -> tuple[Cue, ...] | None:
    """The cues of an ``.srt`` file (font markup removed, lines of a cue joined by spaces); None without a file."""
    if not path.is_file():
        return None
    cues = []
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace").strip()):
        lines = block.strip().splitlines()
        timing = next((n for n, line in enumerate(lines) if _SRT_TIMING.match(line)), None)
        if timing is None:
            continue
        start, end = (_seconds(part) for part in lines[timing].split("-->"))
        text = " ".join(_MARKUP.sub("", line).strip() for line in lines[timing + 1:]).strip()
        if text:
            cues.append(Cue(start, end, text))
    return tuple(cues)


def _seconds(stamp: str) -> float:
    hours, minutes, seconds = stamp.strip().replace(",", ".").split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


@functools.lru_cache(maxsize=4096)
def video_timing(path: str) -> tuple[int, float]:
    """``(total frames, frames per second)`` of a video, as the default decoding back end reads them (once per
    video: three questions share each)."""
    decoded = VIDEO_BACKENDS.get(default_video_backend())(Path(path), lambda total, fps: [0])
    return decoded.total_frames, decoded.source_fps


def subtitles_at_frames(cues: Sequence[Cue], timing: tuple[int, float], budget: VideoBudget | None) -> str:
    """The cues on screen at the frames sampled under ``budget`` (every cue when None), in order, one per line.

    A cue covers frames ``int(start x fps)`` up to, not including, ``int(end x fps)`` (lmms-eval's rule
    for the authors' "subtitles corresponding to the sampled frames")."""
    if budget is not None:
        total, fps = timing
        frames = sample_frame_indices(total, sample_frame_count(total, fps, budget))
        cues = [cue for cue in cues if any(int(cue.start * fps) <= frame < int(cue.end * fps) for frame in frames)]
    return "\n".join(cue.text for cue in cues)


class VideoMME(Benchmark):
    id_column = "question_id"
    max_new_tokens = 16
    layout = ("Hub lmms-lab/Video-MME: videomme/test-*.parquet, data/<videoID>.mp4, subtitle/<videoID>.srt; "
              "pass the folder")

    def __init__(self, name: str, split: str, *, subtitles: bool) -> None:
        super().__init__(name, split)
        self.subtitles = subtitles
        self.frames: VideoBudget | None = None
        """The budget the evaluated model samples frames under (None: no model, every subtitle is shown)."""

    def for_model(self, model: ModelInfo) -> VideoMME:
        if not self.subtitles:
            return self
        asked = copy.copy(self)
        asked.frames = model.video_budget
        return asked

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        root = folder or Path(path)
        video_id = str(raw.get("videoID") or "")
        options = [str(option) for option in raw.get("options") or []]
        if not video_id or not options:
            raise BadRow("missing field", "'videoID'" if not video_id else "'options'")
        video = files.video(root / "data", video_id, VIDEO_SUFFIXES)
        fields = {"options": options}
        if self.subtitles:
            fields["cues"] = read_cues(root / "subtitle" / f"{video_id}.srt")
            fields["timing"] = video_timing(video)
        answer = str(raw.get("answer") or "").strip() or None
        return Item(item_id, str(raw.get("question") or "").strip(), (), (video,), answer, fields,
                    category_labels(raw, CATEGORY_KEYS), videos=(video,))

    def task_question(self, item: Item) -> str:
        return "\n".join([item.question, *item.fields["options"]])

    def official_prompt(self, item: Item) -> str:
        prompt = f"{INSTRUCTION}\n{self.task_question(item)}\n{ANSWER_CUE}"
        if not self.subtitles:
            return prompt
        cues = item.fields["cues"]
        text = NO_SUBTITLES if cues is None else subtitles_at_frames(cues, item.fields["timing"], self.frames)
        return f"{SUBTITLES_HEADER}\n{text}\n{prompt}"

    def extract(self, completion: str, item: Item) -> str | None:
        return videomme_choice(completion)

    def score(self, extracted: str | None, item: Item) -> Verdict:
        correct = None if item.answer is None else extracted == item.answer
        return Verdict(extracted, extracted, correct, "" if extracted is not None else UNANSWERED)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction

    def aggregate(self, scored: Sequence[Scored]) -> dict[str, float]:
        """``official_accuracy`` (and per category): ``eval_your_results.py``'s accuracy over answered questions,
        0 for a group with none answered (the script's ``if total_answered > 0 else 0``)."""
        summary = summarize(((None if prediction is None else metric, item.categories)
                             for item, prediction, metric in scored), CATEGORY_KEYS)
        by = {f"official_accuracy/{key}/{label}": _zero_if_nan(value) for key, labels in summary.by.items()
              for label, value in labels.items()}
        return {"official_accuracy": _zero_if_nan(summary.overall), "answered": float(summary.answered)} | by


def _zero_if_nan(accuracy: float) -> float:
    """An accuracy over no answered question (NaN in :func:`summarize`) as ``eval_your_results.py`` gives it: 0."""
    return 0.0 if math.isnan(accuracy) else accuracy


BENCHMARKS.add("videomme", VideoMME("videomme", "test", subtitles=False))
BENCHMARKS.add("videomme_w_subtitle", VideoMME("videomme_w_subtitle", "test", subtitles=True))
