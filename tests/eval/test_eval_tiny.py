"""``eval.run`` and ``mmgrpo eval`` on tiny Qwen2.5-VL models and a generated counting dataset."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

import eval as evaluation
from data_recipes.make import make_dataset
from eval import EvalOptions
from mmgrpo.cli import main
from mmgrpo.config import DatasetConfig, TaskConfig

OUTPUTS = ("results.json", "report.md", "report.html", "samples.jsonl", "accuracy.png")
OPTIONS = EvalOptions(max_new_tokens=8, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """6 test rows of generated counting images, plus one row whose image is missing."""
    folder = tmp_path_factory.mktemp("clevr")
    make_dataset("clevr_count", 12, folder, seed=0, test_fraction=0.5)
    test_file = folder / "test.jsonl"
    first = json.loads(test_file.read_text().splitlines()[0])
    broken = {**first, "id": "broken", "image": "media/missing.png"}
    with test_file.open("a") as handle:
        handle.write(json.dumps(broken) + "\n")
    return folder


def run_eval(models: list[Path], dataset: Path, out: Path) -> dict[str, evaluation.EvalResult]:
    spec = DatasetConfig(path=str(dataset), split="test", task="clevr_count", limit=8)
    return evaluation.run([str(m) for m in models], [spec], out, options=OPTIONS, task=TaskConfig(think=False))


@pytest.fixture(scope="module")
def two_models(tmp_path_factory, tiny_qwen25vl, tiny_model_dir, dataset) -> tuple[Path, list[str]]:
    """Output folder of one run comparing two tiny models (different seeds), and their names."""
    models = [tiny_qwen25vl, tiny_model_dir("qwen2_5_vl", seed=1)]
    out = tmp_path_factory.mktemp("eval_two")
    run_eval(models, dataset, out)
    return out, [str(m) for m in models]


def recompute(rows: list[dict]) -> dict[str, float]:
    """The summary numbers of one model, from its samples.jsonl rows alone."""
    first = [row for row in rows if row["sample_index"] == 0]
    by_task = defaultdict(list)
    for row in first:
        by_task[row["task"]].append(row["metric"])
    numbers = {
        "n": len(first),
        "accuracy": sum(row["metric"] for row in first) / len(first),
        "format_rate": sum(row["rewards"]["format"] for row in rows) / len(rows),
        "mean_length": sum(row["n_tokens"] for row in rows) / len(rows),
        "truncation_rate": sum(row["truncated"] for row in rows) / len(rows),
    }
    numbers |= {f"{task}/accuracy": sum(scores) / len(scores) for task, scores in by_task.items()}
    return numbers


def read_samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_results_json_equals_recomputation_from_samples_jsonl(two_models):
    out, names = two_models
    results = json.loads((out / "results.json").read_text())
    rows = read_samples(out)
    assert {row["model"] for row in rows} == set(names)
    for name in names:
        summary = results["models"][name]["summary"]
        expected = recompute([row for row in rows if row["model"] == name])
        assert expected["n"] == 6
        assert 0 < expected["mean_length"] <= OPTIONS.max_new_tokens
        assert {key: summary[key] for key in expected} == pytest.approx(expected)


def test_bad_row_is_skipped_and_counted(two_models):
    out, names = two_models
    results = json.loads((out / "results.json").read_text())
    for name in names:
        skipped = results["models"][name]["skipped"]
        assert skipped["count"] == 1 and [row["row_id"] for row in skipped["rows"]] == ["broken"]
        assert results["models"][name]["summary"]["skipped"] == 1
        assert results["models"][name]["datasets"]["clevr_count"]["items"] == 6
    assert "broken" not in {row["prompt_id"] for row in read_samples(out)}


def test_each_sample_row_shows_the_question_it_answers(two_models, dataset):
    questions = {row["id"]: row["problem"] for row in map(json.loads, (dataset / "test.jsonl").read_text().splitlines())}
    rows = read_samples(two_models[0])
    assert rows and all(questions[row["prompt_id"]] in row["prompt"] for row in rows)


def test_two_models_give_a_two_column_report_and_chart(two_models):
    out, names = two_models
    report = (out / "report.md").read_text()
    assert f"| metric | {names[0]} | {names[1]} |" in report
    accuracy_row = next(line for line in report.splitlines() if line.startswith("| accuracy |"))
    assert accuracy_row.count("[") == 2  # each column with its interval
    assert (out / "accuracy.png").read_bytes().startswith(b"\x89PNG")
    page = (out / "report.html").read_text()
    assert f"<th>token limit</th><th>{names[0]}</th><th>{names[1]}</th>" in page  # side by side
    assert page.count('class="card"') == len(read_samples(out)) and "unavailable" not in page  # dataset images inlined
    folders = sorted((out / "models").iterdir())
    assert [folder.name[:2] for folder in folders] == ["1-", "2-"]
    for folder in folders:
        assert all((folder / name).is_file() for name in OUTPUTS)


def test_greedy_runs_are_reproducible(two_models, tiny_qwen25vl, dataset, tmp_path):
    out, names = two_models
    run_eval([tiny_qwen25vl], dataset, tmp_path)
    again = read_samples(tmp_path)
    before = [row for row in read_samples(out) if row["model"] == names[0]]
    assert [row["completion"] for row in again] == [row["completion"] for row in before]
    summary = json.loads((tmp_path / "results.json").read_text())["models"][names[0]]["summary"]
    assert summary == json.loads((out / "results.json").read_text())["models"][names[0]]["summary"]


def test_cli_writes_the_four_outputs(tiny_qwen25vl, dataset, tmp_path):
    code = main([
        "eval", "--model", str(tiny_qwen25vl), "--task", "clevr_count", "--data", str(dataset),
        "--limit", "3", "--samples", "2", "--temperature", "1.0", "--max-new-tokens", "8",
        "--out", str(tmp_path), "log.progress_bar=false",
    ])
    assert code == 0
    assert all((tmp_path / name).is_file() for name in OUTPUTS)
    summary = json.loads((tmp_path / "results.json").read_text())["models"][str(tiny_qwen25vl)]["summary"]
    assert summary["n"] == 3 and {"pass@1", "pass@2", "mean@2"} <= set(summary)
    assert len(read_samples(tmp_path)) == 3 * 2


def test_cli_reports_bad_options_without_a_traceback(tiny_qwen25vl, dataset, tmp_path, capsys):
    code = main(["eval", "--model", str(tiny_qwen25vl), "--data", str(dataset), "--samples", "4", "--out", str(tmp_path)])
    assert code == 2
    assert "eval.temperature" in capsys.readouterr().err


def test_two_datasets_of_one_task_are_reported_apart(tiny_qwen25vl, dataset, tmp_path):
    other = tmp_path / "other"
    make_dataset("clevr_count", 8, other, seed=5, test_fraction=0.5)
    specs = [DatasetConfig(path=str(path), split="test", task="clevr_count", limit=3) for path in (dataset, other)]
    (result,) = evaluation.run([str(tiny_qwen25vl)], specs, tmp_path / "out", options=OPTIONS,
                               task=TaskConfig(think=False)).values()
    by_dataset = result.by_category()["clevr_count"]["dataset"]
    assert {label: cell["n"] for label, cell in by_dataset.items()} == {str(dataset): 3, str(other): 3}
    assert result.summary()["clevr_count/n"] == 6
    assert "| dataset | n |" in (tmp_path / "out" / "report.md").read_text()
