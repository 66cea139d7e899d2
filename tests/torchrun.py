"""``python -m torch.distributed.run --standalone`` for the multi-rank tests, with the one retry that
torchrun's own port choice needs: it picks a free port, closes it and hands the number to the ranks, and
another process may take it in between ("Address already in use", a known race PyTorch's own tests retry)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

PORT_RACE = "address already in use"


def torchrun(
    ranks: int, script: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """``script`` (a path and its arguments, or ``-m module ...``) on ``ranks`` local ranks, gloo on CPU."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *script]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0 and PORT_RACE in (done.stdout + done.stderr).lower():
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout, check=False)
    return done
