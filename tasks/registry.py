"""Task and reward registries (user plugins register into them: :mod:`mmgrpo.plugins`).

A reward is a plain callable ``f(completions, **fields) -> list[float | None]`` (TRL
style): ``fields`` are the samples' ``answer``, ``problem`` and every ``extra`` key, each a
list aligned with ``completions``; ``None`` means "not applicable to this item". Rewards
take ``**kwargs`` so they ignore fields they do not use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from mmgrpo.registry import Registry

if TYPE_CHECKING:
    from tasks.base import Task

RewardFn = Callable[..., list[float | None]]

TASKS: Registry[type[Task]] = Registry("task")
REWARDS: Registry[RewardFn] = Registry("reward")


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: register a :class:`tasks.base.Task` subclass under ``name``."""

    def decorator(cls: type[Task]) -> type[Task]:
        TASKS.add(name, cls)
        cls.name = name
        return cls

    return decorator


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Function decorator: register a reward function under ``name``."""
    return REWARDS.register(name)


def get_task(name: str, **options) -> Task:
    """An instance of the task registered as ``name``, built with ``options``.

    An option the task does not take is an error that lists the options it does take.
    """
    task_class = TASKS.get(name)
    unknown = set(options) - task_class.option_names()
    if unknown:
        raise ValueError(f"task {name!r} has no option(s) {sorted(unknown)}; "
                         f"its options: {sorted(task_class.option_names())}")
    return task_class(**options)
