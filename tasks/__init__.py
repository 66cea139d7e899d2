"""Tasks: how a dataset row becomes a prompt and a ground truth, the rewards, the eval metric.

Importing this package registers the built-in tasks and rewards. A new task is one
module here plus one import line below.
"""

from tasks import (  # noqa: F401  (registration)
    audio_count, clevr_count, code, format_rewards, geometry, grounding, math, object_mentions, tool_rewards, video_count,
    zoom_texture,
)
from tasks.base import ModelInfo, RowError, Task
from tasks.guards import GuardedAnswer, Guards, guarded_answer
from tasks.registry import REWARDS, TASKS, get_task, register_reward, register_task
from tasks.scoring import RewardBreakdown, reward_fields, score_completions

__all__ = [
    "REWARDS",
    "TASKS",
    "GuardedAnswer",
    "Guards",
    "ModelInfo",
    "RewardBreakdown",
    "RowError",
    "Task",
    "get_task",
    "guarded_answer",
    "register_reward",
    "register_task",
    "reward_fields",
    "score_completions",
]
