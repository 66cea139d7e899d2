"""lmms-eval 0.7.3 as a test oracle, when its separate environment is there (``$MMGRPO_LMMS_EVAL_PYTHON``)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ORACLE_PYTHON = Path(os.environ.get("MMGRPO_LMMS_EVAL_PYTHON", "/nonexistent"))
needs_oracle = pytest.mark.skipif(
    not ORACLE_PYTHON.is_file(),
    reason="no lmms-eval environment (set MMGRPO_LMMS_EVAL_PYTHON to its python; docs/benchmarks.md says how to "
    "make one)",
)


def lmms_verdicts(cases: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """lmms-eval's verdicts on ``cases`` (the input format of ``lmms_oracle.py``)."""
    script = Path(__file__).with_name("lmms_oracle.py")
    done = subprocess.run([str(ORACLE_PYTHON), str(script)], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
