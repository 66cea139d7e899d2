"""Helpers of the 2-rank end-to-end tests: ``mmgrpo train`` under torchrun (gloo on CPU), and how such a run
ended."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from mmgrpo.trainer.checkpoint import latest_checkpoint
from tests.e2e import distributed_train
from tests.torchrun import torchrun

NEEDS_DEEPSPEED = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is not installed (pip install 'mmgrpo[deepspeed]'): ZeRO runs NOT tested",
)
EXTENSIONS_CACHE = Path(tempfile.gettempdir()) / "mmgrpo-torch-extensions"
STEPS = 3


def torchrun_train(
    *arguments: str, stop_in_step: int | None = None, hang_in_step: int | None = None, stop_in_sft_step: int | None = None,
    ranks: int = 2, nodes: int = 1,
) -> subprocess.CompletedProcess:
    stop = ["--stop-in-step", str(stop_in_step)] if stop_in_step else []
    stop += ["--hang-in-step", str(hang_in_step)] if hang_in_step else []
    stop += ["--stop-in-sft-step", str(stop_in_sft_step)] if stop_in_sft_step else []
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))
    return torchrun(ranks, [distributed_train.__file__, *stop, *arguments], env={"TORCH_EXTENSIONS_DIR": extensions},
                    nodes=nodes)


def succeeded(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-8000:]}"


def stopped_after_step_one(done: subprocess.CompletedProcess, checkpoints: Path) -> None:
    """A run stopped by SIGTERM in step 2 fails (143 from each rank) with step 1 saved."""
    output = f"{done.stdout[-3000:]}\n{done.stderr[-8000:]}"
    assert done.returncode != 0, f"the stopped run succeeded:\n{output}"
    saved = latest_checkpoint(checkpoints)
    assert saved is not None and saved.name == "step-1", f"latest checkpoint {saved} after the stop:\n{output}"
