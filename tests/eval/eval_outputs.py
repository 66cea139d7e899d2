"""Evaluation output folders written by the command line from saved predictions on published fixture files."""

from __future__ import annotations

import json
from pathlib import Path

from mmgrpo.cli import main
from tests.eval import published


def benchmark_root(folder: Path) -> Path:
    """A --benchmark-root holding mathvista_testmini (5 items) and mmmu_val (4 items), images embedded as bytes."""
    published.write_mathvista_parquet(folder / "mathvista_testmini")
    published.write_mmmu(folder / "mmmu_val")
    return folder


def predictions_run(root: Path, out: Path, completions: dict[str, str]) -> Path:
    """``mmgrpo eval --predictions`` of ``completions`` (item id -> text) on both benchmarks, by name; ``out``."""
    predictions = out.with_suffix(".jsonl")
    predictions.write_text("\n".join(json.dumps({"id": key, "completion": text}) for key, text in completions.items()))
    code = main(["eval", "--predictions", str(predictions), "--benchmarks", "mathvista_testmini,mmmu_val",
                 "--benchmark-root", str(root), "--out", str(out), "log.progress_bar=false"])
    assert code == 0
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
