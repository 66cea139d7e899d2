"""eval sits below the trainer: importing it (and the eval command) loads no ``mmgrpo.trainer`` module."""

from __future__ import annotations

import subprocess
import sys


def test_eval_does_not_import_the_trainer():
    probe = (
        "import sys, eval, eval.benchmarks, mmgrpo.commands.eval\n"
        "print(sorted(m for m in sys.modules if m.startswith('mmgrpo.trainer')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
