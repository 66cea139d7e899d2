"""Atomic, resumable checkpoints: ``checkpoints/step-N/``.

A checkpoint folder holds the model in ``save_pretrained`` format (loadable by plain
transformers, or the LoRA adapter for PEFT models) plus the processor, and
``trainer_state.pt`` with everything else an exact resume needs (optimizer, scheduler,
RNG states, data position, step). It is written into a temporary sibling folder and
renamed into place, so a crash mid-save never leaves a half-written ``step-N`` and
never destroys the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
INFO_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class TrainerState:
    """What besides the weights must survive a restart to continue exactly."""

    step: int
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    data: dict[str, Any] | None = None  # position of the prompt sampler
    extra: dict[str, Any] | None = None  # e.g. dynamic-group-size statistics
    rng: dict[str, Any] | None = None


def capture_rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU + every CUDA device) generator states."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def step_dirs(checkpoint_root: Path) -> list[tuple[int, Path]]:
    """Completed checkpoints under ``checkpoint_root``, oldest first."""
    if not checkpoint_root.is_dir():
        return []
    found = []
    for child in checkpoint_root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(checkpoint_root: Path) -> Path | None:
    found = step_dirs(checkpoint_root)
    return found[-1][1] if found else None


def save_checkpoint(
    checkpoint_root: Path,
    model: torch.nn.Module,
    processor: Any,
    state: TrainerState,
    *,
    keep_last: int | None = None,
) -> Path:
    """Write ``step-<state.step>`` atomically, then prune to the ``keep_last`` newest."""
    checkpoint_root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_root / f"step-{state.step}"
    staging = checkpoint_root / f".tmp-step-{state.step}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    model.save_pretrained(staging)
    if processor is not None:
        processor.save_pretrained(staging)
    state.rng = capture_rng_state()
    torch.save(state.__dict__, staging / STATE_FILE)
    (staging / INFO_FILE).write_text(json.dumps({"step": state.step, "data": state.data}, indent=2, default=str))
    _fsync_tree(staging)
    if final.exists():  # re-saving the same step: move the old one aside first
        retired = checkpoint_root / f".old-step-{state.step}-{os.getpid()}"
        os.replace(final, retired)
        os.replace(staging, final)
        shutil.rmtree(retired)
    else:
        os.replace(staging, final)
    if keep_last is not None and keep_last > 0:
        for _, old in step_dirs(checkpoint_root)[:-keep_last]:
            shutil.rmtree(old)
    return final


def load_trainer_state(checkpoint_dir: Path) -> TrainerState:
    """Read ``trainer_state.pt`` (the weights are loaded by the model loader from the same folder)."""
    path = checkpoint_dir / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir} is not an mmgrpo checkpoint: {STATE_FILE} is missing")
    return TrainerState(**torch.load(path, map_location="cpu", weights_only=False))


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
