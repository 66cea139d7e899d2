"""The evaluation a user runs, end to end, on benchmark files as published: a tiny model on MathVista, MMMU and
Video-MME named by --benchmarks, results per benchmark and per category, report.md and report.html (in a headless
browser), and the run's own completions re-scored by --predictions to the same verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.html_report import HTML_FILE
from mmgrpo.cli import main
from tests.eval import published
from tests.eval.eval_outputs import benchmark_root, read_jsonl
from tests.browser import needs_chromium, opened_page

BENCHMARKS = ("mathvista_testmini", "mmmu_val", "videomme")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = benchmark_root(tmp_path_factory.mktemp("benchmarks"))
    published.write_videomme(folder / "videomme")
    return folder


@pytest.fixture(scope="module")
def evaluated(root: Path, tiny_qwen25vl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "out"
    assert main(["eval", "--model", str(tiny_qwen25vl), "--benchmarks", ",".join(BENCHMARKS), "--benchmark-root",
                 str(root), "--limit", "3", "--out", str(out), "eval.max_new_tokens=4", "log.progress_bar=false"]) == 0
    return out


def test_each_benchmark_is_reported_whole_and_per_category(evaluated):
    (entry,) = json.loads((evaluated / "results.json").read_text())["models"].values()
    summary, categories = entry["summary"], entry["categories"]
    assert {name: summary[f"{name}/n"] for name in BENCHMARKS} == dict.fromkeys(BENCHMARKS, 3)
    assert all(0.0 <= summary[f"{name}/accuracy"] <= 1.0 for name in BENCHMARKS)
    assert {"question_type", "skills"} <= set(categories["mathvista_testmini"])
    assert "subject" in categories["mmmu_val"]
    assert set(categories["videomme"]) == {"duration", "domain", "task_type"}
    rows = read_jsonl(evaluated / "samples.jsonl")
    assert sorted({row["task"] for row in rows}) == sorted(BENCHMARKS)
    videos = [row["media"] for row in rows if row["task"] == "videomme"]
    assert videos and all(media[0].endswith(("vidA.mp4", "vidB.MP4")) for media in videos)
    report = (evaluated / "report.md").read_text()
    assert all(name in report for name in BENCHMARKS)


def test_saved_completions_rescore_to_the_same_verdicts(evaluated, root, tmp_path):
    rows = read_jsonl(evaluated / "samples.jsonl")
    rescored = tmp_path / "rescored"
    assert main(["eval", "--predictions", str(evaluated / "samples.jsonl"), "--benchmarks", ",".join(BENCHMARKS),
                 "--benchmark-root", str(root), "--out", str(rescored), "log.progress_bar=false"]) == 0
    again = read_jsonl(rescored / "samples.jsonl")
    verdicts = {(row["task"], row["prompt_id"]): (row["completion"], row["metric"]) for row in rows}
    assert {(row["task"], row["prompt_id"]): (row["completion"], row["metric"]) for row in again} == verdicts


@needs_chromium
def test_the_report_shows_every_benchmark_in_a_browser(evaluated):
    with opened_page(evaluated / HTML_FILE) as (page, errors):
        choices = page.eval_on_selector_all("#samples select[name=task] option", "options => options.map(o => o.value)")
        cards = page.eval_on_selector_all("#samples .card", "cards => cards.length")
    assert errors == []
    assert set(BENCHMARKS) <= set(choices) and cards == 9
