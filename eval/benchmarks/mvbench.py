"""MVBench (Li et al., CVPR 2024): 4,000 multiple-choice questions on short videos, 200 in each of 20
temporal tasks, ``mvbench``.

Files: the Hub dataset ``OpenGVLab/MVBench``: ``json/<task>.json`` (a list of ``{video, question, candidates,
answer}``, ``answer`` the right candidate's text; ``start``/``end`` seconds for the tasks with a bound) and
the videos of ``video/*.zip`` unpacked under ``video/`` (``video/star/Charades_v1_480/...``, a folder of frames
per clip for episodic reasoning); pass the folder holding ``json`` and ``video``. Tasks whose json file is
absent are not read. Ids: ``<task>/<row number>``.

The task -> video folder, data type and bound flag are those of MVBench's own evaluation
(``video_chat2/mvbench.ipynb``, :data:`TASKS`). A question of a task the notebook bounds (action sequence,
action prediction, object interaction, action localization, episodic reasoning) is shown only the frames
between its ``start`` and ``end``, as there (other tasks ignore a row's ``start``/``end``, as the notebook
does): a video clip as a
:class:`~processors.sources.VideoSpan` of its file, the frames sampled inside the window under the model's
budget; a frame clip (episodic reasoning, 3 frames per second, files numbered from 1) as the frames inside
it, picked here because the loader plays a frame list at the budget's rate, not the clip's. Its media
reference then ends in the window, ``#t=<start>,<end>``.

Prompt: as the notebook runs it (``system_llm=True``): its system text is the system message and also opens
the user turn, then ``Question: <question>``, ``Options:``, one ``(A) candidate`` line each, "Only give the best
option.", and the notebook's answer prefix "Best option:(" (which it writes at the start of the model's turn:
the engines here do not prefill, so it ends the user turn).
Reading: the notebook's ``answer()`` post-processing (text before "###", after the last "Assistant:"), then
``check_ans`` on "(" plus the reply's first line (:func:`eval.scoring.choice.mvbench_prediction`,
:func:`eval.scoring.choice.mvbench_correct`). The right option is the last candidate equal to the answer; a row
whose answer is no candidate is kept, as there, with the option ``(@)`` that only an empty reply matches
(:func:`eval.scoring.choice.mvbench_gold`).
Results: accuracy overall (over all questions, as the notebook's average) and per task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, Verdict
from eval.scoring.choice import (
    mvbench_answer,
    mvbench_correct,
    mvbench_gold,
    mvbench_prediction,
    option_letters,
)
from mmgrpo.skipped_rows import SkippedRow
from processors.sources import VideoSpan


class Subtask(NamedTuple):
    """One MVBench task: its name in results, the video folder under ``video/``, how clips are stored, whether
    its questions are bounded."""

    label: str
    folder: str
    frames: bool = False
    """A clip is a folder of frames at :data:`FRAME_FPS` (else a video file)."""
    bound: bool = False
    """The notebook shows a question only its ``start``-``end`` window (its ``data_list`` flag)."""


TASKS: dict[str, Subtask] = {
    "action_sequence": Subtask("Action Sequence", "star/Charades_v1_480", bound=True),
    "action_prediction": Subtask("Action Prediction", "star/Charades_v1_480", bound=True),
    "action_antonym": Subtask("Action Antonym", "ssv2_video"),
    "fine_grained_action": Subtask("Fine-grained Action", "Moments_in_Time_Raw/videos"),
    "unexpected_action": Subtask("Unexpected Action", "FunQA_test/test"),
    "object_existence": Subtask("Object Existence", "clevrer/video_validation"),
    "object_interaction": Subtask("Object Interaction", "star/Charades_v1_480", bound=True),
    "object_shuffle": Subtask("Object Shuffle", "perception/videos"),
    "moving_direction": Subtask("Moving Direction", "clevrer/video_validation"),
    "action_localization": Subtask("Action Localization", "sta/sta_video", bound=True),
    "scene_transition": Subtask("Scene Transition", "scene_qa/video"),
    "action_count": Subtask("Action Count", "perception/videos"),
    "moving_count": Subtask("Moving Count", "clevrer/video_validation"),
    "moving_attribute": Subtask("Moving Attribute", "clevrer/video_validation"),
    "state_change": Subtask("State Change", "perception/videos"),
    "fine_grained_pose": Subtask("Fine-grained Pose", "nturgbd"),
    "character_order": Subtask("Character Order", "perception/videos"),
    "egocentric_navigation": Subtask("Egocentric Navigation", "vlnqa"),
    "episodic_reasoning": Subtask("Episodic Reasoning", "tvqa/frames_fps3_hq", frames=True, bound=True),
    "counterfactual_inference": Subtask("Counterfactual Inference", "clevrer/video_validation"),
}
FRAME_FPS = 3
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png")
SYSTEM = ("Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
          "movement of objects, and the action and pose of persons. Based on your observations, select the best "
          "option that accurately addresses the question.\n")
QUESTION_SUFFIX = "\nOnly give the best option."
ANSWER_PREFIX = "Best option:("
RETURN_PROMPT = "("  # what check_ans puts back in front of the reply: the prefix's last character
TASK_KEY = "task_type"


def clip_frames(folder: Path, bound: tuple[float, float] | None) -> tuple[str, ...]:
    """The frames of a frame clip in order (1-based files at :data:`FRAME_FPS`), those inside ``bound``
    (seconds) when given, as the notebook's ``get_index`` bounds them; ``BadRow`` when none is left."""
    frames = sorted(str(path) for path in folder.iterdir() if path.suffix.lower() in FRAME_SUFFIXES) \
        if folder.is_dir() else []
    if bound is not None:
        first, last = max(1, round(bound[0] * FRAME_FPS)), min(round(bound[1] * FRAME_FPS), len(frames))
        frames = frames[first - 1:last]
    if not frames:
        raise BadRow("missing media", f"no frames in {folder}" + (f" within {bound}" if bound else ""))
    return tuple(frames)


def question_bound(raw: Mapping[str, Any]) -> tuple[float, float] | None:
    """The question's ``(start, end)`` seconds when its row gives them; ``BadRow`` for a window that is not
    one (unreadable, negative, or ending before it starts)."""
    if "start" not in raw or "end" not in raw:
        return None
    try:
        start, end = float(raw["start"]), float(raw["end"])
    except (TypeError, ValueError) as error:
        raise BadRow("bad field", f"start/end {raw['start']!r}, {raw['end']!r} are not seconds") from error
    if not 0 <= start <= end:
        raise BadRow("bad field", f"the window {start} s to {end} s is not one")
    return start, end


class MVBench(Benchmark):
    id_column = "id"
    max_new_tokens = 16
    system = SYSTEM
    layout = "Hub OpenGVLab/MVBench: json/<task>.json + video/<source>/...; pass the folder"

    def read(self, path: str, split: str) -> tuple[list[Item], list[SkippedRow]]:
        root = Path(path).expanduser()
        present = [name for name in TASKS if (root / "json" / f"{name}.json").is_file()]
        if not present:
            raise FileNotFoundError(f"no MVBench task files under {root / 'json'} (expected: {self.layout})")
        items, skipped = [], []
        for name in present:
            rows = json.loads((root / "json" / f"{name}.json").read_text())
            asked = ({**row, "id": f"{name}/{number}", TASK_KEY: name} for number, row in enumerate(rows))
            part_items, part_skipped = self.read_rows(asked, root / "video" / TASKS[name].folder, path)
            items += part_items
            skipped += part_skipped
        return items, skipped

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        task, candidates = TASKS[raw[TASK_KEY]], [str(c) for c in raw.get("candidates") or []]
        answer = str(raw.get("answer", ""))
        if folder is None or not raw.get("video"):
            raise BadRow("missing field", "'video'")
        bound = question_bound(raw) if task.bound else None
        named = str(folder / raw["video"])
        if task.frames:
            clip: str | tuple[str, ...] | VideoSpan = clip_frames(folder / raw["video"], bound)
        else:
            path = files.video(folder, str(raw["video"]))
            clip = path if bound is None else VideoSpan(path, *bound)
        options = dict(zip(option_letters(len(candidates)), candidates))
        letter = mvbench_gold(candidates, answer)
        fields = {"options": options, "gold": mvbench_answer(letter, answer)}
        ref = named if bound is None else str(VideoSpan(named, *bound))
        return Item(item_id, str(raw.get("question") or "").strip(), (), (ref,), letter, fields,
                    {TASK_KEY: task.label}, videos=(clip,))

    def task_question(self, item: Item) -> str:
        options = "\n".join(f"({letter}) {text}" for letter, text in item.fields["options"].items())
        return f"Question: {item.question}\nOptions:\n{options}"

    def official_prompt(self, item: Item) -> str:
        """The notebook's user turn under ``system_llm=True``: the system text, the question, the cue and prefix."""
        return f"{SYSTEM}{self.task_question(item)}{QUESTION_SUFFIX}\n{ANSWER_PREFIX}"

    def extract(self, completion: str, item: Item) -> str:
        return mvbench_prediction(completion, RETURN_PROMPT)

    def score(self, extracted: str, item: Item) -> Verdict:
        return Verdict(extracted, extracted, mvbench_correct(extracted, item.fields["gold"]))

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, verdict.prediction


BENCHMARKS.add("mvbench", MVBench("mvbench", "test"))
