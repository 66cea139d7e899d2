"""The preprocessing cache in whole runs: SFT, GRPO and eval read it, later runs hit it, and a run
trains exactly as it does without it."""

from __future__ import annotations

import pytest

from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.pipeline import RunPaths, run_training

COMPARED = ("loss", "reward/total", "grad_norm", "length/mean")


def _run(small_config, name: str, *overrides: str) -> tuple[list[dict], list[dict]]:
    config = small_config(
        f"log.run_name={name}", "sft.enabled=true", "sft.steps=2", "sft.batch_size=8", "sft.micro_batch_size=4",
        "train.steps=3", "eval.limit=8", *overrides,
    )
    run_training(config)
    root = RunPaths.for_config(config).root
    return read_metrics(root / "sft" / "metrics.jsonl"), read_metrics(root / "metrics.jsonl")


def test_second_run_hits_the_cache_and_trains_identically(small_config, tmp_path) -> None:
    cache = f"data.cache_dir={tmp_path / 'cache'}"
    sft_cold, grpo_cold = _run(small_config, "cold", cache)
    sft_warm, grpo_warm = _run(small_config, "warm", cache)
    sft_off, grpo_off = _run(small_config, "uncached", "data.cache=false")

    # SFT's 16 examples and GRPO's 12 prompts are distinct draws of 32 training samples: the first run
    # meets most for the first time, the second has them all (eval before GRPO filled in the rest).
    assert [row["sft/cache_hit_rate"] for row in sft_warm] == [1.0, 1.0]
    assert [row["data/cache_hit_rate"] for row in grpo_warm] == [1.0, 1.0, 1.0]
    assert sft_cold[0]["sft/cache_hit_rate"] == 0.0
    assert all("data/cache_hit_rate" not in row for row in grpo_off)
    assert all("sft/cache_hit_rate" not in row for row in sft_off)
    for cold, warm, off in zip(grpo_cold, grpo_warm, grpo_off, strict=True):
        for key in COMPARED:
            assert warm[key] == pytest.approx(cold[key], abs=1e-6) == pytest.approx(off[key], abs=1e-6), key
    for cold, warm, off in zip(sft_cold, sft_warm, sft_off, strict=True):
        assert warm["sft/loss"] == pytest.approx(cold["sft/loss"], abs=1e-6) == pytest.approx(off["sft/loss"], abs=1e-6)
    assert list((tmp_path / "cache").glob("v*/*/*.safetensors"))
