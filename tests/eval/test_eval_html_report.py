"""report.html of an evaluation: what it shows, its sample cap, its banner, `mmgrpo report` rebuilding it, and
the page in a headless browser (renders, filters work, no script errors); benchmarks named by --benchmarks."""

from __future__ import annotations

import html
import json
import logging
import shutil
from pathlib import Path

import pytest
from PIL import Image

from eval.html_report import HTML_FILE, answer_counts
from eval.report import write_outputs
from eval.results import CompletionRecord, EvalOptions, EvalResult, ItemRecord
from mmgrpo.cli import main
from tests.eval.eval_outputs import benchmark_root, predictions_run, read_jsonl
from tests.browser import needs_chromium, opened_page

COMPLETIONS = {
    "1": "The answer is (B) Moved right.", "2": "There are 12 cubes.", "3": "1.56 cm", "4": "[1, 2, 3]", "5": "(C) 60",
    "validation_Accounting_1": "(B) $12", "validation_Accounting_2": "The ratio is 3.5",
    "validation_Art_Theory_1": "(B)", "validation_Math_1": "(C) square",
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return benchmark_root(tmp_path_factory.mktemp("published"))


@pytest.fixture(scope="module")
def scored(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return predictions_run(root, tmp_path_factory.mktemp("scored") / "preds", COMPLETIONS)


def test_benchmarks_by_name_are_read_from_the_root(scored, root):
    data = json.loads((scored / "results.json").read_text())
    assert [(spec["name"], spec["path"]) for spec in data["config"]["benchmarks"]] == [
        ("mathvista_testmini", str(root / "mathvista_testmini")), ("mmmu_val", str(root / "mmmu_val"))]
    summary = data["models"]["preds.jsonl"]["summary"]
    assert (summary["mathvista_testmini/n"], summary["mmmu_val/n"]) == (5, 4)


@pytest.mark.parametrize("argv, message", [
    (["--benchmarks", "mmmu_val,mmbench_dev", "--benchmark-root", "ROOT"], "--benchmarks: unknown benchmark 'mmbench_dev'; known: "),
    (["--benchmarks", "mme", "--benchmark-root", "ROOT"], "--benchmarks: mme files not found at "),
    (["--benchmarks", "mmmu_val"], "--benchmarks needs --benchmark-root DIR"),
    (["--benchmark", "mmmu_val=ROOT/mmmu_val", "--benchmark-root", "ROOT"], "--benchmark-root applies to --benchmarks"),
])
def test_a_bad_benchmark_name_or_folder_is_one_line(root, tmp_path, capsys, argv, message):
    argv = [arg.replace("ROOT", str(root)) for arg in argv]
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"id": "1", "completion": "x"}\n')
    assert main(["eval", "--predictions", str(predictions), *argv, "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mmgrpo eval: error: {message}")


def test_the_page_shows_results_categories_answers_and_every_sample_with_its_media(scored):
    page = (scored / HTML_FILE).read_text()
    entry = json.loads((scored / "results.json").read_text())["models"]["preds.jsonl"]
    for task in ("mathvista_testmini", "mmmu_val"):
        summary = entry["summary"]
        low, high = summary[f"{task}/accuracy_ci_low"], summary[f"{task}/accuracy_ci_high"]
        assert f"{summary[f'{task}/accuracy']:.4g} [{low:.4g}, {high:.4g}]" in page  # the interval of results.json
    assert "<h3>mmmu_val by subject</h3>" in page and "<h3>mathvista_testmini by skills</h3>" in page
    rows = read_jsonl(scored / "samples.jsonl")
    assert page.count('class="card"') == len(rows) == 9
    assert page.count('src="data:image/jpeg;base64,') == 10  # embedded bytes read back; Art_Theory_1 has two images
    assert "unavailable" not in page and "alert truncation" not in page  # saved predictions are never cut off
    assert all(html.escape(row["completion"]) in page and html.escape(row["prompt"]) in page for row in rows)
    top, count = answer_counts(rows)["mmmu_val"]["preds.jsonl"].most_common(1)[0]
    assert f"<tr><td><code>{top}</code></td><td>{count}</td>" in page
    assert "Samples, answer distributions and filters: [report.html](report.html)." in (scored / "report.md").read_text()


def _items(n: int, answers: list[str], image: Path) -> list[ItemRecord]:
    """``n`` items of benchmark ``quiz`` answered in turn by ``answers`` (gold ``triangle``), every third cut off."""
    return [ItemRecord(
        sample_id=f"q{i}", task="quiz", answer="triangle", media=[str(image)], prompt=f"Which shape is #{i}?",
        completions=[CompletionRecord(text=f"It is a {answers[i % len(answers)]}.", n_tokens=7, truncated=i % 3 == 0,
                                      metric=float(answers[i % len(answers)] == "triangle"),
                                      parsed_answer=answers[i % len(answers)], rewards={}, reward=0.0)],
        categories={"level": "easy" if i % 2 else "hard"}) for i in range(n)]


def test_several_models_side_by_side_the_cap_the_distribution_and_the_banner(tmp_path):
    image = tmp_path / "shape.png"
    Image.new("RGB", (40, 30), "red").save(image)
    options = EvalOptions(progress=False)
    results = {
        "always-triangle": EvalResult(options, _items(30, ["triangle"], image), limits={"quiz": 16}),
        "mixed": EvalResult(options, _items(30, ["triangle", "square", "circle"], image), limits={"quiz": 16}),
    }
    write_outputs(tmp_path, results, html_samples=5)
    page = (tmp_path / HTML_FILE).read_text()
    assert "<th>benchmark / dataset</th><th>token limit</th><th>always-triangle</th><th>mixed</th>" in page
    assert page.count('class="card"') == 2 * 5 and "5 of 30 quiz (mixed)" in page
    assert page.count('src="data:image/jpeg;base64,') == 2 * 5  # the image file, inlined
    assert "always-triangle: 1 distinct of 30" in page and "<tr><td><code>triangle</code></td><td>30</td><td>100%</td>" in page
    assert "mixed: 3 distinct of 30" in page and "<tr><td><code>square</code></td><td>10</td><td>33%</td>" in page
    banner = "quiz: 33% of completions stopped at the 16-token cap (more than 10%)"
    assert page.count('class="alert truncation"') == 2 and banner in page
    assert "Token limits: quiz 16." in (tmp_path / "report.md").read_text() and banner in (tmp_path / "report.md").read_text()


def test_report_command_rebuilds_the_page_with_another_cap(scored, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(scored, copy)
    (copy / HTML_FILE).unlink()
    assert main(["report", str(copy), "--samples", "1"]) == 0
    page = (copy / HTML_FILE).read_text()
    assert page.count('class="card"') == 2 and "1 of 5 mathvista_testmini" in page and "1 of 4 mmmu_val" in page
    assert main(["report", str(copy), str(tmp_path / "missing")]) == 2  # no results.json there: one line


def test_limits_and_the_cap_warning_are_in_the_log_report_md_and_the_page(tiny_qwen25vl, root, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="eval"):
        code = main(["eval", "--model", str(tiny_qwen25vl), "--benchmarks", "mmmu_val", "--benchmark-root", str(root),
                     "--limit", "2", "--out", str(tmp_path), "log.progress_bar=false"])
    assert code == 0
    (entry,) = json.loads((tmp_path / "results.json").read_text())["models"].values()
    assert entry["limits"] == {"mmmu_val": 128}
    log = [record.getMessage() for record in caplog.records]
    assert "mmmu_val: generating at most 128 new tokens per completion" in log
    assert entry["warnings"], "the tiny random model should run into its cap"
    (warning,) = entry["warnings"]
    assert warning in log and "128-token cap" in warning
    report = (tmp_path / "report.md").read_text()
    assert "Token limits: mmmu_val 128." in report and warning in report
    assert warning in (tmp_path / HTML_FILE).read_text() and "alert truncation" in (tmp_path / HTML_FILE).read_text()


@needs_chromium
def test_the_page_renders_and_filters_in_a_browser_without_errors(scored):
    rows = read_jsonl(scored / "samples.jsonl")
    wrong = sum(row["metric"] == 0 for row in rows)
    with opened_page(scored / HTML_FILE, viewport={"width": 1400, "height": 2000}) as (page, errors):
        loaded = page.eval_on_selector_all("#samples img.media", "images => images.map(i => i.complete && i.naturalWidth)")

        def shown() -> tuple[int, str]:
            count = page.eval_on_selector_all("#samples .card", "cards => cards.filter(c => c.style.display !== 'none').length")
            return count, page.inner_text("#samples .shown")

        counts = {}
        page.select_option("#samples select[name=task]", "mmmu_val")
        counts["mmmu"] = shown()
        page.select_option("#samples select[name=category]", "mmmu_val/subject=Accounting")
        counts["accounting"] = shown()
        page.select_option("#samples select[name=task]", "all")
        page.select_option("#samples select[name=category]", "all")
        page.select_option("#samples select[name=outcome]", "wrong")
        counts["wrong"] = shown()
    assert errors == []
    assert len(loaded) == 10 and all(width > 0 for width in loaded)
    assert counts == {"mmmu": (4, "4"), "accounting": (2, "2"), "wrong": (wrong, str(wrong))}
    assert 0 < wrong < len(rows)
