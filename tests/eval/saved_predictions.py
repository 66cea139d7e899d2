"""Scoring saved completions on one benchmark through the command line, as a user would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmgrpo.cli import main


def score(
    tmp_path: Path, benchmark: str, files: Path, completions: dict[str, str], *flags: str
) -> tuple[dict[str, Any], list[dict]]:
    """``mmgrpo eval --predictions`` of ``completions`` (item id -> text) on ``benchmark=files`` (with ``flags``):
    the model's entry of results.json and the rows of samples.jsonl."""
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("\n".join(json.dumps({"id": key, "completion": text}) for key, text in completions.items()))
    out = tmp_path / "out"
    code = main(["eval", "--predictions", str(predictions), "--benchmark", f"{benchmark}={files}", "--out", str(out),
                 "log.progress_bar=false", *flags])
    assert code == 0
    entry = json.loads((out / "results.json").read_text())["models"][predictions.name]
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return entry, rows
