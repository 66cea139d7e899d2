"""``eval.run`` on a test set holding an image that only fails on full decode: skipped, named, counted."""

from __future__ import annotations

import json
import shutil

import eval as evaluation
from data_recipes.make import make_dataset
from eval import EvalOptions
from mmgrpo.config import DatasetConfig, TaskConfig
from mmgrpo.skipped_rows import LEDGER_FILE


def test_benchmark_skips_a_truncated_image_and_writes_the_ledger(tiny_qwen25vl, bad_images, tmp_path):
    make_dataset("clevr_count", 8, tmp_path / "data", seed=0, test_fraction=0.5)
    rows = [json.loads(line) for line in (tmp_path / "data" / "test.jsonl").read_text().splitlines()]
    shutil.copyfile(bad_images["truncated_jpeg"], tmp_path / "data" / rows[1]["image"])
    spec = DatasetConfig(path=str(tmp_path / "data"), split="test", task="clevr_count")
    options = EvalOptions(max_new_tokens=4, batch_size=4, progress=False)

    (result,) = evaluation.run([str(tiny_qwen25vl)], [spec], tmp_path / "out", options=options,
                               task=TaskConfig(think=False)).values()

    assert [item.sample_id for item in result.items] == [row["id"] for row in rows if row is not rows[1]]
    assert [(row.row_id, row.reason) for row in result.skipped] == [(rows[1]["id"], "corrupt media")]
    (recorded,) = [json.loads(line) for line in (tmp_path / "out" / LEDGER_FILE).read_text().splitlines()]
    assert (recorded["row_id"], recorded["split"], recorded["stage"]) == (rows[1]["id"], "test", "eval")
    assert recorded["source"] == str(tmp_path / "data" / rows[1]["image"])
