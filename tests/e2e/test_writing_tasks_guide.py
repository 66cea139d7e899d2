"""docs/writing_tasks.md, run as written: its bash blocks in a shell, its python blocks written to the
file their first line names (``# file: PATH``) or else run, all in order, in a fresh folder.

The commands run in a virtual environment that sees this one's packages, so ``pip install -e``
installs the guide's package there and nowhere else (offline: no build isolation, no dependencies).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing_tasks.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)
FILE_LINE = re.compile(r"# file: (\S+)\n")


def guide_blocks() -> list[tuple[str, str]]:
    return [(language, code) for language, code in BLOCK.findall(GUIDE.read_text())]


def isolated_environment(folder: Path) -> dict[str, str]:
    """PATH with ``python``, ``pip`` and ``mmgrpo`` of a virtual environment over this one's packages."""
    venv = folder / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = venv / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\n[ "$1" = install ] && shift && exec {sys.executable} -m pip --python {python} install '
                   f'-q --no-deps --no-build-isolation "$@"\nexec {sys.executable} -m pip --python {python} "$@"\n')
    mmgrpo = venv / "bin" / "mmgrpo"
    mmgrpo.write_text(f'#!/bin/sh\nexec {python} -m mmgrpo "$@"\n')
    for script in (pip, mmgrpo):
        script.chmod(0o755)
    return {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}


@pytest.mark.slow
def test_every_block_of_the_guide_runs_as_written(tmp_path: Path) -> None:
    blocks = guide_blocks()
    assert [language for language, _ in blocks].count("bash") >= 4 and any(FILE_LINE.match(code) for _, code in blocks)
    env = isolated_environment(tmp_path)
    for index, (language, code) in enumerate(blocks):
        where = f"block {index} ({language}):\n{code}"
        if language == "bash":
            done = subprocess.run(["bash", "-e", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        elif language == "python" and (target := FILE_LINE.match(code)):
            (tmp_path / target.group(1)).write_text(code[target.end():])
        elif language == "python":
            done = subprocess.run(["python", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where}\n{done.stderr[-3000:]}"
        elif language == "toml":  # shown from the package the guide made: it must say what the file says
            assert code.strip() in (tmp_path / "mmgrpo-leftmost" / "pyproject.toml").read_text(), where
        else:
            pytest.fail(f"{where}: no rule to check a {language} block")
    assert (tmp_path / "runs" / "leftmost" / "report.html").is_file()
