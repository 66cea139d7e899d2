"""User reward plugins: a Python file named in the config registers rewards by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmgrpo.types import Sample
from tasks import REWARDS, load_reward_plugins, score_completions

PLUGIN = '''
from tasks import register_reward


@register_reward("{name}")
def shouting(completions, answer, **fields):
    """1 per completion written in capitals; None where the ground truth is missing."""
    return [None if truth is None else float(text.isupper()) for text, truth in zip(completions, answer)]
'''


def test_plugin_file_registers_a_usable_reward(tmp_path: Path) -> None:
    path = tmp_path / "my_rewards.py"
    path.write_text(PLUGIN.format(name="plugin_shouting"))
    assert load_reward_plugins([path]) == ["plugin_shouting"]
    assert load_reward_plugins([str(path)]) == []  # a second load is a no-op, not a duplicate error
    samples = [Sample(id=str(i), task="t", messages=[], answer=truth) for i, truth in enumerate([1, None, 1])]
    result = score_completions(["YES", "YES", "no"], samples, {"plugin_shouting": 2.0})
    assert result.components["plugin_shouting"] == [1.0, None, 0.0]
    assert result.total == [2.0, 0.0, 0.0]


def test_missing_plugin_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope.py"):
        load_reward_plugins([tmp_path / "nope.py"])


def test_broken_plugin_names_the_path_and_can_be_fixed(tmp_path: Path) -> None:
    path = tmp_path / "broken_rewards.py"
    path.write_text("import not_a_module_anywhere\n")
    with pytest.raises(ImportError, match="broken_rewards.py"):
        load_reward_plugins([path])
    path.write_text(PLUGIN.format(name="plugin_fixed"))
    assert load_reward_plugins([path]) == ["plugin_fixed"]
    assert "plugin_fixed" in REWARDS
