"""``mmgrpo data make`` / ``inspect`` end to end: the output is a dataset ``datasets`` reads back."""

from __future__ import annotations

import datasets
from PIL import Image

from mmgrpo.cli import main


def test_make_writes_a_dataset_that_datasets_loads(tmp_path, capsys):
    out = tmp_path / "d"
    assert main(["data", "make", "--recipe", "clevr_count", "--n", "200", "--out", str(out), "--seed", "3"]) == 0
    files = {"train": str(out / "train.jsonl"), "test": str(out / "test.jsonl")}
    loaded = datasets.load_dataset("json", data_files=files)
    assert loaded["train"].num_rows == 160 and loaded["test"].num_rows == 40
    row = loaded["test"][0]
    assert row["id"] == "clevr_count-000160" and isinstance(row["answer"], int)
    assert Image.open(out / row["image"]).size == (112, 112)

    assert main(["data", "inspect", str(out), "--rows", "1"]) == 0
    printed = capsys.readouterr().out
    assert '"counts": {"train": 160, "test": 40}' in printed
    assert "[train]: 160 rows (adapter canonical)" in printed and "clevr_count-000160" in printed


def test_recipe_options_become_flags(tmp_path, capsys):
    out = tmp_path / "v"
    main(["data", "make", "--recipe", "video_count", "--n", "2", "--out", str(out), "--frame-size", "48", "--colours", "red", "blue"])
    assert '"frame_size": 48' in (out / "dataset_info.json").read_text()
    capsys.readouterr()
    assert main(["data", "make", "--recipe", "clevr_count", "--n", "2", "--out", str(tmp_path / "c"), "--frame-size", "32"]) == 2
    assert capsys.readouterr().err.strip() == "mmgrpo data: error: --frame-size: not an option of recipe 'clevr_count'"
    assert main(["data", "make", "--recipe", "clevr_count", "--n", "2", "--out", str(tmp_path / "c"), "--colours", "mauve"]) == 2
    assert "mmgrpo data: error: " in capsys.readouterr().err and not (tmp_path / "c").exists()
