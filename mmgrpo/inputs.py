"""What training and evaluation both build from a :class:`~mmgrpo.config.Config`: model paths,
media budgets, tasks and samples.

Below the trainer and eval in the layers (it imports neither), so ``mmgrpo eval`` reads models
and data exactly as ``mmgrpo train``, ``sft`` and ``reject`` do without importing the trainer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import torch

from data_recipes.loading import SkippedRow, load_rows
from data_recipes.make import generation_identity, make_dataset
from mmgrpo.config import DatasetConfig, ModelConfig, TaskConfig
from mmgrpo.models.batch import MediaBudgets
from mmgrpo.models.budget_limits import require_budgets_fit
from mmgrpo.models.loading import ADAPTER_CONFIG, load_model_config, load_processor
from mmgrpo.plugins import load_plugins
from mmgrpo.types import Sample
from processors import AudioBudget, ImageBudget, VideoBudget
from tasks import get_task
from tasks.base import ModelInfo, RowError, Task
from tasks.reward_calls import RewardPolicy
from tasks.tools import TOOLS
from mmgrpo.reward_models import register_reward_models

logger = logging.getLogger(__name__)

TINY_PREFIX = "tiny:"


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_model_path(model: ModelConfig, cache_dir: Path, seed: int) -> str:
    """A loadable path or Hub id; ``tiny:<family>`` builds (once) a tiny random model under ``cache_dir``."""
    if not model.name_or_path.startswith(TINY_PREFIX):
        return model.name_or_path
    from mmgrpo.models.tiny import make_tiny, tiny_identity  # every family's builder: imported only to build one

    family = model.name_or_path[len(TINY_PREFIX) :]
    key = _fingerprint(tiny_identity(family, seed=seed, **model.tiny_options))
    out = cache_dir / f"tiny-{family}-{key}"
    if not (out / "config.json").is_file():
        make_tiny(family, out, seed=seed, **model.tiny_options)
    return str(out)


def reward_policy(task: TaskConfig) -> RewardPolicy:
    """How reward calls run and fail, from ``task.reward_errors``, ``reward_timeout`` and ``reward_workers``."""
    return RewardPolicy(errors=task.reward_errors, timeout=task.reward_timeout, workers=task.reward_workers)


def media_budgets(model: ModelConfig, processor: Any = None) -> MediaBudgets:
    """Per-modality budgets from the model section of the config.

    Video frames get the image pixel range, and at most ``max_frames`` frames of
    ``max_pixels`` in total. Sizes are multiples of the processor's patch x merge size
    (28 for Qwen2/2.5-VL, 32 for Qwen3-VL).
    """
    factor = resize_factor(processor)
    return {
        "image": ImageBudget(min_pixels=model.min_pixels, max_pixels=model.max_pixels, factor=factor),
        "video": VideoBudget(
            fps=model.fps, max_frames=model.max_frames, min_frames=min(4, model.max_frames),
            min_pixels=model.min_pixels, max_pixels=model.max_pixels,
            total_pixels=model.max_pixels * model.max_frames, factor=factor,
        ),
        "audio": AudioBudget(sample_rate=model.audio_sample_rate, max_seconds=model.max_audio_seconds),
    }


def resize_factor(processor: Any, default: int = 28) -> int:
    """Image side multiple of a processor: patch size x spatial merge size (``default`` if unknown)."""
    image_processor = getattr(processor, "image_processor", None)
    patch = getattr(image_processor, "patch_size", None)
    merge = getattr(image_processor, "merge_size", None)
    return patch * merge if isinstance(patch, int) and isinstance(merge, int) else default


@dataclass
class SampleSet:
    """Prompts of one split, their tasks, and every row that could not be used."""

    samples: list[Sample]
    tasks: dict[str, Task]
    skipped: list[SkippedRow] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)  # per sample: its dataset's weight / its size

    def skipped_summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.skipped:
            counts[row.reason] = counts.get(row.reason, 0) + 1
        return counts


def task_model_info(model: ModelConfig, model_path: str) -> ModelInfo:
    """What tasks must know of the policy, read from its files before its weights load: its
    family (``model_type``) and the image budget its batches are built with."""
    adapter = Path(model_path) / ADAPTER_CONFIG  # a LoRA checkpoint: its base model's config says the family
    config_source = json.loads(adapter.read_text())["base_model_name_or_path"] if adapter.is_file() else model_path
    config = load_model_config(config_source, trust_remote_code=model.trust_remote_code)
    processor = load_processor(model_path, trust_remote_code=model.trust_remote_code)
    require_budgets_fit(model, config, processor)  # before any data is loaded
    budgets = media_budgets(model, processor)
    return ModelInfo(family=config.model_type, image_budget=budgets["image"], video_budget=budgets["video"])


def build_task(name: str, task_config: TaskConfig, model: ModelInfo) -> Task:
    """Task ``name`` built with the config's ``task.options`` and ``task.guards``, for ``model``."""
    reserved = sorted({"model", "guards"} & set(task_config.options))
    if reserved:
        raise ValueError(f"task.options cannot set {reserved}: the model comes from model.*, guards from task.guards")
    return get_task(name, model=model, guards=task_config.guards or None, **task_config.options)


def load_samples(
    specs: list[DatasetConfig], task_config: TaskConfig, data_dir: Path, *, seed: int, model: ModelInfo,
    split: str | None = None, tools: Sequence[str] = (),
) -> SampleSet:
    """Samples of every dataset in ``specs`` (generated under ``data_dir`` when a recipe is given), their prompts
    holding the schemas of ``tools`` (``rollout.prompt_tools``; a row's own ``tools`` field wins).

    Tasks are built once per name with ``task_config``'s options for ``model``
    (:func:`task_model_info`), so they see images at the size the model sees them.
    """
    load_plugins([*task_config.plugins, *task_config.reward_plugins])
    register_reward_models(task_config.reward_models)
    schemas = [TOOLS.get(name).spec() for name in tools]  # after the plugins: they may register tools
    result = SampleSet(samples=[], tasks={})
    for spec in specs:
        task_name = spec.task or task_config.name
        if task_name not in result.tasks:
            result.tasks[task_name] = build_task(task_name, task_config, model)
        task = result.tasks[task_name]
        path = spec.path or str(generate_dataset(spec, data_dir, seed))
        loaded = load_rows(
            path, split=split or spec.split, adapter=spec.adapter, adapter_args=spec.adapter_args, limit=spec.limit,
            media_root=spec.media_root, media_cache=spec.media_cache, check_media=spec.check_media,
        )
        result.skipped.extend(loaded.skipped)
        kept, rejected = task_samples(task, loaded.rows, path, think=task_config.think, tools=schemas)
        result.skipped.extend(rejected)
        result.samples.extend(kept)
        result.weights.extend([spec.weight / max(1, len(kept))] * len(kept))
    if result.skipped:
        logger.warning("skipped %d bad rows: %s", len(result.skipped), result.skipped_summary())
    return result


def task_samples(
    task: Task, rows: list[dict[str, Any]], source: str, *, think: bool, tools: Sequence[dict[str, Any]] = ()
) -> tuple[list[Sample], list[SkippedRow]]:
    """The prompts ``task`` makes of ``rows`` (with the tool schemas ``tools``), and the rows it rejects (skipped,
    naming the field and why)."""
    samples, rejected = [], []
    for row in rows:
        try:
            samples.append(task.to_sample(row, think=think, tools=tools))
        except RowError as error:
            rejected.append(SkippedRow(str(error.row_id), source, f"bad field {error.field}", error.reason))
    return samples, rejected


def generate_dataset(spec: DatasetConfig, data_dir: Path, seed: int) -> Path:
    """Run ``spec.recipe`` into a folder named by what it generates from (reused when already there)."""
    if spec.recipe is None:
        raise ValueError("a dataset needs either a path or a recipe")
    options = dict(spec.recipe_args)
    n = int(options.pop("n", 1000))
    test_fraction = float(options.pop("test_fraction", 0.2))
    # named by everything it depends on: a changed generator default or generator code regenerates it
    identity = generation_identity(spec.recipe, **options)
    out = data_dir / f"{spec.recipe}-{_fingerprint({'n': n, 'seed': seed, 'tf': test_fraction, **identity})}"
    if not (out / "dataset_info.json").is_file():
        # a staging folder of its own: processes generating the same dataset at once (sweep trials) never
        # write into each other's files; the first rename wins and the others drop their copy
        staging = out.with_name(f"{out.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
        make_dataset(spec.recipe, n, staging, seed=seed, test_fraction=test_fraction, **options)
        try:
            staging.rename(out)
        except OSError:
            if not (out / "dataset_info.json").is_file():
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _fingerprint(values: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]
