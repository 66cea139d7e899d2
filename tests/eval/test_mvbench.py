"""MVBench from its Hub files: per-task json + video folders, the notebook's prompt, check_ans on "(" plus
the reply's first line, per-task accuracy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.base import Item
from eval.benchmarks.runs import prompt_sample
from mmgrpo.cli import main
from mmgrpo.pagekit.thumbnails import thumbnail
from processors import VideoSpan
from processors.budgets import VideoBudget
from processors.video import load_video
from tests.eval import published, saved_predictions, video_files
from tests.eval.scoring import tables
from tests.eval.scoring.tables import Case

CANDIDATES = tables.MVBENCH_CANDIDATES


def write_task(root: Path, task: str, rows: list[dict]) -> None:
    (root / "json").mkdir(exist_ok=True)
    (root / "json" / f"{task}.json").write_text(json.dumps(rows))


@pytest.fixture(scope="module")
def mvbench_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("MVBench")
    videos = root / "video" / "perception" / "videos"
    videos.mkdir(parents=True)
    (videos / "clip_1.mp4").write_bytes(video_files.clip(1))
    write_task(root, "action_count", [  # one question per right option, A to D
        {"video": "clip_1.mp4", "question": "What is the person doing?", "candidates": CANDIDATES, "answer": answer}
        for answer in CANDIDATES])
    write_task(root, "object_shuffle", [
        {"video": "missing.mp4", "question": "Where is the ball?", "candidates": ["left", "right"], "answer": "left"},
        {"video": "clip_1.mp4", "question": "Where is the ball?", "candidates": ["left", "right"], "answer": "up"}])
    frames = root / "video" / "tvqa" / "frames_fps3_hq" / "s01e01_seg01"
    frames.mkdir(parents=True)
    for number in range(1, 13):  # four seconds at 3 frames per second
        (frames / f"{number:05d}.jpg").write_bytes(published.png(number, 16))
    write_task(root, "episodic_reasoning", [
        {"video": "s01e01_seg01", "question": "Why does he leave?", "candidates": ["He is late.", "He is tired."],
         "answer": "He is tired.", "start": 1.0, "end": 2.5}])
    return root


@pytest.fixture(scope="module")
def read(mvbench_folder):
    return BENCHMARKS.get("mvbench").read(str(mvbench_folder), "test")


@pytest.fixture(scope="module")
def by_id(read) -> dict[str, Item]:
    return {item.id: item for item in read[0]}


def test_tasks_are_read_from_their_json_and_video_folders(mvbench_folder, read):
    items, skipped = read
    assert [(item.id, item.answer, item.categories["task_type"]) for item in items] == [
        ("object_shuffle/1", "@", "Object Shuffle"),  # its answer is no candidate: kept, as the notebook keeps it
        ("action_count/0", "A", "Action Count"), ("action_count/1", "B", "Action Count"),
        ("action_count/2", "C", "Action Count"), ("action_count/3", "D", "Action Count"),
        ("episodic_reasoning/0", "B", "Episodic Reasoning")]
    assert items[1].videos == (str(mvbench_folder / "video" / "perception" / "videos" / "clip_1.mp4"),)
    assert [(row.row_id, row.reason) for row in skipped] == [("object_shuffle/0", "missing media")]


@pytest.mark.parametrize(("completion", "correct"), [("", True), ("A) left", False), ("B) right", False)])
def test_an_answer_among_no_candidates_is_kept_and_only_an_empty_reply_matches(by_id, completion: str, correct: bool):
    """The notebook's ``qa_template`` gives it option "(@) up"; ``check_ans`` then matches only "(" to it."""
    item = by_id["object_shuffle/1"]
    assert item.fields["gold"] == "(@) up"
    assert BENCHMARKS.get("mvbench").judge(completion, item).correct is correct


def test_a_frame_clip_keeps_the_frames_inside_its_bound_and_plays_as_a_video(by_id):
    (frames,) = by_id["episodic_reasoning/0"].videos
    assert [Path(frame).name for frame in frames] == [f"{n:05d}.jpg" for n in range(3, 9)]  # 1.0 s to 2.5 s at 3 fps
    clip = load_video(list(frames), VideoBudget(fps=3.0, max_frames=6))
    assert clip.frames.shape[0] == len(frames)  # the processors take a list of frame files as a clip


def test_the_notebooks_prompt_with_its_system_message(by_id):
    """As the notebook runs (``system_llm=True``): the system text is the system message and opens the user turn."""
    benchmark, item = BENCHMARKS.get("mvbench"), by_id["action_count/0"]
    assert benchmark.official_prompt(item) == benchmark.system + (
        "Question: What is the person doing?\nOptions:\n(A) man cooking\n(B) dancing\n(C) running\n(D) swimming\n"
        "Only give the best option.\nBest option:(")
    sample = prompt_sample(benchmark, item, "official")
    assert sample.messages[0] == {"role": "system", "content": benchmark.system}
    assert sample.media("video") == list(item.videos)
    assert prompt_sample(benchmark, item, "task").messages[0]["role"] == "user"  # the trained format: no system


@pytest.mark.parametrize("case", tables.MVBENCH, ids=[case.why for case in tables.MVBENCH])
def test_replies_are_checked_as_check_ans_after_the_answer_prefix(by_id, case: Case):
    item = by_id[f"action_count/{'ABCD'.index(case.gold)}"]
    assert BENCHMARKS.get("mvbench").judge(case.completion, item).correct is case.verdict


def test_saved_completions_get_per_task_accuracy(mvbench_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "mvbench", mvbench_folder, {
        "action_count/0": "A) man cooking", "action_count/1": "The answer is B", "action_count/2": "C",
        "action_count/3": "", "episodic_reasoning/0": "(B) He is tired."})
    assert [row["metric"] for row in rows] == [1.0, 0.0, 1.0, 1.0, 1.0]  # an empty reply matches any option
    assert rows[0]["parsed_answer"] == "(A) man cooking"
    assert entry["summary"]["mvbench/accuracy"] == pytest.approx(0.8)
    by_task = entry["categories"]["mvbench"]["task_type"]
    assert by_task["Action Count"]["accuracy"] == pytest.approx(0.75) and by_task["Episodic Reasoning"]["n"] == 1


@pytest.mark.parametrize(("completion", "correct"), [("<think>he cooks</think><answer>(A) man cooking</answer>", True),
                                                     ("<answer>A</answer>", True),
                                                     ("<answer>The answer is A</answer>", False)])
def test_the_task_style_checks_the_answer_tags_content(by_id, completion: str, correct: bool):
    assert BENCHMARKS.get("mvbench").judge(completion, by_id["action_count/0"], "task").correct is correct


@pytest.fixture(scope="module")
def bounded_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Action sequence (a task with a bound): one 4 s clip at 2 fps whose colour changes every frame."""
    root = tmp_path_factory.mktemp("MVBenchBounded")
    videos = root / "video" / "star" / "Charades_v1_480"
    videos.mkdir(parents=True)
    (videos / "A1.mp4").write_bytes(video_files.clip(0, frames=8, size=(56, 56)))
    question = {"video": "A1.mp4", "question": "What did he do first?", "candidates": ["sat", "ran"], "answer": "sat"}
    write_task(root, "action_sequence", [{**question, "start": 1.0, "end": 2.5}, question,
                                         {**question, "start": 3.0, "end": 2.0}])
    return root


def test_a_bounded_question_carries_its_window_and_is_shown_only_its_frames(bounded_folder):
    items, skipped = BENCHMARKS.get("mvbench").read(str(bounded_folder), "test")
    path = str(bounded_folder / "video" / "star" / "Charades_v1_480" / "A1.mp4")
    assert [item.videos for item in items] == [(VideoSpan(path, 1.0, 2.5),), (path,)]
    assert [item.media_refs for item in items] == [(f"{path}#t=1.0,2.5",), (path,)]
    assert [(row.row_id, row.reason) for row in skipped] == [("action_sequence/2", "bad field")]
    clip = load_video(items[0].videos[0], VideoBudget(fps=2.0, min_pixels=28 * 28, max_pixels=56 * 56))
    assert clip.frame_indices == [2, 3, 4, 5]  # 1.0 s to 2.5 s at 2 fps
    shown = clip.frames[:, 28, 28, 0].astype(int)  # frame k is red 30 k (H.264 keeps it within a few levels)
    assert np.abs(shown - [30 * index for index in clip.frame_indices]).max() <= 6


def test_a_task_the_notebook_does_not_bound_ignores_start_and_end(tmp_path: Path):
    """Action antonym's ``data_list`` flag is False: a row's ``start``/``end`` change nothing, as in the notebook."""
    videos = tmp_path / "video" / "ssv2_video"
    videos.mkdir(parents=True)
    (videos / "a.mp4").write_bytes(video_files.clip(0))
    write_task(tmp_path, "action_antonym", [{"video": "a.mp4", "question": "What?", "candidates": ["x", "y", "x"],
                                             "answer": "x", "start": 3.0, "end": 2.0}])
    (item,), skipped = BENCHMARKS.get("mvbench").read(str(tmp_path), "test")
    assert item.videos == (str(videos / "a.mp4"),) and not skipped
    assert item.answer == "C" and item.fields["gold"] == "(C) x"  # the last equal candidate, as qa_template


def test_a_model_run_is_shown_the_window(bounded_folder, tiny_qwen25vl, tmp_path):
    """``mmgrpo eval --model M --benchmark mvbench=DIR`` on a tiny model: the bounded question runs, labelled with
    its window, and its report thumbnail shows the window."""
    out = tmp_path / "out"
    assert main(["eval", "--model", str(tiny_qwen25vl), "--benchmark", f"mvbench={bounded_folder}", "--out", str(out),
                 "eval.max_new_tokens=3", "log.progress_bar=false"]) == 0
    (entry,) = json.loads((out / "results.json").read_text())["models"].values()
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    path = str(bounded_folder / "video" / "star" / "Charades_v1_480" / "A1.mp4")
    assert entry["summary"]["mvbench/n"] == 2
    assert [row["media"] for row in rows] == [[f"{path}#t=1.0,2.5"], [path]]
    assert thumbnail("video", rows[0]["media"][0]) is not None
