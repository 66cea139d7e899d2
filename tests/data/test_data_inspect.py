"""``mmgrpo data inspect`` counts what a run would use: adapter, media root and the task's own row checks."""

from __future__ import annotations

from pathlib import Path

import datasets

from mmgrpo.cli import main


def write_clevr70k_parquet(folder: Path, png: bytes) -> Path:
    """CLEVR-70k columns with embedded image bytes; the last row's answer is not a count."""
    folder.mkdir()
    solutions = ["<answer> 3 </answer>", "<answer> 5 </answer>", "<answer> many </answer>"]
    rows = {
        "id": ["a", "b", "c"],
        "image": [{"bytes": png, "path": None}] * 3,
        "problem": ["How many objects are there?"] * 3,
        "solution": solutions,
    }
    features = datasets.Features({
        "id": datasets.Value("string"), "image": datasets.Image(),
        "problem": datasets.Value("string"), "solution": datasets.Value("string"),
    })
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(folder / "train.parquet"))
    return folder


def test_inspect_applies_the_task_checks_and_hides_media_bytes(tmp_path, png_bytes, capsys) -> None:
    folder = write_clevr70k_parquet(tmp_path / "clevr70k", png_bytes())
    assert main(["data", "inspect", str(folder), "--adapter", "clevr70k", "--task", "clevr_count", "--rows", "5"]) == 0
    printed = capsys.readouterr().out
    assert "rows checked against task clevr_count" in printed
    assert "[train]: 2 rows (adapter clevr70k); skipped 1: 1 bad field answer (first: row 'c'" in printed
    assert f"<{len(png_bytes())} bytes>" in printed and "\\x89PNG" not in printed and "PNG" not in printed


def test_inspect_finds_media_under_media_root(tmp_path, images, write_jsonl, capsys) -> None:
    """VLM-R1 / R1-V layout: the jsonl names images relative to a folder elsewhere."""
    rows = [{"id": "r0", "image_path": images["good"].name, "question": "How many?", "ground_truth": "2"}]
    folder = tmp_path / "annotations"
    write_jsonl(folder / "train.jsonl", rows)
    args = ["data", "inspect", str(folder), "--adapter", "r1v_jsonl", "--task", "clevr_count"]
    assert main(args) == 2  # no usable row: the image is not next to the annotations
    assert main([*args, "--media-root", str(images["good"].parent)]) == 0
    assert "[train]: 1 rows (adapter r1v_jsonl)" in capsys.readouterr().out
