"""The packages import only downward: a lower layer never imports a higher one (statically, lazily inside a
function, or for type checking), so each part can be read, tested and replaced without the ones above it.

The few imports that still point upward are listed in ``KNOWN_UPWARD`` with the move that will remove each;
an entry that no longer happens fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mmgrpo", "processors", "data_recipes", "tasks", "eval")
SKIPPED = ("mmgrpo/scaffold/template",)  # the task-package template: user code, rendered by `mmgrpo task new`

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    # lowest first; a part is a top-level package, or a module/subpackage directly under mmgrpo
    {"mmgrpo", "mmgrpo.types", "mmgrpo.registry", "mmgrpo.failures", "mmgrpo.skipped_rows", "mmgrpo.run_files"},
    {"processors", "mmgrpo.algos", "mmgrpo.plugins"},
    {"mmgrpo.config", "data_recipes", "mmgrpo.pagekit"},
    {"mmgrpo.models", "mmgrpo.distributed"},
    {"tasks"},
    {"mmgrpo.rollout"},
    {"mmgrpo.reward_models"},
    {"mmgrpo.inputs"},
    {"eval"},
    {"mmgrpo.reports"},
    {"mmgrpo.trainer"},
    {"mmgrpo.sweep"},
    {"mmgrpo.scaffold"},
    {"mmgrpo.commands"},
    {"mmgrpo.cli"},
    {"mmgrpo.__main__"},
))

KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def part_of(module: str) -> str:
    """The layer part a dotted module belongs to."""
    names = module.split(".")
    return ".".join(names[:2]) if names[0] == "mmgrpo" and len(names) > 1 else names[0]


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    return ".".join(relative.parts).removesuffix(".__init__")


def imported_modules(path: Path) -> Iterator[str]:
    """Every absolute import in the file, wherever it stands (top level, function body, TYPE_CHECKING)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def source_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not any(str(path.relative_to(ROOT)).startswith(skipped) for skipped in SKIPPED):
                yield path


def layer_of(part: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if part in layer)


def upward_imports() -> dict[tuple[str, str], str]:
    """(file, imported part) -> the imported module, for every import of a part in the same or a higher layer."""
    found = {}
    for path in source_files():
        importer = part_of(module_name(path))
        for module in imported_modules(path):
            target = part_of(module)
            if module.split(".")[0] in PACKAGES and target != importer and layer_of(target) >= layer_of(importer):
                found[(str(path.relative_to(ROOT)), target)] = module
    return found


def test_every_part_has_a_layer():
    parts = {part_of(module_name(path)) for path in source_files()}
    layered = set().union(*LAYERS)
    assert parts <= layered, f"parts without a layer (add them to LAYERS): {sorted(parts - layered)}"


def test_no_part_imports_a_higher_or_equal_layer():
    found = upward_imports()
    unexpected = {key: module for key, module in found.items() if key not in KNOWN_UPWARD}
    assert not unexpected, "upward imports: " + "; ".join(f"{file} imports {module}" for (file, _), module in
                                                            sorted(unexpected.items()))
    gone = sorted(set(KNOWN_UPWARD) - set(found))
    assert not gone, f"these upward imports are gone: remove them from KNOWN_UPWARD: {gone}"


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """A lazy import of the trainer inside eval is found (the check reads function bodies too)."""
    package = tmp_path / "eval"
    package.mkdir()
    (package / "probe.py").write_text("def f():\n    from mmgrpo.trainer.grpo import GRPOTrainer\n")
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "ROOT", tmp_path)
    assert upward_imports() == {("eval/probe.py", "mmgrpo.trainer"): "mmgrpo.trainer.grpo"}
