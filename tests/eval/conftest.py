"""Eval fixtures: tiny models whose greedy completions are long and differ by prompt."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mmgrpo.models.loading import load_model_and_processor
from tests.rollout.conftest import peaked_copy


@pytest.fixture(scope="session")
def peaked_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Callable[..., Path]) -> Callable[..., Path]:
    """``peaked_model_dir(family, **options) -> Path``: the tiny checkpoint made peaked (see ``peaked_copy``) and
    saved, built once per session; its greedy completions run long and depend on the prompt, so comparing
    them compares real decoding."""
    built: dict[tuple, Path] = {}

    def build(family: str = "qwen2_5_vl", **options: object) -> Path:
        key = (family, tuple(sorted(options.items())))
        if key not in built:
            model, processor = load_model_and_processor(tiny_model_dir(family, **options))
            out = tmp_path_factory.mktemp(f"peaked_{family}")
            peaked_copy(model).save_pretrained(out)
            processor.save_pretrained(out)
            built[key] = out
        return built[key]

    return build
