"""Eval at scale: items split over ranks (torchrun, gloo on CPU) give the one-rank result, a killed eval
resumes from the items it scored to the uninterrupted result, and progress is logged with rate and ETA."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import eval as evaluation
from data_recipes.make import make_dataset
from eval import EvalOptions, benchmark, progress
from eval.resume import PARTIAL_DIR
from eval.shards import shard
from mmgrpo.cli import main
from mmgrpo.config import BenchmarkConfig, DatasetConfig, TaskConfig
from mmgrpo.distributed import Ranks
from tests.eval import published
from tests.torchrun import torchrun

BUILD = benchmark._engine
OPTIONS = EvalOptions(max_new_tokens=8, batch_size=2, progress=False)
MMMU_LIMIT = 3


@pytest.fixture(scope="module")
def peaked_model(peaked_model_dir) -> Path:
    return peaked_model_dir()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, bad_images: dict[str, Path]) -> dict[str, Path]:
    """6 generated counting rows with one whose image fails to decode (the batch builder leaves it out) third,
    and the MMMU fixture."""
    folder = tmp_path_factory.mktemp("scale")
    make_dataset("clevr_count", 10, folder / "clevr", seed=0, test_fraction=0.5)
    test_file = folder / "clevr" / "test.jsonl"
    rows = test_file.read_text().splitlines()
    shutil.copy(bad_images["truncated_jpeg"], folder / "clevr" / "media" / "truncated.jpg")
    broken = json.dumps({**json.loads(rows[0]), "id": "broken", "image": "media/truncated.jpg"})
    test_file.write_text("\n".join([*rows[:2], broken, *rows[2:]]) + "\n")
    return {"clevr": folder / "clevr", "mmmu": published.write_mmmu(folder / "MMMU")}


def evaluate(model: Path, inputs: dict[str, Path], out: Path, options: EvalOptions = OPTIONS) -> None:
    evaluation.run(
        [str(model)], [DatasetConfig(path=str(inputs["clevr"]), split="test", task="clevr_count")], out,
        options=options, task=TaskConfig(think=False), benchmark_max_new_tokens=8,
        benchmarks=[BenchmarkConfig("mmmu_val", str(inputs["mmmu"]), limit=MMMU_LIMIT)],
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, peaked_model: Path, inputs: dict[str, Path]) -> Path:
    out = tmp_path_factory.mktemp("uninterrupted")
    evaluate(peaked_model, inputs, out)
    return out


def samples(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def scored(out: Path) -> dict[str, Any]:
    """What a run scored: every sample row, and per model its summary, categories and skipped rows."""
    models = json.loads((out / "results.json").read_text())["models"]
    return {"samples": samples(out), "models": {name: {key: entry[key] for key in ("summary", "categories", "skipped")}
                                                for name, entry in models.items()}}


class Stopped(RuntimeError):
    """The evaluation was killed."""


class Recording:
    """A rollout engine that records each batch of ids it is asked for in ``asked`` (shared by the engines of
    one run, one per model), and stops (raises) at the run's ``stop_at``-th call."""

    def __init__(self, engine: Any, asked: list[list[str]], stop_at: int | None = None) -> None:
        self.engine, self.asked, self.stop_at = engine, asked, stop_at

    def generate(self, samples: Any, params: Any, group_sizes: Any = None, **kwargs: Any) -> Any:
        if len(self.asked) + 1 == self.stop_at:
            raise Stopped("killed")
        self.asked.append([sample.id for sample in samples])
        return self.engine.generate(samples, params, group_sizes, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def recording_engines(monkeypatch: pytest.MonkeyPatch, asked: list[list[str]], stop_at: int | None = None) -> None:
    monkeypatch.setattr(benchmark, "_engine", lambda *args, **kwargs: Recording(BUILD(*args, **kwargs), asked, stop_at))


def flat(batches: list[list[str]]) -> list[str]:
    return [item for batch in batches for item in batch]


def test_a_killed_eval_resumes_from_the_scored_items_to_the_uninterrupted_result(
    uninterrupted, peaked_model, inputs, tmp_path, monkeypatch
):
    out, asked = tmp_path / "out", []
    recording_engines(monkeypatch, asked, stop_at=3)  # killed in its third batch: two batches of two scored
    with pytest.raises(Stopped):
        evaluate(peaked_model, inputs, out)
    (journal,) = (out / PARTIAL_DIR).glob("*/rank-0.jsonl")
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [line["index"] for line in lines] == [0, 1, 2, 3] and lines[2]["skipped"]["row_id"] == "broken"
    assert not (out / "results.json").exists()

    first_run, asked[:] = flat(asked), []
    recording_engines(monkeypatch, asked)
    evaluate(peaked_model, inputs, out)
    assert len(first_run) == 4 and not set(first_run) & set(flat(asked))  # nothing scored twice
    assert len(flat(asked)) == 6 - 4 + MMMU_LIMIT  # the rest: 2 counting rows, then the benchmark
    assert scored(out) == scored(uninterrupted)
    assert {row["completion"] for row in samples(out)} != {""}  # long completions, compared above
    assert not (out / PARTIAL_DIR).exists()  # finished: nothing left to resume


def test_a_model_whose_items_were_all_scored_is_not_loaded_again(
    peaked_model, tiny_qwen25vl, inputs, tmp_path, monkeypatch
):
    models, loaded = [peaked_model, tiny_qwen25vl], []
    load = benchmark.load_model_and_processor

    def recorded_load(path: str, **kwargs: Any) -> Any:
        loaded.append(path)
        return load(path, **kwargs)

    monkeypatch.setattr(benchmark, "load_model_and_processor", recorded_load)
    batches = 6 // 2 + 2  # per model: 6 counting rows, then 3 benchmark items, two at a time
    recording_engines(monkeypatch, [], stop_at=batches + 2)  # killed in the second model's second batch
    specs = {"datasets": [DatasetConfig(path=str(inputs["clevr"]), split="test", task="clevr_count")],
             "options": OPTIONS, "task": TaskConfig(think=False), "benchmark_max_new_tokens": 8,
             "benchmarks": [BenchmarkConfig("mmmu_val", str(inputs["mmmu"]), limit=MMMU_LIMIT)]}
    with pytest.raises(Stopped):
        evaluation.run([str(model) for model in models], out_dir=tmp_path / "out", **specs)
    loaded[:], asked = [], []
    recording_engines(monkeypatch, asked)
    evaluation.run([str(model) for model in models], out_dir=tmp_path / "out", **specs)
    assert loaded == [str(tiny_qwen25vl)] and len(asked) == batches - 1
    evaluation.run([str(model) for model in models], out_dir=tmp_path / "again", **specs)
    assert scored(tmp_path / "out") == scored(tmp_path / "again")


def test_resuming_with_other_settings_is_refused_naming_what_changed(peaked_model, inputs, tmp_path, monkeypatch):
    recording_engines(monkeypatch, [], stop_at=2)
    with pytest.raises(Stopped):
        evaluate(peaked_model, inputs, tmp_path)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"other settings \(changed: options\)"):
        evaluate(peaked_model, inputs, tmp_path, EvalOptions(max_new_tokens=4, batch_size=2, progress=False))


def test_ranks_take_consecutive_blocks_that_cover_the_items_once():
    items = list(range(7))
    blocks = [shard(items, Ranks(rank, 3)) for rank in range(3)]
    assert blocks == [[0, 1, 2], [3, 4], [5, 6]]
    assert shard(items[:1], Ranks(1, 2)) == []


def test_without_a_bar_progress_is_logged_with_rate_and_eta(peaked_model, inputs, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    with caplog.at_level(logging.INFO, logger="eval.progress"):
        evaluate(peaked_model, inputs, tmp_path)
    lines = [record.getMessage() for record in caplog.records if record.name == "eval.progress"]
    assert any(line.startswith(f"{inputs['clevr']}: 2/6 items,") and "items/s, ETA " in line for line in lines)
    assert any(line.startswith("mmmu_val: 3 items in ") and line.endswith("items/s)") for line in lines)


def torchrun_eval(ranks: int, *arguments: str) -> subprocess.CompletedProcess:
    return torchrun(ranks, ["-m", "mmgrpo", "eval", *arguments], timeout=600)


def cli_arguments(model: Path, inputs: dict[str, Path]) -> list[str]:
    """``mmgrpo eval`` arguments for the same evaluation as :func:`evaluate`."""
    return ["--model", str(model), "--task", "clevr_count", "--data", str(inputs["clevr"]),
            f"eval.benchmarks=[{{name: mmmu_val, path: {inputs['mmmu']}, limit: {MMMU_LIMIT}}}]",
            "eval.max_new_tokens=8", "--batch-size", "2", "task.think=false", "log.progress_bar=false",
            "train.num_threads=1"]


def succeeded(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, "\n".join(line for line in done.stderr.splitlines() if "error" in line.lower())
    assert done.stdout.count("wrote ") == 1  # the main process alone reports


@pytest.mark.distributed
def test_two_ranks_under_torchrun_give_the_one_rank_result(uninterrupted, peaked_model, inputs, tmp_path):
    arguments = cli_arguments(peaked_model, inputs)
    assert main(["eval", *arguments, "--out", str(tmp_path / "ranks-1")]) == 0  # one rank, in this process
    succeeded(torchrun_eval(2, *arguments, "--out", str(tmp_path / "ranks-2")))
    one, two = scored(tmp_path / "ranks-1"), scored(tmp_path / "ranks-2")
    assert two == one
    assert [row["completion"] for row in two["samples"]] == [row["completion"] for row in samples(uninterrupted)]
    log = (tmp_path / "ranks-2" / "eval.log").read_text()
    assert "rank 0's block of 2" in log and "mmmu_val" in log


@pytest.mark.distributed
def test_an_eval_killed_on_one_rank_resumes_on_two(uninterrupted, peaked_model, inputs, tmp_path, monkeypatch):
    recording_engines(monkeypatch, [], stop_at=3)
    with pytest.raises(Stopped):
        main(["eval", *cli_arguments(peaked_model, inputs), "--out", str(tmp_path)])
    succeeded(torchrun_eval(2, *cli_arguments(peaked_model, inputs), "--out", str(tmp_path)))
    assert "4 items already scored" in (tmp_path / "eval.log").read_text()
    assert scored(tmp_path)["samples"] == samples(uninterrupted)
    assert not (tmp_path / PARTIAL_DIR).exists()
