"""Plugins: tasks and rewards written outside the repository, as files, modules or installed packages."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mmgrpo.config import ConfigError, load_config
from mmgrpo.plugins import ENTRY_POINT_GROUP, PluginError, load_plugin, load_plugins
from mmgrpo.registry import RegistryError
from mmgrpo.types import Sample
from tasks import REWARDS, TASKS, score_completions

REWARD_PLUGIN = '''
from tasks import register_reward


@register_reward("{name}")
def shouting(completions, answer, **fields):
    """1 per completion written in capitals; None where the ground truth is missing."""
    return [None if truth is None else float(text.isupper()) for text, truth in zip(completions, answer)]
'''

TASK_PLUGIN = '''
from tasks import register_reward, register_task
from tasks.clevr_count import ClevrCountTask


@register_reward("{name}_reward")
def echo_length(completions, **fields):
    return [min(1.0, len(text) / 10) for text in completions]


@register_task("{name}")
class Leftmost(ClevrCountTask):
    default_rewards = {{"{name}_reward": 1.0}}
    metric_reward = "{name}_reward"
'''


def test_a_plugin_file_registers_a_usable_reward_and_a_second_load_is_a_no_op(tmp_path: Path) -> None:
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARD_PLUGIN.format(name="plugin_shouting"))
    first = load_plugin(path)
    assert load_plugin(str(path)) is first
    samples = [Sample(id=str(i), task="t", messages=[], answer=truth) for i, truth in enumerate([1, None, 1])]
    result = score_completions(["YES", "YES", "no"], samples, {"plugin_shouting": 2.0})
    assert result.components["plugin_shouting"] == [1.0, None, 0.0]


def test_the_same_file_imported_under_two_names_is_harmless_but_two_definitions_are_an_error(tmp_path, monkeypatch):
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "twice_rewards.py").write_text(REWARD_PLUGIN.format(name="plugin_twice"))
    monkeypatch.syspath_prepend(str(folder))
    load_plugins(["twice_rewards"])  # as a module (a launcher imported it) ...
    load_plugins([folder / "twice_rewards.py"])  # ... and as the file the config lists
    assert "plugin_twice" in REWARDS
    other = tmp_path / "other_rewards.py"
    other.write_text(REWARD_PLUGIN.format(name="plugin_twice").replace("def shouting", "def whispering"))
    with pytest.raises(PluginError, match=r"reward 'plugin_twice' is registered twice: by shouting in .*twice_rewards.py "
                                          r"and by whispering in .*other_rewards.py"):
        load_plugin(other)


def test_a_missing_or_broken_plugin_is_named_and_can_be_fixed(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="nope.py' is not a file"):
        load_plugin(tmp_path / "nope.py")
    with pytest.raises(PluginError, match="'no_such_module_here' is neither a file nor an importable module"):
        load_plugin("no_such_module_here")
    path = tmp_path / "broken_rewards.py"
    path.write_text("import not_a_module_anywhere\n")
    with pytest.raises(PluginError, match="broken_rewards.py' failed to import: ModuleNotFoundError"):
        load_plugin(path)
    path.write_text(REWARD_PLUGIN.format(name="plugin_fixed"))
    load_plugin(path)
    assert "plugin_fixed" in REWARDS


def test_a_config_may_name_a_task_its_plugin_registers(tmp_path: Path) -> None:
    path = tmp_path / "leftmost_task.py"
    path.write_text(TASK_PLUGIN.format(name="plugin_leftmost"))
    config = load_config(None, ["task.name=plugin_leftmost", f"task.plugins=[{path}]"])  # checked after loading
    assert config.task.name == "plugin_leftmost" and "plugin_leftmost" in TASKS
    with pytest.raises(ConfigError, match=r"task.plugins\[0\]: plugin '.*absent.py' is not a file"):
        load_config(None, [f"task.plugins=[{tmp_path / 'absent.py'}]"])


def installed_package(site: Path, name: str) -> None:
    """A package laid out in ``site`` as ``pip install`` leaves it: the module and a dist-info
    folder declaring it in the ``mmgrpo.tasks`` entry-point group."""
    (site / f"{name}.py").write_text(TASK_PLUGIN.format(name=name))
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {name}\n")


def test_an_installed_package_registers_its_task_without_being_listed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    installed_package(site, "pkg_leftmost")
    script = textwrap.dedent("""
        from mmgrpo.config import load_config
        from tasks import TASKS
        config = load_config(None, ["task.name=pkg_leftmost"])
        print(config.task.name, "pkg_leftmost" in TASKS)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={"PYTHONPATH": f"{site}:{Path.cwd()}", "PATH": "/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pkg_leftmost", "True"]


def test_registering_one_object_twice_is_harmless_and_a_lookup_still_names_the_known() -> None:
    from mmgrpo.registry import Registry

    registry: Registry[object] = Registry("thing")

    def thing():  # noqa: ANN202
        return 1

    registry.add("a", thing)
    registry.add("a", thing)
    assert registry.names() == ["a"]
    with pytest.raises(RegistryError, match="unknown thing 'b'.*Known: a"):
        registry.get("b")


def test_a_package_folder_is_a_plugin_and_may_not_shadow_an_imported_module(tmp_path: Path) -> None:
    package = tmp_path / "folder_plugin_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from folder_plugin_pkg import rewards  # noqa: F401\n")
    (package / "rewards.py").write_text(REWARD_PLUGIN.format(name="plugin_from_folder"))
    assert load_plugin(package).__name__ == "folder_plugin_pkg" and "plugin_from_folder" in REWARDS
    assert load_plugin(package / "__init__.py") is load_plugin(package)
    shadow = tmp_path / "elsewhere" / "tasks"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    with pytest.raises(PluginError, match="a module named 'tasks' is already imported"):
        load_plugin(shadow)


def test_an_adapter_file_loaded_under_two_names_registers_once(tmp_path: Path, monkeypatch) -> None:
    from data_recipes.adapters.base import ADAPTERS

    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / "twice_adapter.py").write_text(
        "from data_recipes.adapters.base import register_adapter\n\n"
        "@register_adapter('plugin_twice_adapter', columns=['prompt_text', 'gold'])\n"
        "def convert(raw):\n    return {'problem': raw['prompt_text'], 'answer': raw['gold']}\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(ADAPTERS, "_items", dict(ADAPTERS._items))  # other tests list the known adapters
    load_plugins(["twice_adapter", folder / "twice_adapter.py"])
    assert ADAPTERS.get("plugin_twice_adapter").columns == {"prompt_text", "gold"}
