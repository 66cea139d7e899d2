"""Comparing two evaluations item by item: McNemar's exact test, the paired bootstrap, per benchmark and category
rows, items scored by one run only, and `mmgrpo eval --compare` on two output folders."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from eval.compare import compare, mcnemar_exact, paired_bootstrap
from eval.report import write_outputs
from eval.results import CompletionRecord, EvalOptions, EvalResult, ItemRecord
from mmgrpo.cli import main
from tests.eval.eval_outputs import benchmark_root, predictions_run, read_jsonl

# (only A right, only B right) -> two-sided exact p, by hand: 2 * sum_{k<=min} C(n, k) / 2^n, capped at 1
HAND_CHECKED = {(0, 0): 1.0, (3, 0): 2 / 8, (0, 3): 2 / 8, (10, 2): 2 * (1 + 12 + 66) / 4096, (7, 7): 1.0, (1, 1): 1.0,
                (5, 1): 2 * (1 + 6) / 64}
# computed once with scipy.stats.binomtest(min, n, 0.5).pvalue (scipy 1.17) and kept: larger counts
SCIPY_VALUES = {(25, 14): 0.10812902140605732, (60, 40): 0.05688793364098089, (1, 9): 0.021484375}


@pytest.mark.parametrize("counts, expected", [*HAND_CHECKED.items(), *SCIPY_VALUES.items()])
def test_mcnemar_exact_p_values(counts, expected):
    assert mcnemar_exact(*counts) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_exact_agrees_with_scipys_binomial_test():
    stats = pytest.importorskip("scipy.stats")
    for only_a in range(0, 30, 3):
        for only_b in range(0, 45, 4):
            if only_a + only_b:
                oracle = stats.binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue
                assert mcnemar_exact(only_a, only_b) == pytest.approx(oracle, rel=1e-9), (only_a, only_b)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_bootstrap_difference_interval_and_p():
    a, b = [0.5, 0.2, 0.9, 0.4], [0.7, 0.3, 0.9, 0.8]  # differences 0.2, 0.1, 0, 0.4: mean 0.175
    result = paired_bootstrap(a, b, resamples=2000, seed=3)
    assert result.difference == pytest.approx(0.175)
    assert 0.0 <= result.ci_low < 0.175 < result.ci_high <= 0.4  # inside the smallest and largest difference
    assert result == paired_bootstrap(a, b, resamples=2000, seed=3)  # seeded
    same = paired_bootstrap(a, a, resamples=500)
    assert (same.difference, same.ci_low, same.ci_high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    shifted = paired_bootstrap(a, [x + 0.25 for x in a], resamples=999)
    assert shifted.ci_low == pytest.approx(0.25) and shifted.ci_high == pytest.approx(0.25)
    assert shifted.p_value == pytest.approx(1 / 1000)  # no re-centred resample is as far from 0 as 0.25
    assert math.isnan(paired_bootstrap([], []).p_value)
    with pytest.raises(ValueError):
        paired_bootstrap([1.0], [1.0, 0.0])


def test_compare_pairs_by_id_counts_unpaired_items_and_picks_the_test():
    right_wrong = {f"q{i}": (1.0, {"level": "easy" if i < 6 else "hard"}) for i in range(10)}
    run_a = {"quiz": {**right_wrong, "only-a": (1.0, {"level": "easy"})},
             "docs": {"d1": (0.5, {}), "d2": (1.0, {}), "d3": (0.0, {})}}
    run_b = {"quiz": {**{key: (0.0 if key in ("q0", "q1", "q7") else 1.0, labels) for key, (_, labels) in
                         right_wrong.items()}, "q10": (0.0, {"level": "easy"}), "only-b": (0.0, {"level": "hard"})},
             "docs": {"d1": (0.8, {}), "d2": (1.0, {}), "d3": (0.3, {})}, "new": {"n1": (1.0, {})}}
    rows = {(row.benchmark, row.category): row for row in compare(run_a, run_b, resamples=500)}
    quiz = rows["quiz", ""]
    assert (quiz.n_a, quiz.n_b, quiz.paired, quiz.only_in_a, quiz.only_in_b) == (11, 12, 10, 1, 2)
    assert (quiz.a_right_b_wrong, quiz.a_wrong_b_right, quiz.test) == (3, 0, "mcnemar")
    assert quiz.p_value == pytest.approx(0.25) and quiz.difference == pytest.approx(-0.3)
    assert quiz.accuracy_a == pytest.approx(1.0) and quiz.accuracy_b == pytest.approx(7 / 12)
    easy = rows["quiz", "level=easy"]
    assert (easy.paired, easy.only_in_a, easy.only_in_b, easy.a_right_b_wrong) == (6, 1, 1, 2)
    docs = rows["docs", ""]
    assert docs.test == "bootstrap" and docs.difference == pytest.approx((0.3 + 0 + 0.3) / 3)
    assert docs.a_right_b_wrong is None and 0 < docs.p_value <= 1
    new = rows["new", ""]
    assert (new.n_a, new.n_b, new.paired, new.test) == (0, 1, 0, "none") and math.isnan(new.p_value)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = benchmark_root(tmp_path_factory.mktemp("published"))
    runs = tmp_path_factory.mktemp("runs")
    before = {"1": "12", "2": "There are 12 cubes.", "3": "12", "4": "12", "5": "(A) 30",
              "validation_Accounting_1": "(A)", "validation_Accounting_2": "4", "validation_Art_Theory_1": "(A)",
              "validation_Math_1": "(A)"}
    after = {**before, "1": "(B) Moved right.", "3": "1.5 cm", "validation_Accounting_1": "(B)",
             "validation_Math_1": "(C)"}
    del after["4"]  # not answered: scored in the first run only
    return predictions_run(root, runs / "before", before), predictions_run(root, runs / "after", after)


def test_eval_compare_writes_and_prints_the_paired_comparison(two_runs, capsys):
    before, after = two_runs
    assert main(["eval", "--compare", str(before), str(after)]) == 0
    printed = capsys.readouterr().out
    data = json.loads((after / "compare.json").read_text())
    assert (data["a"], data["b"]) == (str(before), str(after))
    scores = [{(row["task"], row["prompt_id"]): row["metric"] for row in read_jsonl(run / "samples.jsonl")}
              for run in two_runs]
    for row in (row for row in data["rows"] if row["category"] == ""):
        keys = [key for key in scores[0] if key[0] == row["benchmark"]]
        paired = [key for key in keys if key in scores[1]]
        flips = [(scores[0][key], scores[1][key]) for key in paired]
        assert (row["paired"], row["only_in_a"], row["only_in_b"]) == (len(paired), len(keys) - len(paired), 0)
        assert (row["a_right_b_wrong"], row["a_wrong_b_right"]) == (flips.count((1.0, 0.0)), flips.count((0.0, 1.0)))
        assert row["p_value"] == pytest.approx(mcnemar_exact(row["a_right_b_wrong"], row["a_wrong_b_right"]))
        assert f"| {row['benchmark']} | (all) | " in printed
    mathvista = next(row for row in data["rows"] if row["benchmark"] == "mathvista_testmini" and not row["category"])
    assert (mathvista["paired"], mathvista["only_in_a"], mathvista["a_wrong_b_right"]) == (4, 1, 2)
    assert any(row["category"] == "subject=Accounting" for row in data["rows"])
    assert "| mmmu_val | subject=Accounting |" in (after / "compare.md").read_text()


def test_eval_compare_refuses_a_folder_of_several_models_and_other_inputs(two_runs, tmp_path, capsys):
    item = ItemRecord("q", "quiz", "a", [], [CompletionRecord("a", 1, False, 1.0, "a", {}, 0.0)])
    result = EvalResult(EvalOptions(progress=False), [item])
    write_outputs(tmp_path, {"m1": result, "m2": result})
    assert main(["eval", "--compare", str(tmp_path), str(two_runs[1])]) == 2
    assert "holds 2 models (m1, m2); compare one of" in capsys.readouterr().err
    assert main(["eval", "--compare", *map(str, two_runs), "--model", "tiny:qwen2_5_vl"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "mmgrpo eval: error: --compare takes two evaluation output folders and no --model"
