"""Atomic, resumable checkpoints: ``checkpoints/step-N/``.

A checkpoint folder holds the model in ``save_pretrained`` format (loadable by plain
transformers, or the LoRA adapter for PEFT models) plus the processor, and the trainer
state an exact resume needs (optimizer, scheduler, RNG states, data position, step,
where the KL reference loads from) as ``trainer_state.json`` + ``trainer_state.safetensors``:
nothing in a checkpoint is unpickled, so a shared checkpoint cannot run code on resume.
It is written into a temporary sibling folder and renamed into place, so a crash mid-save
never leaves a half-written ``step-N`` and never destroys the previous checkpoint.

Under a distributed training back end every rank takes part: the back end saves the
optimizer (its own per-rank files, e.g. DeepSpeed's ``zero/``, or a gathered state the
trainer state records), the weights are gathered into one ``save_pretrained`` folder
(so every checkpoint is also a consolidated export), and the main process writes the
rest and renames the folder into place once every rank is done.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch

from mmgrpo.models.compat import save_pretrained
from mmgrpo.trainer.interrupts import stop_on_signals
from mmgrpo.trainer.safe_state import dump_state, load_state

if TYPE_CHECKING:
    from mmgrpo.trainer.backends import TrainingBackend

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"  # written last: its presence marks a complete checkpoint
TENSORS_FILE = "trainer_state.safetensors"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STAGING_PREFIXES = (".tmp-", ".old-")  # leftovers of a save that died midway


@dataclass
class TrainerState:
    """What besides the weights must survive a restart to continue exactly."""

    step: int
    optimizer: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    data: dict[str, Any] | None = None  # position of the prompt sampler
    extra: dict[str, Any] | None = None  # e.g. dynamic-group-size statistics
    rng: dict[str, Any] | None = None  # the main process's generator states
    rank_rngs: list[dict[str, Any]] | None = None  # every rank's, in rank order, when several ranks saved
    reference: str | None = None  # where the frozen KL reference (the initial policy) loads from

    def rng_of(self, rank: int, world_size: int) -> dict[str, Any] | None:
        """Rank ``rank``'s generator states (e.g. for its LoRA dropout): its own when as many ranks saved the
        checkpoint as resume it, else the main process's."""
        if self.rank_rngs is not None and len(self.rank_rngs) == world_size:
            return self.rank_rngs[rank]
        return self.rng


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
    rng: dict[str, Any] | None = None,
    backend: TrainingBackend | None = None,
) -> Path:
    """Write ``step-<state.step>`` atomically, then prune to the ``keep_last`` newest.

    ``rng`` is the generator state to record (default: the current one). With a training
    ``backend``, every rank calls this (with its own ``rng``: every rank's is recorded) and the back end
    saves the optimizer and gathers the weights.
    """
    main = backend is None or backend.ranks.is_main_process
    final = checkpoint_root / f"step-{state.step}"
    staging = _new_staging(final) if main else None
    weights = None
    rngs = [rng if rng is not None else capture_rng_state()]
    if backend is not None:
        rngs = backend.ranks.gather(rngs[0])
        staging = Path(backend.ranks.broadcast_object(str(staging) if main else None))
        state.optimizer = backend.save_optimizer(staging)
        backend.ranks.barrier()  # every rank's shard files are written
        weights = backend.full_state_dict() if backend.shards_weights else None  # else the module here is whole
    if main:
        state.rng, state.rank_rngs = rngs[0], rngs if len(rngs) > 1 else None
        write_model(staging, model, processor, weights)
        dump_state(asdict(state), staging / STATE_FILE, staging / TENSORS_FILE)
        _commit(staging, final)
        if keep_last is not None and keep_last > 0:
            for _, old in step_dirs(checkpoint_root)[:-keep_last]:
                shutil.rmtree(old)
    if backend is not None:
        backend.ranks.barrier()  # no rank goes on (or reads the checkpoint) before it is in place
    return final


def save_model(
    folder: Path, model: torch.nn.Module, processor: Any, weights: dict[str, torch.Tensor] | None = None
) -> Path:
    """``save_pretrained`` of the model (and processor) into ``folder``, atomically (``weights``: the whole model's
    state when ``model`` itself holds only shards of it)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    return _write_atomically(folder, lambda staging: write_model(staging, model, processor, weights))


def write_model(
    folder: Path, model: torch.nn.Module, processor: Any, weights: dict[str, torch.Tensor] | None = None
) -> None:
    """``save_pretrained`` of the model (and processor) into ``folder`` as it is, other files kept (not atomic:
    :func:`save_model` is); ``weights``: the whole model's state when ``model`` itself holds only shards of it."""
    gathered = {} if weights is None else {"state_dict": weights}
    if getattr(model, "peft_config", None):  # the adapter being trained, not a frozen reference beside it
        model.save_pretrained(folder, selected_adapters=[model.active_adapter], **gathered)
    else:
        save_pretrained(model, folder, **gathered)
    if processor is not None:
        processor.save_pretrained(folder)


def _write_atomically(final: Path, write: Callable[[Path], None]) -> Path:
    """Let ``write`` fill a staging sibling of ``final``, then rename it into place: ``final`` is
    either the old complete folder or the new complete one, never half-written."""
    staging = _new_staging(final)
    write(staging)
    return _commit(staging, final)


def _new_staging(final: Path) -> Path:
    """An empty staging sibling of ``final`` (leftovers of killed saves removed first)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(final.parent)
    staging = final.with_name(f".tmp-{final.name}-{os.getpid()}")
    staging.mkdir()
    return staging


def _commit(staging: Path, final: Path) -> Path:
    """Flush ``staging`` to disk and rename it to ``final``, replacing an older ``final``."""
    _fsync_tree(staging)
    if final.exists():  # re-saving the same folder: move the old one aside first
        retired = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, retired)
        os.replace(staging, final)
        shutil.rmtree(retired)
    else:
        os.replace(staging, final)
    return final


def checkpoint_step(checkpoint_dir: Path) -> int:
    """The step a checkpoint was saved at (read without loading its tensors)."""
    return int(json.loads((checkpoint_dir / STATE_FILE).read_text())["step"])


def load_trainer_state(checkpoint_dir: Path) -> TrainerState:
    """Read the trainer state of a checkpoint (the weights are loaded by the model loader from the same folder)."""
    path = checkpoint_dir / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir} is not an mmgrpo checkpoint: {STATE_FILE} is missing")
    return TrainerState(**load_state(path, checkpoint_dir / TENSORS_FILE))


def remove_stale_staging(checkpoint_root: Path) -> None:
    """Delete half-written folders a killed save left behind (one writer per run: none is live)."""
    if not checkpoint_root.is_dir():
        return
    for child in checkpoint_root.iterdir():
        if child.is_dir() and child.name.startswith(_STAGING_PREFIXES):
            logger.info("removing %s, left by an interrupted checkpoint save", child)
            shutil.rmtree(child)


def retire_checkpoints_after(checkpoint_root: Path, step: int) -> list[Path]:
    """Move checkpoints newer than ``step`` (an abandoned timeline) into an ``abandoned-*`` folder.

    Resuming from step k starts a new timeline: the old step k+1.. checkpoints must no
    longer count as newest (``latest_checkpoint``) nor push the new ones out (``keep_last``).
    Returns their new paths.
    """
    later = [path for number, path in step_dirs(checkpoint_root) if number > step]
    if not later:
        return []
    archive = checkpoint_root / f"abandoned-{time.strftime('%Y%m%d-%H%M%S')}-after-step-{step}"
    archive.mkdir(parents=True, exist_ok=True)
    moved = [Path(shutil.move(str(path), str(archive / path.name))) for path in later]
    logger.warning(
        "resuming from step %d: moved the later checkpoints of the abandoned run (%s) to %s",
        step, ", ".join(path.name for path in later), archive,
    )
    return moved


@contextmanager
def checkpoint_on_failure(save_last: Callable[[BaseException], None]) -> Iterator[None]:
    """Stop requests (SIGINT, SIGTERM) raise inside the block; on one, or on an error, ``save_last(failure)``
    writes the emergency checkpoint (SFT and GRPO each know what their last finished step is), then the
    failure propagates."""
    try:
        with stop_on_signals():
            yield
    except (KeyboardInterrupt, Exception) as failure:
        save_last(failure)
        raise


def save_last_finished(
    failure: BaseException, step: int, save: Callable[[], Path], *, weights_intact: bool, phase: str = "step"
) -> None:
    """The emergency checkpoint after ``failure`` cut step ``step + 1`` short: save step ``step``
    when the weights are still those of it, and say what happened either way. Never raises:
    the original failure is what the caller re-raises."""
    what = _describe(failure)
    if not weights_intact:
        logger.error(
            "%s during the weight update of %s %d: the weights are no longer those of %s %d, so no checkpoint "
            "is saved; resume from the last saved one", what, phase, step + 1, phase, step,
        )
        return
    try:
        path = save()
    except Exception:
        logger.exception("%s during %s %d: saving the checkpoint of %s %d failed", what, phase, step + 1, phase, step)
        return
    logger.warning("%s during %s %d: saved the checkpoint of %s %d to %s", what, phase, step + 1, phase, step, path)


def _describe(failure: BaseException) -> str:
    if isinstance(failure, KeyboardInterrupt):
        return str(failure) or "SIGINT"  # interrupts.Interrupted carries the signal's name
    return f"{type(failure).__name__} ({failure})"


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
