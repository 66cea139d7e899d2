"""CLEVR, SuperCLEVR and CountBench from their published files: counting questions only, R1-V's and
lmms-eval's readers, exact integer match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_recipes.adapters.base import BadRow
from eval.benchmarks import BENCHMARKS
from tests.eval import published, saved_predictions
from tests.eval.scoring import tables
from tests.eval.scoring.tables import Case


def clevr_question(index: int, question: str, answer: str, last: str) -> dict:
    """One CLEVR v1.0 question (``function`` names each program step, as in v1.0)."""
    program = [{"inputs": [], "function": "scene", "value_inputs": []},
               {"inputs": [0], "function": last, "value_inputs": []}]
    return {"question_index": index, "image_index": index % 2, "image_filename": f"CLEVR_val_{index % 2:06d}.png",
            "split": "val", "question": question, "answer": answer, "question_family_index": 0, "program": program}


CLEVR_QUESTIONS = [
    clevr_question(0, "How many cubes are there?", "3", "count"),
    clevr_question(1, "Is there a red sphere?", "yes", "exist"),
    clevr_question(2, "How many things are either cyan or small?", "10", "count"),
    clevr_question(3, "What color is the large cube?", "red", "query_color"),
]


@pytest.fixture(scope="module")
def clevr_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("CLEVR_v1.0")
    (root / "questions").mkdir()
    (root / "questions" / "CLEVR_val_questions.json").write_text(json.dumps(
        {"info": {"split": "val", "version": "1.0"}, "questions": CLEVR_QUESTIONS}))
    (root / "images" / "val").mkdir(parents=True)
    for index in range(2):
        (root / "images" / "val" / f"CLEVR_val_{index:06d}.png").write_bytes(published.png(index))
    return root


@pytest.fixture(scope="module")
def superclevr_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("superclevr")
    (root / "images").mkdir()
    lines = []
    for index, count in enumerate((4, 7)):
        (root / "images" / f"superCLEVR_new_{index:06d}.png").write_bytes(published.png(index))
        lines.append({"image_path": f"./images/superCLEVR_new_{index:06d}.png",
                      "question": "How many vehicles are there?", "ground_truth": count})
    path = root / "superclevr_test200_counting_problems.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines))
    return path


COUNTBENCH_ROWS = [{"image": seed, "text": f"{number} dogs on a lawn", "question": "How many dogs are there?",
                    "number": number} for seed, number in ((1, 2), (2, 5), (3, 10))]


@pytest.fixture(scope="module")
def countbench_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("CountBenchQA")
    published.write_parquet(folder / "data" / "test-00000-of-00001.parquet", COUNTBENCH_ROWS)
    return folder


def test_clevr_keeps_counting_questions_and_skips_the_rest_with_the_reason(clevr_folder):
    benchmark = BENCHMARKS.get("clevr")
    items, skipped = benchmark.read(str(clevr_folder), "val")
    assert [(item.id, item.answer) for item in items] == [("0", 3), ("2", 10)]
    assert [(row.row_id, row.reason) for row in skipped] == [("1", "not a counting question"),
                                                         ("3", "not a counting question")]
    assert items[0].images == (str(clevr_folder / "images" / "val" / "CLEVR_val_000000.png"),)
    assert benchmark.official_prompt(items[0]) == (
        "How many cubes are there? First output the thinking process in <think> </think> and final answer "
        "(number) in <answer> </answer> tags.")


def test_a_digit_answer_of_a_program_not_ending_in_count_is_not_counting(clevr_folder):
    benchmark = BENCHMARKS.get("clevr")
    row = clevr_question(9, "What size is the thing?", "2", "query_size")
    with pytest.raises(BadRow, match="program ends in 'query_size'"):
        benchmark.item(row, "9", clevr_folder / "images" / "val", "q.json")


@pytest.mark.parametrize("case", tables.R1V_COUNT, ids=[case.why for case in tables.R1V_COUNT])
def test_clevr_and_superclevr_read_as_r1v(clevr_folder, case: Case):
    items, _ = BENCHMARKS.get("clevr").read(str(clevr_folder), "val")
    item = items[0]
    for style in ("official", "task"):  # R1-V's prompt asks for the trained tags: read whole in both styles
        verdict = BENCHMARKS.get("superclevr").judge(case.completion, item, style)
        assert verdict.prediction == case.verdict
        assert verdict.correct is (case.verdict == item.answer)


def test_superclevr_reads_r1vs_jsonl_and_scores_saved_completions(superclevr_file, tmp_path):
    items, skipped = BENCHMARKS.get("superclevr").read(str(superclevr_file), "test")
    assert not skipped and [(item.id, item.answer) for item in items] == [("0", 4), ("1", 7)]
    entry, rows = saved_predictions.score(tmp_path, "superclevr", superclevr_file, {
        "0": "<think>two cars, two buses</think><answer>4</answer>", "1": "7"})
    assert [(row["parsed_answer"], row["metric"], row.get("note", "")) for row in rows] == [
        (4, 1.0, ""), (None, 0.0, "unread")]
    assert entry["summary"]["superclevr/accuracy"] == pytest.approx(0.5)


@pytest.mark.parametrize("case", tables.COUNTBENCH, ids=[case.why for case in tables.COUNTBENCH])
def test_countbench_reads_as_lmms_eval(countbench_folder, case: Case):
    benchmark = BENCHMARKS.get("countbench")
    item = benchmark.item(COUNTBENCH_ROWS[0] | {"image": {"bytes": published.png(1)}, "number": case.gold}, "0",
                          None, "c")
    verdict = benchmark.judge(case.completion, item)
    assert verdict.prediction == case.verdict and verdict.correct is (case.verdict == case.gold)


def test_countbench_prompt_and_saved_completions(countbench_folder, tmp_path):
    benchmark = BENCHMARKS.get("countbench")
    items, skipped = benchmark.read(str(countbench_folder), "test")
    assert not skipped and [item.answer for item in items] == [2, 5, 10]
    assert benchmark.official_prompt(items[0]) == (
        "Look at the image carefully and count the objects. Answer with just a number, without any additional "
        "text. How many dogs are there?")
    entry, rows = saved_predictions.score(tmp_path, "countbench", countbench_folder,
                                          {"0": "two", "1": "5 dogs", "2": " 10\n"})
    assert [row["metric"] for row in rows] == [1.0, 0.0, 1.0]
    assert entry["summary"]["countbench/accuracy"] == pytest.approx(2 / 3)
    assert entry["summary"]["countbench/notes/unread"] == pytest.approx(1 / 3)
