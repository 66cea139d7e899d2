"""Per-step logs: ``metrics.jsonl`` and ``completions.jsonl`` always, TensorBoard and W&B when enabled."""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mmgrpo.run_files import COMPLETIONS_FILE, METRICS_FILE, STEP_FILES, read_metrics
from mmgrpo.types import Sample
from processors import MODALITIES

logger = logging.getLogger(__name__)

WANDB_ID_FILE = "wandb_run_id"  # the W&B run this mmgrpo run logs to, kept across resumes


def keep_steps_up_to(path: Path, step: int) -> None:
    """Rewrite ``path`` (atomically) without the rows of steps after ``step``."""
    if not path.is_file():
        return
    kept = [row for row in read_metrics(path) if row.get("step", 0) <= step]
    staging = path.with_name(path.name + ".tmp")
    staging.write_text("".join(json.dumps(row, default=str) + "\n" for row in kept), encoding="utf-8")
    os.replace(staging, path)


def completion_prompt(sample: Sample) -> dict[str, Any]:
    """What a completion log records of its prompt: the user's text and the media references by
    modality (paths or URLs; media held in memory appear as a placeholder)."""
    media = {kind: [str(ref) for ref in sample.media(kind)] for kind in MODALITIES if sample.media(kind)}
    return {"prompt": sample.user_text(), "media": media}


class MetricsLogger:
    """Appends one JSON line per step (and sampled completions) and mirrors scalars to TensorBoard / W&B.

    On resume at ``resume_step``, every per-step log drops what the interrupted run wrote
    after that step (TensorBoard through its purge step), so each reads as one uninterrupted run.
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
        self.path = run_dir / METRICS_FILE
        self.completions_path = run_dir / COMPLETIONS_FILE
        if resume_step is not None:
            for name in STEP_FILES:
                keep_steps_up_to(run_dir / name, resume_step)
        self._file = open(self.path, "a", encoding="utf-8")
        purge_step = None if resume_step is None else resume_step + 1
        self._tensorboard = _open_tensorboard(run_dir / "tensorboard", purge_step) if tensorboard else None
        self._wandb = _open_wandb(run_dir, wandb_project, run_name, config) if wandb else None

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

    def log_completions(self, records: list[dict[str, Any]]) -> None:
        """Append sampled completions (each record carries its ``step``) to ``completions.jsonl``, and
        show them in TensorBoard (a text table, and each prompt's first image) and W&B (a table with
        the images)."""
        with open(self.completions_path, "a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, default=str) + "\n" for record in records)
        if not records:
            return
        step = int(records[0]["step"])
        images = prompt_images(records) if self._tensorboard is not None or self._wandb is not None else {}
        if self._tensorboard is not None:
            self._tensorboard.add_text("completions", completions_markdown(records), step)
            for sample_id, image in images.items():
                self._tensorboard.add_image(f"completions/{sample_id}", np.asarray(image), step, dataformats="HWC")
        if self._wandb is not None:
            self._wandb.log({"completions": _wandb_table(records, images)}, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tensorboard is not None:
            self._tensorboard.close()
        if self._wandb is not None:
            self._wandb.finish()


COMPLETION_COLUMNS = ("step", "sample_id", "prompt", "answer", "completion", "reward", "advantage", "correct")


def completions_markdown(records: list[dict[str, Any]]) -> str:
    """The records as a Markdown table (what TensorBoard's text tab renders)."""
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(COMPLETION_COLUMNS) + " |", "|" + "---|" * len(COMPLETION_COLUMNS)]
    lines += ["| " + " | ".join(cell(record.get(column, "")) for column in COMPLETION_COLUMNS) + " |" for record in records]
    return "\n".join(lines)


def prompt_images(records: list[dict[str, Any]]) -> dict[str, Image.Image]:
    """Each logged prompt's first image that can still be read (RGB), by sample id."""
    from processors import MediaError
    from processors.image import decode_image, to_rgb

    images: dict[str, Image.Image] = {}
    for record in records:
        refs = record.get("media", {}).get("image", [])
        if record["sample_id"] in images or not refs:
            continue
        try:
            images[record["sample_id"]] = to_rgb(decode_image(refs[0], refs[0]))
        except (MediaError, OSError):
            continue  # an in-memory or moved image: the table shows the text only
    return images


def _wandb_table(records: list[dict[str, Any]], images: dict[str, Image.Image]) -> Any:
    import wandb

    table = wandb.Table(columns=["image", *COMPLETION_COLUMNS])
    for record in records:
        image = images.get(record["sample_id"])
        table.add_data(wandb.Image(image) if image is not None else None, *(record.get(c) for c in COMPLETION_COLUMNS))
    return table


class SilentMetricsLogger:
    """What a rank other than the main process logs with: nothing (the main process logs the
    metrics, reduced over ranks, and every rank's completions)."""

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        pass

    def log_completions(self, records: list[dict[str, Any]]) -> None:
        pass

    def close(self) -> None:
        pass


def _open_tensorboard(log_dir: Path, purge_step: int | None):
    """A writer; with ``purge_step`` TensorBoard hides the events of steps >= it written before."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning("tensorboard is not installed; skipping TensorBoard logging")
        return None
    return SummaryWriter(str(log_dir), purge_step=purge_step)


def _open_wandb(run_dir: Path, project: str, run_name: str, config: dict[str, Any] | None):
    """A W&B run writing its files under ``run_dir``; a resumed mmgrpo run continues the same W&B run.

    The W&B run id is kept in ``run_dir/wandb_run_id``. W&B keeps the history it already has, so
    after a resume it ignores the re-logged steps up to its last one (it warns about each).
    """
    try:
        import wandb
    except ImportError:
        logger.warning("wandb is not installed; skipping W&B logging (pip install 'mmgrpo[wandb]')")
        return None
    id_file = run_dir / WANDB_ID_FILE
    run_id = id_file.read_text().strip() if id_file.is_file() else secrets.token_hex(8)
    id_file.write_text(run_id + "\n")
    return wandb.init(
        project=project, name=run_name or None, config=config, dir=str(run_dir), id=run_id, resume="allow"
    )
