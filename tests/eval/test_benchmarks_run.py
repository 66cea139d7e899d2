"""Benchmarks end to end: published files -> prompts -> a tiny model (or saved predictions) -> reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eval as evaluation
from eval import EvalOptions
from eval.benchmarks import BENCHMARKS
from mmgrpo.cli import main
from mmgrpo.config import BenchmarkConfig
from tests.eval import published


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("published")
    return {
        "mathvista_testmini": published.write_mathvista_parquet(folder / "MathVista"),
        "mathvista_json": published.write_mathvista_json(folder / "MathVista-github"),
        "mmmu_val": published.write_mmmu(folder / "MMMU"),
    }


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_published_layouts_of_mathvista_give_the_same_items(files):
    benchmark = BENCHMARKS.get("mathvista_testmini")
    from_parquet, skipped = benchmark.read(str(files["mathvista_testmini"]), "testmini")
    from_json, _ = benchmark.read(str(files["mathvista_json"]), "testmini")
    as_lines = files["mathvista_json"].with_suffix(".jsonl")  # the same rows as JSON lines, images beside them
    as_lines.write_text("\n".join(json.dumps(row) for row in json.loads(files["mathvista_json"].read_text()).values()))
    from_lines, _ = benchmark.read(str(as_lines), "testmini")
    assert not skipped and [i.id for i in from_parquet] == [i.id for i in from_json] == ["1", "2", "3", "4", "5"]
    assert [i.images for i in from_lines] == [i.images for i in from_json]
    assert [benchmark.official_prompt(i) for i in from_parquet] == [benchmark.official_prompt(i) for i in from_json]
    assert from_parquet[2].fields["precision"] == 1 and from_parquet[2].answer == "1.5"
    assert "(Unit: cm)" in benchmark.official_prompt(from_parquet[2])
    assert from_parquet[4].categories["skills"] == ("geometry reasoning", "algebraic reasoning")


def test_mmmu_reads_every_subject_folder_and_the_images_its_placeholders_name(files):
    items, _ = BENCHMARKS.get("mmmu_val").read(str(files["mmmu_val"]), "validation")
    by_id = {item.id: item for item in items}
    assert set(by_id) == {"validation_Accounting_1", "validation_Accounting_2", "validation_Art_Theory_1",
                          "validation_Math_1"}
    art = by_id["validation_Art_Theory_1"]
    assert len(art.images) == 2 and art.media_refs[1].endswith("#validation_Art_Theory_1/image_2")
    assert dict(art.categories) == {"discipline": "Art and Design", "subject": "Art_Theory",
                                    "question_type": "multiple-choice", "difficulty": "Easy"}
    prompt = BENCHMARKS.get("mmmu_val").official_prompt(by_id["validation_Accounting_1"])
    assert prompt.endswith("(D) $16\n\nAnswer with the option's letter from the given choices directly.")


@pytest.fixture(scope="module")
def model_run(tmp_path_factory, tiny_qwen25vl, files) -> Path:
    out = tmp_path_factory.mktemp("bench_run")
    specs = [BenchmarkConfig("mathvista_testmini", str(files["mathvista_testmini"])),
             BenchmarkConfig("mmmu_val", str(files["mmmu_val"]), limit=3)]
    evaluation.run([str(tiny_qwen25vl)], [], out, options=EvalOptions(batch_size=8, progress=False),
                   benchmarks=specs, benchmark_max_new_tokens=12)
    return out


def test_results_per_benchmark_and_category_with_intervals(model_run, tiny_qwen25vl):
    entry = json.loads((model_run / "results.json").read_text())["models"][str(tiny_qwen25vl)]
    summary = entry["summary"]
    assert (summary["mathvista_testmini/n"], summary["mmmu_val/n"]) == (5, 3)
    rows = read_jsonl(model_run / "samples.jsonl")
    for name in ("mathvista_testmini", "mmmu_val"):
        metrics = [row["metric"] for row in rows if row["task"] == name]
        assert summary[f"{name}/accuracy"] == pytest.approx(sum(metrics) / len(metrics))
        assert summary[f"{name}/accuracy_ci_low"] <= summary[f"{name}/accuracy"] <= summary[f"{name}/accuracy_ci_high"]
    subjects = entry["categories"]["mmmu_val"]["subject"]
    assert {name: cell["n"] for name, cell in subjects.items()} == {"Accounting": 2, "Art_Theory": 1}
    assert entry["categories"]["mmmu_val"]["discipline"]["Business"]["n"] == 2
    assert entry["limits"] == {"mathvista_testmini": 12, "mmmu_val": 12}
    report = (model_run / "report.md").read_text()
    assert "## mmmu_val by category" in report and "| Art_Theory | 1 |" in report


def test_samples_keep_the_benchmark_ids_and_media_references(model_run):
    rows = read_jsonl(model_run / "samples.jsonl")
    assert [row["prompt_id"] for row in rows if row["task"] == "mathvista_testmini"] == ["1", "2", "3", "4", "5"]
    assert all(row["media"] and all("#" in ref and "bytes" not in ref for ref in row["media"]) for row in rows)
    assert all("extracted" in row and row["categories"] for row in rows)


def test_completions_cut_at_the_cap_are_a_warning_in_the_report(model_run, tiny_qwen25vl):
    entry = json.loads((model_run / "results.json").read_text())["models"][str(tiny_qwen25vl)]
    truncated = {name: entry["summary"][f"{name}/truncation_rate"] for name in ("mathvista_testmini", "mmmu_val")}
    warned = {line.split(":")[0] for line in entry["warnings"]}
    assert warned == {name for name, rate in truncated.items() if rate > 0.1}
    assert warned and "## Warnings" in (model_run / "report.md").read_text()


def test_benchmark_limits_are_the_benchmarks_own_not_the_rollouts(tiny_qwen25vl, files, tmp_path):
    code = main(["eval", "--model", str(tiny_qwen25vl), "--benchmark", f"mmmu_val={files['mmmu_val']}",
                 "--limit", "2", "--out", str(tmp_path), "log.progress_bar=false", "rollout.max_new_tokens=6"])
    assert code == 0
    (entry,) = json.loads((tmp_path / "results.json").read_text())["models"].values()
    assert entry["limits"] == {"mmmu_val": BENCHMARKS.get("mmmu_val").max_new_tokens}
    assert entry["summary"]["mmmu_val/n"] == 2
    assert "clevr_count/n" not in entry["summary"]  # benchmarks alone: the default data.test is not evaluated


def test_saved_predictions_are_scored_with_the_same_scorer(files, tmp_path):
    predictions = tmp_path / "preds.jsonl"
    lines = [{"pid": "1", "response": "The answer is B."}, {"pid": "2", "response": "There are 12 cubes."},
             {"pid": "3", "response": "1.56 cm"}, {"pid": "5", "response": "(A) 30"}]
    predictions.write_text("\n".join(json.dumps(line) for line in lines))
    code = main(["eval", "--predictions", str(predictions), "--benchmark",
                 f"mathvista_testmini={files['mathvista_testmini']}", "--out", str(tmp_path / "out"),
                 "log.progress_bar=false"])
    assert code == 0
    entry = json.loads((tmp_path / "out" / "results.json").read_text())["models"]["preds.jsonl"]
    assert entry["summary"]["accuracy"] == pytest.approx(3 / 4)  # B right, 12 right, 1.56 -> 1.6 wrong, (A) 30 right
    assert entry["skipped"]["by_reason"] == {"no prediction": 1}
    benchmark = BENCHMARKS.get("mathvista_testmini")
    items = {item.id: item for item in benchmark.read(str(files["mathvista_testmini"]), "testmini")[0]}
    rows = read_jsonl(tmp_path / "out" / "samples.jsonl")
    assert [row["metric"] for row in rows] == [float(benchmark.judge(line["response"], items[line["pid"]]).correct)
                                               for line in lines]


def test_hidden_answers_give_a_submission_file_instead_of_a_score(tmp_path):
    rows = [{**row, "answer": ""} for row in published.MATHVISTA_ROWS]
    folder = published.write_mathvista_parquet(tmp_path / "MathVista", rows, split="test")
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"id": "2", "completion": "There are 12 cubes."}))
    code = main(["eval", "--predictions", str(predictions), "--benchmark", f"mathvista_test={folder}",
                 "--out", str(tmp_path / "out"), "log.progress_bar=false"])
    assert code == 0
    submission = json.loads((tmp_path / "out" / "submission-mathvista_test.json").read_text())
    assert submission == {"2": {"pid": "2", "response": "There are 12 cubes.", "extraction": "12", "prediction": "12"}}
    summary = json.loads((tmp_path / "out" / "results.json").read_text())["models"]["preds.jsonl"]["summary"]
    assert summary["accuracy"] is None


def test_an_unknown_benchmark_is_one_line_naming_the_known_ones(tmp_path, capsys):
    assert main(["eval", "--benchmark", f"mathvista={tmp_path}", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "mathvista_testmini" in error and "mmmu_val" in error


def test_the_task_style_asks_in_the_trained_answer_format(files):
    from tasks.base import ANSWER_INSTRUCTION, THINK_INSTRUCTION

    benchmark = BENCHMARKS.get("mmmu_val")
    items, _ = benchmark.read(str(files["mmmu_val"]), "validation")
    thinking, direct = benchmark.prompt(items[0], "task"), benchmark.prompt(items[0], "task", think=False)
    assert thinking.endswith(f"(D) $16\n{THINK_INSTRUCTION}") and direct.endswith(f"(D) $16\n{ANSWER_INSTRUCTION}")
    assert "Answer with the option's letter" in benchmark.prompt(items[0], "official")


def test_missing_benchmark_files_are_one_line_saying_what_to_download(tmp_path, capsys):
    assert main(["eval", "--benchmark", f"mmmu_val={tmp_path / 'nowhere'}", "--out", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "MMMU/MMMU" in error and "nowhere" in error


def test_eval_judge_is_a_local_reward_model_and_its_verdicts_are_labelled(files, tmp_path, tiny_reward_models):
    predictions = tmp_path / "preds.jsonl"
    lines = [{"pid": "1", "response": "Moved right."}, {"pid": "2", "response": "I count a dozen."}]
    predictions.write_text("\n".join(json.dumps(line) for line in lines))
    judge = f"{{name: extractor, path: {tiny_reward_models['judge']}, kind: judge, max_new_tokens: 4}}"
    code = main(["eval", "--predictions", str(predictions), "--benchmark",
                 f"mathvista_testmini={files['mathvista_testmini']}", "--out", str(tmp_path / "out"),
                 "log.progress_bar=false", f"task.reward_models=[{judge}]", "eval.judge=extractor"])
    assert code == 0
    rows = {row["prompt_id"]: row for row in read_jsonl(tmp_path / "out" / "samples.jsonl")}
    assert "note" not in rows["1"] and rows["1"]["metric"] == 1.0  # read by the reference's own steps
    assert rows["2"]["note"].startswith("judge-extracted")  # the tiny judge's reply, whatever it says
    summary = json.loads((tmp_path / "out" / "results.json").read_text())["models"]["preds.jsonl"]["summary"]
    assert summary["notes/judge-extracted"] == 0.5


def test_a_missing_precision_stored_as_nan_reads_as_none(tmp_path):
    rows = [{**row, "precision": float("nan") if row["precision"] is None else row["precision"]}
            for row in published.MATHVISTA_ROWS]
    folder = published.write_mathvista_parquet(tmp_path / "MathVista", rows)
    items, skipped = BENCHMARKS.get("mathvista_testmini").read(str(folder), "testmini")
    assert not skipped and [item.fields["precision"] for item in items] == [None, None, 1, None, None]


def test_mmmu_test_answers_are_hidden_and_its_submission_is_letters_and_responses(tmp_path):
    rows = {subject: [{**row, "id": row["id"].replace("validation", "test"), "answer": "?"} for row in subject_rows]
            for subject, subject_rows in published.MMMU_ROWS.items()}
    folder = published.write_mmmu(tmp_path / "MMMU", rows, split="test")
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("\n".join(json.dumps(line) for line in [
        {"id": "test_Accounting_1", "completion": "The answer is (B)."},
        {"id": "test_Accounting_2", "completion": "The ratio is 3.5."},
    ]))
    assert main(["eval", "--predictions", str(predictions), "--benchmark", f"mmmu_test={folder}",
                 "--out", str(tmp_path / "out"), "log.progress_bar=false"]) == 0
    submission = json.loads((tmp_path / "out" / "submission-mmmu_test.json").read_text())
    assert submission == {"test_Accounting_1": "B", "test_Accounting_2": "The ratio is 3.5."}
