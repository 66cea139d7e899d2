"""Video-MME from its Hub files: the videos as video parts, its own prompt with and without subtitles,
eval_your_results.py's reading, and its accuracy over answered questions beside the one over all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.benchmarks import BENCHMARKS
from eval.benchmarks.runs import load_benchmark, prompt_sample
from eval.benchmarks.videomme import Cue, subtitles_at_frames
from mmgrpo.cli import main
from mmgrpo.config import BenchmarkConfig
from processors.budgets import VideoBudget
from tasks.base import ModelInfo
from tests.eval import published, saved_predictions
from tests.eval.scoring import tables
from tests.eval.scoring.tables import Case


@pytest.fixture(scope="module")
def videomme_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return published.write_videomme(tmp_path_factory.mktemp("Video-MME"))


def test_items_hold_their_video_and_a_missing_video_is_skipped(videomme_folder):
    items, skipped = BENCHMARKS.get("videomme").read(str(videomme_folder), "test")
    assert [item.id for item in items] == ["001-1", "001-2", "301-1"]
    assert items[0].videos == (str(videomme_folder / "data" / "vidA.mp4"),) and not items[0].images
    assert items[2].videos == (str(videomme_folder / "data" / "vidB.MP4"),)
    assert [(row.row_id, row.reason) for row in skipped] == [("302-1", "missing media")]
    assert dict(items[2].categories) == {"duration": "long", "domain": "Knowledge", "task_type": "Counting Problem"}
    sample = prompt_sample(BENCHMARKS.get("videomme"), items[0], "official")
    assert sample.media("video") == list(items[0].videos) and sample.media("image") == []


def test_the_official_prompts_with_and_without_subtitles(videomme_folder):
    plain = BENCHMARKS.get("videomme")
    items, _ = plain.read(str(videomme_folder), "test")
    assert plain.official_prompt(items[0]) == (
        "Select the best answer to the following multiple-choice question based on the video. Respond with only "
        "the letter (A, B, C, or D) of the correct option.\nWhat is shown first?\nA. A star.\nB. A planet.\n"
        "C. A moon.\nD. A comet.\nThe best answer is:")
    subtitled = BENCHMARKS.get("videomme_w_subtitle")
    items, _ = subtitled.read(str(videomme_folder), "test")
    assert subtitled.official_prompt(items[0]).startswith(  # no model known: every subtitle
        "This video's subtitles are listed below:\nLook at the sky.\nA planet rises.\nAfter the clip.\nSelect the "
        "best answer to the following multiple-choice question based on the video. Respond")  # the README's words
    assert subtitled.official_prompt(items[2]).startswith(
        "This video's subtitles are listed below:\nNo subtitles available\nSelect")


def test_a_model_is_shown_the_subtitles_at_the_frames_it_samples(videomme_folder):
    """The 2 s clip (4 frames at 2 fps) sampled as 2 frames (0 and 3): the cues on screen then, not the one at 10 s."""
    bench = load_benchmark(BenchmarkConfig("videomme_w_subtitle", str(videomme_folder)), "official")
    seen = bench.for_model(ModelInfo(video_budget=VideoBudget(nframes=2)))
    assert "After the clip." in bench.samples[0].user_text()
    assert seen.samples[0].user_text().startswith(
        "This video's subtitles are listed below:\nLook at the sky.\nA planet rises.\nSelect")
    assert [sample.id for sample in seen.samples] == [sample.id for sample in bench.samples]
    plain = load_benchmark(BenchmarkConfig("videomme", str(videomme_folder)), "official")
    assert plain.for_model(ModelInfo()) is plain  # frames only: nothing depends on the model


def test_subtitles_at_frames_follow_each_cues_frame_range():
    cues = [Cue(0.0, 1.0, "one"), Cue(1.0, 1.5, "two"), Cue(3.0, 4.0, "three")]
    assert subtitles_at_frames(cues, (8, 2.0), VideoBudget(nframes=2)) == "one\nthree"  # frames 0 and 7
    assert subtitles_at_frames(cues, (8, 2.0), None) == "one\ntwo\nthree"


@pytest.fixture(scope="module")
def first_item(videomme_folder):
    return BENCHMARKS.get("videomme").read(str(videomme_folder), "test")[0][0]


@pytest.mark.parametrize("case", tables.VIDEOMME, ids=[case.why for case in tables.VIDEOMME])
def test_answers_are_read_as_eval_your_results(first_item, case: Case):
    verdict = BENCHMARKS.get("videomme").judge(case.completion, first_item)
    assert verdict.prediction == case.verdict
    assert verdict.note == ("unanswered" if case.verdict is None else "")


def test_the_official_accuracy_leaves_unanswered_questions_out(videomme_folder, tmp_path):
    entry, rows = saved_predictions.score(tmp_path, "videomme", videomme_folder, {
        "001-1": "B", "001-2": "I cannot tell", "301-1": "Best option: A"})  # B of "Best": wrong, as published
    assert [row["parsed_answer"] for row in rows] == ["B", None, "B"]
    summary = entry["summary"]
    assert summary["videomme/accuracy"] == pytest.approx(1 / 3)  # over every question
    assert summary["videomme/official_accuracy"] == pytest.approx(0.5)  # over the two answered
    assert summary["videomme/official_accuracy/task_type/OCR Problems"] == 0.0  # none answered: 0, as the script
    assert summary["videomme/official_accuracy/duration/long"] == 0.0
    assert entry["categories"]["videomme"]["duration"]["short"]["accuracy"] == pytest.approx(0.5)


def test_a_model_run_sees_the_videos(videomme_folder, tiny_qwen25vl, tmp_path):
    """``mmgrpo eval --model M --benchmark videomme=DIR --limit 2`` on a tiny model: frames reach it end to end."""
    out = tmp_path / "out"
    assert main(["eval", "--model", str(tiny_qwen25vl), "--benchmark", f"videomme={videomme_folder}", "--limit", "2",
                 "--out", str(out), "eval.max_new_tokens=3", "log.progress_bar=false"]) == 0
    (entry,) = json.loads((out / "results.json").read_text())["models"].values()
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert entry["summary"]["videomme/n"] == 2
    assert [row["media"] for row in rows] == [[str(videomme_folder / "data" / "vidA.mp4")]] * 2
    assert all(row["prompt"].endswith("The best answer is:") for row in rows)


@pytest.mark.parametrize(("completion", "letter"), [("<think>a planet</think><answer>B</answer>", "B"),
                                                    ("<answer>Best option: C</answer>", "B"),
                                                    ("I think C", "C")])
def test_the_task_style_reads_inside_the_answer_tags(first_item, completion: str, letter: str):
    """Under the trained prompt the last <answer> is read by the same rule; an untagged reply as it is."""
    assert BENCHMARKS.get("videomme").judge(completion, first_item, "task").prediction == letter


def test_the_official_accuracy_is_0_when_nothing_was_answered(first_item):
    """``eval_your_results.py`` gives 0 for a group with no answered question (not NaN)."""
    bench = BENCHMARKS.get("videomme")
    verdict = bench.judge("I cannot tell", first_item)
    result = bench.aggregate([(first_item, verdict.prediction, verdict.metric)])
    assert result["official_accuracy"] == 0.0 and result["answered"] == 0.0
    assert all(value == 0.0 for key, value in result.items() if key.startswith("official_accuracy/"))
