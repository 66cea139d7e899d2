"""``eval.benchmarks`` in a training run: evaluated before and after GRPO and every ``eval.every_n_steps``
beside data.test, logged as ``eval/<benchmark>/...``, and drawn as curves in the run's report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmgrpo.reports.curves import PANELS, panel_keys, series
from mmgrpo.reports.run_data import RunData
from mmgrpo.trainer.metrics import read_metrics
from mmgrpo.trainer.pipeline import run_training
from tests.eval import published

LIMIT = 3


@pytest.fixture(scope="module")
def mmmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return published.write_mmmu(tmp_path_factory.mktemp("published") / "MMMU")


@pytest.fixture()
def run_dir(small_config, mmmu) -> Path:
    config = small_config(
        f"eval.benchmarks=[{{name: mmmu_val, path: {mmmu}}}]", f"eval.limit={LIMIT}", "eval.every_n_steps=1",
        "eval.max_new_tokens=4", "train.steps=2",
    )
    summary = run_training(config)
    assert summary["n_eval"] == LIMIT  # data.test alone
    return Path(config.log.output_dir) / "test"


def samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_benchmarks_are_evaluated_beside_data_test_at_every_evaluation(run_dir):
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows if "eval/mmmu_val/accuracy" in row] == [1, 2]
    for row in rows:
        scored = samples(run_dir / "eval" / f"step-{row['step']}" / "benchmarks" / "samples.jsonl")
        assert row["eval/mmmu_val/n"] == LIMIT == len(scored) and {line["task"] for line in scored} == {"mmmu_val"}
        assert row["eval/mmmu_val/accuracy"] == pytest.approx(sum(line["metric"] for line in scored) / LIMIT)
        accounting = [line["metric"] for line in scored if line["categories"]["subject"] == "Accounting"]
        assert row["eval/mmmu_val/subject/Accounting/accuracy"] == pytest.approx(sum(accounting) / len(accounting))
        assert row["eval/n"] == LIMIT  # data.test's numbers are data.test's alone
    evaluations = json.loads((run_dir / "evaluations.json").read_text())
    assert {tag: len(evaluations[tag]["items"]) for tag in evaluations} == {
        "before GRPO": LIMIT, "benchmarks before GRPO": LIMIT, "after GRPO": LIMIT, "benchmarks after GRPO": LIMIT}
    summary = json.loads((run_dir / "summary.json").read_text())
    after = samples(run_dir / "eval" / "after" / "benchmarks" / "samples.jsonl")
    assert summary["mmmu_val/accuracy_after_grpo"] == pytest.approx(sum(line["metric"] for line in after) / LIMIT)
    assert "mmmu_val/accuracy_before_grpo" in summary


def test_the_report_draws_the_benchmark_curve_from_before_to_after(run_dir):
    rows = RunData.load(run_dir).curve_rows()
    (panel,) = [panel for panel in PANELS if "eval/accuracy" in panel.keys]
    assert {"eval/accuracy", "eval/clevr_count/accuracy", "eval/mmmu_val/accuracy"} <= set(panel_keys(panel, rows))
    assert not [key for key in panel_keys(panel, rows) if key.count("/") > 2]  # categories are not curves
    steps, values = series(rows, "eval/mmmu_val/accuracy")
    assert steps == [0, 1, 2, 2]  # before GRPO, every step, after GRPO
    evaluations = json.loads((run_dir / "evaluations.json").read_text())
    before = evaluations["benchmarks before GRPO"]["items"]
    assert values[0] == pytest.approx(sum(item["completions"][0]["metric"] for item in before) / LIMIT)
    assert "eval/mmmu_val/accuracy" in (run_dir / "report.html").read_text()
