"""The DeepSpeed JSON a run uses: what the mmgrpo config implies, merged with a user's own file.

Pure data, no DeepSpeed import: each implied DeepSpeed key is recorded with the mmgrpo key
it comes from, so a user's file that sets it differently is reported by both names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmgrpo.config.errors import ConfigError

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig
    from mmgrpo.trainer.backends.base import OptimizerSpec

AUTO = "auto"  # a user's value that defers to the mmgrpo config (as Hugging Face's DeepSpeed files use it)


@dataclass(frozen=True)
class Implied:
    """One DeepSpeed setting and the mmgrpo key(s) it follows from."""

    path: str  # dotted DeepSpeed key, e.g. "zero_optimization.stage"
    value: Any
    source: str  # the mmgrpo key(s), for messages


def implied_settings(train: TrainConfig, spec: OptimizerSpec, world_size: int) -> list[Implied]:
    """The DeepSpeed settings ``train`` and ``spec`` imply on ``world_size`` ranks.

    The trainer weights each micro-batch's loss itself and calls ``step()`` once per
    mini-batch, so DeepSpeed does not count micro-batches (``managed_gradient_accumulation``
    off); its batch sizes only describe the run: ``gradient_accumulation_steps`` is the
    micro-batches per rank in one optimizer step.
    """
    per_rank_micro_batches = max(1, math.ceil(spec.samples_per_step / (train.micro_batch_size * world_size)))
    offload = train.offload_optimizer
    settings = [
        Implied("train_micro_batch_size_per_gpu", train.micro_batch_size, "train.micro_batch_size"),
        Implied(
            "gradient_accumulation_steps", per_rank_micro_batches,
            "train.mini_batch_size / (train.micro_batch_size x ranks)",
        ),
        Implied("managed_gradient_accumulation", False, "the trainer's micro-batch loop"),
        Implied("gradient_clipping", spec.max_grad_norm, "train.max_grad_norm"),
        Implied("bf16.enabled", train.precision == "bf16", "train.precision"),
        Implied("fp16.enabled", train.precision == "fp16", "train.precision"),
        Implied("zero_optimization.stage", train.zero_stage, "train.zero_stage"),
        Implied("zero_optimization.offload_optimizer.device", "cpu" if offload else "none", "train.offload_optimizer"),
        Implied("steps_per_print", 2**31 - 1, "the trainer's own logging"),
        Implied("wall_clock_breakdown", False, "the trainer's own timing"),
    ]
    if train.precision == "fp16":  # DeepSpeed's dynamic loss scaler (loss_scale 0 = dynamic)
        settings += [
            Implied("fp16.loss_scale", 0, "train.precision=fp16 (dynamic scaling)"),
            Implied("fp16.initial_scale_power", round(math.log2(train.fp16_initial_scale)), "train.fp16_initial_scale"),
            Implied("fp16.loss_scale_window", train.fp16_growth_interval, "train.fp16_growth_interval"),
        ]
    if train.offload_parameters:  # ZeRO-3 keeps each rank's weight shards in CPU memory between uses
        settings.append(Implied("zero_optimization.offload_param.device", "cpu", "train.offload_parameters"))
    if offload:  # DeepSpeed's CPU Adam steps the offloaded state; mmgrpo's AdamW settings carry over
        settings += [
            Implied("optimizer.type", "AdamW", "the trainer's optimizer"),
            Implied("optimizer.params.lr", spec.lr, "train.lr"),
            Implied("optimizer.params.betas", list(spec.betas), "train.adam_beta1, train.adam_beta2"),
            Implied("optimizer.params.eps", spec.eps, "train.adam_eps"),
            Implied("optimizer.params.weight_decay", spec.weight_decay, "train.weight_decay"),
        ]
    else:  # mmgrpo's own torch AdamW, which ZeRO shards
        settings.append(Implied("zero_allow_untested_optimizer", True, "the trainer's torch AdamW"))
    return settings


def merged_config(implied: list[Implied], user: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``user`` (a DeepSpeed JSON read from ``source``) with every implied setting added.

    A user value equal to the implied one, or ``"auto"``, is fine; any other value for an
    implied key raises ``ConfigError`` naming the DeepSpeed key and the mmgrpo key.
    """
    config = json.loads(json.dumps(user))  # a deep copy of plain JSON data
    conflicts = []
    for setting in implied:
        *parents, leaf = setting.path.split(".")
        node = config
        for name in parents:
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{source}: {setting.path} needs {name!r} to be an object, got {node!r}")
        given = node.get(leaf, AUTO)
        if given != AUTO and given != setting.value:
            conflicts.append(
                f"{setting.path}={given!r} in {source} conflicts with {setting.value!r} from {setting.source}"
            )
        node[leaf] = setting.value
    if conflicts:
        raise ConfigError("DeepSpeed config conflicts:\n  - " + "\n  - ".join(conflicts))
    return config


def read_user_config(path: str | None) -> dict[str, Any]:
    """The JSON object in ``path`` (``{}`` when None); a clear error for a missing or bad file."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"train.deepspeed_config={path!r}: no such file") from None
    except json.JSONDecodeError as bad:
        raise ConfigError(f"train.deepspeed_config={path!r}: not valid JSON ({bad})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"train.deepspeed_config={path!r}: expected a JSON object, got {type(data).__name__}")
    return data
