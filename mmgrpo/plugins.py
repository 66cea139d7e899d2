"""User code that registers tasks, rewards, dataset adapters, generators and benchmarks by name.

One loader for every kind: a plugin is a Python file (``path/to/my_task.py``), a package folder
(``path/to/my_tasks``), an importable module (``my_tasks.leftmost``), or an installed package that declares entry points in the
``mmgrpo.tasks`` group (``pip install my-mmgrpo-tasks`` is enough; nothing to list). Importing it
runs its ``@register_task`` / ``@register_reward`` / ``@register_adapter`` ... decorators.

Every process of a run loads them the same way before it looks a name up: the config's checks
(so ``task.name`` may name a plugin's task), each torchrun rank, the asynchronous rollout worker,
sweep trials and every command. Loading a plugin again is a no-op; the same file imported under
another module name registers objects of the same origin, which the registries accept once
(:mod:`mmgrpo.registry`); two different objects claiming one name is an error naming both.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

ENTRY_POINT_GROUP = "mmgrpo.tasks"
FILE_MODULE_PREFIX = "mmgrpo_plugin_"

_entry_points_loaded = False


class PluginError(ImportError):
    """A plugin could not be found or failed to import; the message names it."""


def load_plugins(specs: Iterable[str | Path] = ()) -> list[ModuleType]:
    """Import the installed entry-point plugins (once per process), then each of ``specs``
    (files or dotted module names, in order); returns the modules of ``specs``."""
    load_entry_points()
    return [load_plugin(spec) for spec in specs]


def load_plugin(spec: str | Path) -> ModuleType:
    """Import one plugin: a ``.py`` file, a package folder (or its ``__init__.py``), or an importable
    module name."""
    text = str(spec)
    path = Path(text).expanduser()
    if path.is_dir() or path.name == "__init__.py":
        return _load_package(path if path.is_dir() else path.parent)
    if text.endswith(".py") or "/" in text or path.is_file():
        return _load_file(path)
    try:
        return importlib.import_module(text)
    except ImportError as error:
        raise PluginError(f"plugin {text!r} is neither a file nor an importable module: {error}") from error
    except Exception as error:  # noqa: BLE001 - the user's module raised while importing
        raise PluginError(f"plugin {text!r} failed to import: {type(error).__name__}: {error}") from error


def load_entry_points() -> None:
    """Import every module installed packages declare in the ``mmgrpo.tasks`` entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True  # one broken package is reported once, not on every lookup
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as error:  # noqa: BLE001 - a broken installed package, named
            raise PluginError(
                f"installed plugin {point.name!r} ({point.value}, entry point group {ENTRY_POINT_GROUP!r}) "
                f"failed to import: {type(error).__name__}: {error}"
            ) from error


def _load_package(folder: Path) -> ModuleType:
    """A package given by its folder: imported by its name with its parent folder on ``sys.path``
    (so its modules import each other as ``package.module``, as once installed)."""
    folder = folder.resolve()
    if not (folder / "__init__.py").is_file():
        raise PluginError(f"plugin folder {str(folder)!r} is not a package (no __init__.py)")
    loaded = sys.modules.get(folder.name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").parent != folder:
        raise PluginError(f"plugin folder {str(folder)!r}: a module named {folder.name!r} is already imported "
                          f"from {getattr(loaded, '__file__', None)}; rename the package")
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))
    try:
        return importlib.import_module(folder.name)
    except Exception as error:  # noqa: BLE001 - the user's package raised while importing
        raise PluginError(f"plugin {str(folder)!r} failed to import: {type(error).__name__}: {error}") from error


def _load_file(path: Path) -> ModuleType:
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise PluginError(f"plugin {str(path)!r} is not a file")
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    name = f"{FILE_MODULE_PREFIX}{resolved.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginError(f"plugin {str(path)!r} failed to import: {type(error).__name__}: {error}") from error
    return module
