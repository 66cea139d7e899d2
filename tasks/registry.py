"""Task and reward registries, and loading user reward plugins from Python files.

A reward is a plain callable ``f(completions, **fields) -> list[float | None]`` (TRL
style): ``fields`` are the samples' ``answer``, ``problem`` and every ``extra`` key, each a
list aligned with ``completions``; ``None`` means "not applicable to this item". Rewards
take ``**kwargs`` so they ignore fields they do not use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

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


def load_reward_plugins(paths: Iterable[str | Path]) -> list[str]:
    """Import each Python file in ``paths`` so its ``@register_reward`` calls run.

    Returns the reward names the files registered. Loading a file twice is a no-op (its
    module is cached under a name derived from its absolute path).
    """
    before = set(REWARDS.names())
    for path in map(Path, paths):
        resolved = path.expanduser().resolve()
        if not resolved.is_file():
            raise FileNotFoundError(f"reward plugin {str(path)!r} is not a file")
        digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
        module_name = f"mmgrpo_reward_plugin_{resolved.stem}_{digest}"
        if module_name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[module_name]
            raise ImportError(f"reward plugin {str(path)!r} failed to import: {error}") from error
    return sorted(set(REWARDS.names()) - before)
