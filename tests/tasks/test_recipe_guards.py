"""No recipe's guards cut a correct answer that the recipe's own token budget allows."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from mmgrpo.config import load_config
from mmgrpo.config.loading import RECIPES_DIR
from mmgrpo.inputs import build_task
from tasks.base import ModelInfo

RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))


def row_for(task: str, image: str) -> dict:
    rows = {
        "math": {"answer": "1/2"},
        "geometry": {"answer": "B", "choices": ["1", "2", "3"], "image": image},
        "grounding": {"answer": [10, 10, 40, 40], "image": image},
        "video_count": {"answer": 3, "video": "/v.mp4"},
        "audio_count": {"answer": 3, "audio": "/a.wav"},
        "code": {"answer": "def f():\n    return 3\n", "tests": ["assert f() == 3"]},
        "zoom_texture": {"answer": "checks", "region": [0, 0, 32, 32]},
    }
    return {"id": "r", "problem": "How many?", "answer": 3, "image": image, **rows.get(task, {})}


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.stem)
def test_a_correct_answer_after_the_longest_allowed_reasoning_scores_one(path: Path, tmp_path: Path) -> None:
    config = load_config(path)
    image = tmp_path / "scene.png"
    Image.new("RGB", (64, 64)).save(image)
    task = build_task(config.task.name, config.task, ModelInfo())
    sample = task.to_sample(row_for(config.task.name, str(image)), think=True)
    # Reasoning as long as the whole completion may be: one token per word at the very least.
    sample.extra["reasoning"] = "I check each object again. " * (config.rollout.max_new_tokens // 5)
    completion = task.reference_completion(sample)
    assert len(completion) > 4000 or config.rollout.max_new_tokens < 800  # the old character limit cut these
    assert task.metric(completion, sample) == 1.0
