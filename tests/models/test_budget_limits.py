"""Media budgets the checkpoint's processor would override or refuse are rejected when the model loads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mmgrpo.config import ConfigError, load_config
from mmgrpo.inputs import task_model_info
from mmgrpo.trainer.setup import load_policy

CPU = torch.device("cpu")


def load(path: Path, *overrides: str):  # noqa: ANN201
    config = load_config(None, [f"model.name_or_path={path}", *overrides])
    return load_policy(config, str(path), CPU)


def test_budgets_inside_the_processor_range_load(tiny_qwen25vl: Path, tiny_model_dir: Callable[..., Path]) -> None:
    load(tiny_qwen25vl)  # the tiny processor's range is 3136..12544, as the default budget
    load(tiny_qwen25vl, "model.min_pixels=4000", "model.max_pixels=10000")
    load(tiny_model_dir("qwen2_audio"), "model.audio_sample_rate=16000")


@pytest.mark.parametrize("overrides", [["model.max_pixels=40000"], ["model.min_pixels=1024"]])
def test_pixel_budgets_outside_the_processor_range_are_refused(tiny_qwen25vl: Path, overrides: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"model.min_pixels..max_pixels = \d+..\d+ is outside the checkpoint's "
                                          r"image processor range 3136..12544"):
        load(tiny_qwen25vl, *overrides)


def test_an_audio_rate_the_feature_extractor_refuses_is_refused(tiny_model_dir: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="model.audio_sample_rate=8000 but the checkpoint's WhisperFeatureExtractor "
                                          "takes 16000 Hz audio only; set model.audio_sample_rate=16000"):
        load(tiny_model_dir("qwen2_audio"), "model.audio_sample_rate=8000")


def test_the_check_runs_before_any_data_is_loaded(tiny_qwen25vl: Path) -> None:
    """``task_model_info`` reads the processor before the datasets load: a bad budget stops the run there."""
    config = load_config(None, [f"model.name_or_path={tiny_qwen25vl}", "model.max_pixels=40000"])
    with pytest.raises(ConfigError, match="outside the checkpoint's image processor range"):
        task_model_info(config.model, str(tiny_qwen25vl))
