"""On 2 ranks under FSDP2 (each forward a collective), a round in which one rank's every prompt has bad media
still decodes in step with the other rank: it decodes a stand-in, its completions discarded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmgrpo.inputs import generate_dataset
from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import succeeded, torchrun_train

pytestmark = pytest.mark.distributed


def test_a_rank_whose_prompts_all_have_bad_media_keeps_in_step(small_config, tmp_path, bad_images):
    """Every odd row's image is corrupt; with 2 prompts a step, in order, rank 1 draws only those (before the
    fix: "Received data size doesn't match expected size", a collective mismatch that killed both ranks)."""
    config = small_config("train.backend=fsdp2", "train.steps=2", "data.shuffle=false", "rollout.prompts_per_step=2",
                          "train.micro_batch_size=4", "eval.before=false", "eval.after=false", "algo.advantage_estimator=remax")
    dataset = generate_dataset(config.data.train[0], Path(config.data.dir), seed=config.data.seed)
    split = dataset / "train.jsonl"
    rows = [json.loads(line) for line in split.read_text().splitlines()]
    for row in rows[1::2]:
        row["image"] = f"media/corrupt-{row['id']}.jpg"
        shutil.copyfile(bad_images["truncated_jpeg"], dataset / row["image"])
    split.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)

    succeeded(torchrun_train(str(recipe), "log.run_name=run"))
    run = Path(config.log.output_dir) / "run"
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl")] == [1, 2]
    skipped = {row["row_id"] for row in read_metrics(run / "skipped_rows.jsonl")}
    assert skipped == {row["id"] for row in rows[1:4:2]}  # rank 1's prompt of each step, named
