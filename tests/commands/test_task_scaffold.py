"""``mmgrpo task new``: every modality's package makes data and passes its reward tests. That the image package
installs with pip, passes its own tests and trains from another folder is shown by running the guide as written
(tests/e2e/test_writing_tasks_guide.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mmgrpo.cli import main


@pytest.mark.parametrize("modality", ["video", "audio", "text"])
def test_every_modality_scaffold_makes_data_and_passes_its_reward_tests(modality: str, tmp_path: Path) -> None:
    name = f"counting_{modality}"
    assert main(["task", "new", name, "--modality", modality, "--out", str(tmp_path)]) == 0
    package = tmp_path / f"mmgrpo-{name.replace('_', '-')}"
    data = tmp_path / "data"
    assert main(["data", "make", "--plugin", str(package / name), "--recipe", name, "--n", "6",
                 "--out", str(data)]) == 0
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    assert rows and all(1 <= row["answer"] <= 5 for row in rows)
    assert (modality == "text") == all(modality not in row for row in rows)
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_rewards.py"],
                           cwd=package, capture_output=True, text=True, check=False,
                           env={"PYTHONPATH": f"{package}:{Path.cwd()}", "PATH": "/usr/bin:/bin"})
    assert tests.returncode == 0, tests.stdout[-3000:]


def test_a_scaffold_never_overwrites_and_names_must_be_identifiers(tmp_path: Path, capsys) -> None:
    assert main(["task", "new", "dots", "--modality", "image", "--out", str(tmp_path)]) == 0
    assert main(["task", "new", "dots", "--modality", "audio", "--out", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["task", "new", "Dots-2", "--modality", "image", "--out", str(tmp_path)]) == 2
    assert "must be a lower-case Python identifier" in capsys.readouterr().err
