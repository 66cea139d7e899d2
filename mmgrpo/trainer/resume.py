"""Which run folder a job may write to, and where a resumed job picks up.

Checked before any heavy work: a fresh run never writes into an existing run's folder;
``--resume`` continues a folder from its newest checkpoint (GRPO, else the finished SFT
model, else an SFT checkpoint), with a config that may differ only in keys that do not
change what the run computes, unless ``checkpoint.allow_config_changes`` says otherwise.
``mmgrpo sft --out DIR`` follows the same rules for its checkpoints under ``DIR/checkpoints``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mmgrpo.config import Config
from mmgrpo.trainer.checkpoint import STATE_FILE, latest_checkpoint

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
CHECKPOINTS = "checkpoints"
SFT_MODEL = Path("sft") / "model"  # the policy after SFT: the start (and KL reference) of GRPO
SFT_CHECKPOINTS = Path("sft") / "checkpoints"
SFT_RUN_CONFIG = "sft_config.yaml"  # beside the model ``mmgrpo sft`` saves: the config it trained with
# Keys (or sections, ending in ".") that a resumed run may change and still continue exactly:
# where and how it logs, checkpoints and evaluates, and how many threads it runs on.
SAFE_TO_CHANGE = ("log.", "checkpoint.", "eval.", "data.dir", "train.num_threads", "task.reward_workers")
# What a run leaves once it has trained or evaluated anything; a folder without any of these
# (a start that failed early, e.g. on a bad dataset path) may be reused by a fresh run.
RUN_OUTPUTS = ("metrics.jsonl", "evaluations.json", "summary.json", CHECKPOINTS, "sft")


class RunFolderError(ValueError):
    """A run folder cannot be started or resumed as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ResumePoint:
    """Where a run picks up; the first one set is the newest; none set: a fresh run."""

    grpo: Path | None = None  # a GRPO checkpoint
    sft_model: Path | None = None  # SFT finished, GRPO saved nothing yet
    sft_checkpoint: Path | None = None  # SFT was stopped

    @property
    def weights(self) -> Path | None:
        """The folder the policy's weights load from."""
        return self.grpo or self.sft_model or self.sft_checkpoint

    @property
    def past_sft(self) -> bool:
        return self.grpo is not None or self.sft_model is not None


def plan_resume(config: Config, run_dir: Path) -> ResumePoint:
    """Where the run in ``run_dir`` picks up: nowhere for a fresh run (refused if ``run_dir``
    holds a run already), else its newest checkpoint or ``checkpoint.resume``.

    Raises :class:`RunFolderError` when there is nothing to resume or the config changed
    keys that alter the run.
    """
    resume = config.checkpoint.resume
    if resume is None:
        if any((run_dir / name).exists() for name in RUN_OUTPUTS):
            raise RunFolderError(
                f"{run_dir} already holds a run (log.run_name={run_dir.name!r}): continue it with --resume, "
                "or choose another log.run_name, or delete the folder"
            )
        return ResumePoint()
    if resume == "latest":
        point = ResumePoint(
            grpo=latest_checkpoint(run_dir / CHECKPOINTS),
            sft_model=run_dir / SFT_MODEL if (run_dir / SFT_MODEL).is_dir() else None,
            sft_checkpoint=latest_checkpoint(run_dir / SFT_CHECKPOINTS),
        )
        if point.weights is None:
            raise RunFolderError(
                f"--resume: no checkpoint to resume in {run_dir} (none under {CHECKPOINTS}/ or sft/); "
                "start afresh under another log.run_name, or delete the folder"
            )
    else:
        point = ResumePoint(grpo=Path(resume))
        if not (point.grpo / STATE_FILE).is_file():
            raise RunFolderError(f"checkpoint.resume={resume}: not an mmgrpo checkpoint ({STATE_FILE} is missing)")
    check_config_changes(run_dir / CONFIG_FILE, config)
    logger.info("resuming %s from %s", run_dir, point.weights)
    return point


def plan_sft_resume(config: Config, out: Path, resume: bool) -> Path | None:
    """The checkpoint under ``out/checkpoints`` that ``mmgrpo sft --out out`` continues (``resume``), None for a
    fresh start; raises :class:`RunFolderError` for a fresh start over a stopped run (its checkpoints would be lost),
    a resume with nothing to resume, or a config that changes what the run computes."""
    saved = latest_checkpoint(out / CHECKPOINTS)
    if not resume:
        if saved is not None:
            raise RunFolderError(f"{out} holds a stopped SFT run (its {saved.name}): continue it with --resume, "
                                 "or choose another --out, or delete the folder")
        return None
    if saved is None:
        finished = " (it holds a finished model)" if (out / "config.json").is_file() else ""
        raise RunFolderError(f"--resume: no SFT checkpoint under {out / CHECKPOINTS}{finished}")
    check_config_changes(out / SFT_RUN_CONFIG, config)
    logger.info("resuming the SFT of %s from %s", out, saved)
    return saved


def check_config_changes(saved_path: Path, config: Config) -> list[str]:
    """The keys where ``config`` differs from the run's saved config (logged); raises
    :class:`RunFolderError` for keys outside :data:`SAFE_TO_CHANGE` unless
    ``checkpoint.allow_config_changes``."""
    if not saved_path.is_file():
        return []
    saved = flatten(Config.from_dict(yaml.safe_load(saved_path.read_text())).to_dict())
    current = flatten(config.to_dict())
    missing = "<unset>"
    changed = sorted(key for key in saved.keys() | current.keys() if saved.get(key, missing) != current.get(key, missing))
    describe = {key: f"{key}: {saved.get(key, missing)!r} -> {current.get(key, missing)!r}" for key in changed}
    unsafe = [key for key in changed if not key.startswith(SAFE_TO_CHANGE)]
    if unsafe and not config.checkpoint.allow_config_changes:
        raise RunFolderError(
            f"--resume with a config that changes what the run computes ({'; '.join(describe[k] for k in unsafe)}): "
            f"restore the values of {saved_path}, or set checkpoint.allow_config_changes=true to continue anyway"
        )
    if changed:
        logger.warning("resuming with changed config keys: %s", "; ".join(describe.values()))
    return changed


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": [1]}}`` -> ``{"a.b.0": 1}``; empty dicts and lists stay as values."""
    if isinstance(tree, dict) and tree:
        items = tree.items()
    elif isinstance(tree, list) and tree:
        items = ((str(index), value) for index, value in enumerate(tree))
    else:
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in items:
        flat |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
    return flat
