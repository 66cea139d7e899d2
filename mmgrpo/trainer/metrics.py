"""Per-step metrics sinks: ``metrics.jsonl`` always, TensorBoard and W&B when enabled."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All rows of a ``metrics.jsonl`` file."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsLogger:
    """Appends one JSON line per step and mirrors scalars to TensorBoard / W&B.

    On resume, rows written after the resumed step (by the interrupted run) are dropped so
    the file reads as one uninterrupted run.
    """

    def __init__(
        self,
        run_dir: Path,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "mmgrpo",
        run_name: str = "",
        config: dict[str, Any] | None = None,
        resume_step: int | None = None,
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None:
            kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= resume_step]
            self.path.write_text("".join(json.dumps(row) + "\n" for row in kept))
        self._file = open(self.path, "a", encoding="utf-8")
        self._tensorboard = _open_tensorboard(run_dir / "tensorboard") if tensorboard else None
        self._wandb = _open_wandb(wandb_project, run_name, config) if wandb else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        row = {"step": step, **metrics}
        self._file.write(json.dumps(row, default=float) + "\n")
        self._file.flush()
        scalars = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if self._tensorboard is not None:
            for key, value in scalars.items():
                self._tensorboard.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()


def _open_tensorboard(log_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning("tensorboard is not installed; skipping TensorBoard logging")
        return None
    return SummaryWriter(str(log_dir))


def _open_wandb(project: str, run_name: str, config: dict[str, Any] | None):
    try:
        import wandb
    except ImportError:
        logger.warning("wandb is not installed; skipping W&B logging (pip install 'mmgrpo[wandb]')")
        return None
    return wandb.init(project=project, name=run_name or None, config=config)
