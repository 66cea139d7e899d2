"""Every task's reference completion (the cold-start SFT target) earns full reward."""

from __future__ import annotations

import pytest

from tasks import get_task, score_completions

ROWS = {
    "clevr_count": {"id": "c", "problem": "How many objects are there?", "answer": "<answer> 4 </answer>", "image": "/a.png"},
    "video_count": {"id": "v", "problem": "How many flashes?", "answer": 2, "video": "/v.mp4"},
    "audio_count": {"id": "s", "problem": "How many beeps?", "answer": 5, "audio": "/s.wav"},
    "math": {"id": "m", "problem": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}"},
    "geometry": {"id": "g", "problem": "Find x.", "answer": "12", "choices": ["10", "12", "14", "16"], "image": "/g.png"},
    "grounding": {
        "id": "b", "problem": "Where is the red circle?", "answer": [40, 20, 100, 60],
        "image": "/b.png", "image_size": [200, 100],
    },
}


@pytest.mark.parametrize("think", [True, False])
@pytest.mark.parametrize("name", sorted(ROWS))
def test_reference_completion_scores_full_reward(name: str, think: bool) -> None:
    task = get_task(name)
    sample = task.to_sample(ROWS[name], think=think)
    completion = task.reference_completion(sample)
    assert ("<think>" in completion) == think
    assert task.metric(completion, sample) == 1.0
    breakdown = score_completions([completion], [sample], {"format": 1.0}, reward_options={})
    assert breakdown.components["format"] == [1.0]


def test_grounding_reference_is_written_in_the_prompt_coordinates() -> None:
    row = ROWS["grounding"]
    for coords in ("absolute_original", "norm1000"):
        task = get_task("grounding", coords=coords)
        sample = task.to_sample(row, think=False)
        expected = "[40, 20, 100, 60]" if coords == "absolute_original" else "[200, 200, 500, 600]"
        assert task.reference_completion(sample) == f"<answer>{expected}</answer>"
