"""The documentation site (mkdocs.yml, docs/) builds with no warning, the README's links into it
resolve, its families table names every tiny family, and scripts/results.py finds every recipe's documented
command (without running any)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def test_the_site_builds_strict_without_warnings(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip('mkdocs is not installed (pip install -e ".[dev]" installs it): the docs site is not built')
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    warnings = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "results" / "index.html").is_file()


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {github_anchor(heading) for heading in HEADING.findall(FENCE.sub("", path.read_text()))}


def test_readme_links_resolve() -> None:
    """Every relative link of the README names a file that exists, and a heading there if it has an anchor."""
    broken = []
    for target in LINK.findall(README.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert not broken, f"README links that go nowhere: {broken}"


def section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_getting_started_shows_the_readme_set_up_commands() -> None:
    """The set-up section is in both places (CI runs the README's commands); they must not drift."""
    heading = "Set up on a fresh machine"
    assert section((ROOT / "docs" / "getting_started.md").read_text(), heading) == section(README.read_text(), heading)


def load_results_script():
    spec = importlib.util.spec_from_file_location("results_script", ROOT / "scripts" / "results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module


def test_results_script_lists_every_recipe_with_its_documented_command() -> None:
    results = load_results_script()
    found = {recipe.name: recipe for recipe in results.recipes()}
    assert set(found) == {path.stem for path in (ROOT / "recipes").glob("*.yaml")}
    assert found["arithmetic"].command == ["mmgrpo", "train", "recipes/arithmetic.yaml"] and found["arithmetic"].gpus == 0
    seven_b = found["clevr70k_qwen2_5_vl_7b"]
    assert seven_b.command[:4] == ["torchrun", "--nproc-per-node", "8", "-m"] and seven_b.gpus == 8
    assert "data.test.0.path=/data/superclevr_test200_counting_problems.jsonl" in seven_b.command  # continued line
    assert found["geometry3k"].gpus == 1

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "results.py"), "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in found:
        assert f"# {name}: " in done.stdout
    # the table it rewrites is there and parses, one row per recipe (a mixed run: one per task)
    _, rows, _ = results.read_table(results.RESULTS)
    assert {row.split(":")[0] for row in rows} == set(found)


def test_readme_families_table_lists_every_tiny_family() -> None:
    """A family gaining a tiny checkpoint (and its tests) is named in the README's table, by its model type."""
    from mmgrpo.models.tiny import TINY_FAMILIES

    rows = [line.split("|") for line in section(README.read_text(), "Model families").splitlines()
            if line.startswith("| ")]
    model_types = {name for row in rows if len(row) > 2 for name in re.findall(r"`(\w+)`", row[2])}
    assert set(TINY_FAMILIES.names()) <= model_types, set(TINY_FAMILIES.names()) - model_types
