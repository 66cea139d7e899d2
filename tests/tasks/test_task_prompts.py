"""Rows -> samples: chat messages with media parts, prompt modes, task registry, bad rows."""

from __future__ import annotations

import pytest

from tasks import TASKS, RowError, Task, get_task, register_task
from tasks.base import ANSWER_INSTRUCTION, THINK_INSTRUCTION

ROW = {"id": 7, "problem": "How many cubes?", "answer": 3, "image": "/data/a.png", "extra_column": "ignored"}


def test_think_prompt_with_system_message() -> None:
    sample = get_task("clevr_count").to_sample(ROW, system_prompt="You are a careful counter.")
    assert sample.id == "7" and sample.task == "clevr_count" and sample.answer == 3
    assert sample.messages == [
        {"role": "system", "content": "You are a careful counter."},
        {"role": "user", "content": [
            {"type": "image", "image": "/data/a.png"},
            {"type": "text", "text": f"How many cubes?\n{THINK_INSTRUCTION}"},
        ]},
    ]
    assert sample.extra == {"problem": "How many cubes?", "think": True}


def test_answer_only_prompt_has_no_think_instruction_and_records_the_mode() -> None:
    sample = get_task("clevr_count").to_sample(ROW, think=False)
    assert sample.messages[0]["role"] == "user"
    assert sample.messages[0]["content"][-1]["text"] == f"How many cubes?\n{ANSWER_INSTRUCTION}"
    assert "<think>" not in ANSWER_INSTRUCTION and sample.extra["think"] is False


def test_instructions_are_configurable() -> None:
    task = get_task("clevr_count", think_instruction="Reason, then answer.")
    assert task.to_sample(ROW).messages[0]["content"][-1]["text"].endswith("Reason, then answer.")


def test_every_media_column_becomes_a_part_in_order() -> None:
    row = {"id": "m", "problem": "Count.", "answer": 1, "images": ["/a.png", "/b.png"], "video": "/v.mp4",
           "audios": ["/s.wav"]}
    sample = get_task("math").to_sample({**row, "answer": "1"})
    kinds = [part["type"] for part in sample.messages[0]["content"]]
    assert kinds == ["image", "image", "video", "audio", "text"]
    assert sample.media("image") == ["/a.png", "/b.png"] and sample.media("audio") == ["/s.wav"]


@pytest.mark.parametrize("missing", ["id", "problem", "answer"])
def test_missing_field_is_a_row_error_naming_it(missing: str) -> None:
    row = {key: value for key, value in ROW.items() if key != missing}
    with pytest.raises(RowError, match=f"field '{missing}'") as caught:
        get_task("clevr_count").to_sample(row)
    assert caught.value.field == missing and isinstance(caught.value, ValueError)


def test_registry_lists_builtin_tasks_and_refuses_duplicates() -> None:
    assert {"clevr_count", "math", "geometry", "grounding", "video_count", "audio_count"} <= set(TASKS.names())
    with pytest.raises(KeyError, match="registered twice: by .*tasks/.* and by "):
        register_task("math")(type("Again", (Task,), {}))
    with pytest.raises(KeyError, match="unknown task 'clever_count'.*Did you mean 'clevr_count'"):
        get_task("clever_count")


def test_every_builtin_task_declares_registered_rewards_and_metric() -> None:
    from tasks import REWARDS

    for name in TASKS.names():
        task_class = TASKS.get(name)
        assert task_class.name == name
        assert task_class.metric_reward in REWARDS
        assert all(reward in REWARDS for reward in task_class.default_rewards)
