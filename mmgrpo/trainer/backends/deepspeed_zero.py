"""DeepSpeed ZeRO stage 2 or 3 over the ranks torchrun (or any launcher setting RANK/WORLD_SIZE) starts.

ZeRO-2 shards optimizer state and gradients, ZeRO-3 also the weights (gathered per
module in forward, which the group-shared path's direct submodule calls trigger too).
DeepSpeed averages gradients over ranks; the trainer's losses are shares of a summed
global loss, so :meth:`DeepSpeedBackend.backward` scales by the world size.
On a CPU-only machine set ``DS_ACCELERATOR=cpu`` (gloo) and ``TORCH_EXTENSIONS_DIR`` to a
cache folder: DeepSpeed compiles its CPU ops the first time.
"""

from __future__ import annotations

import datetime
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mmgrpo.config.errors import ConfigError
from mmgrpo.distributed import one_process_group_unless_launched
from mmgrpo.models.policy_weights import WholeTensor, streamed_plain_weights
from mmgrpo.config.backend_traits import BACKEND_TRAITS
from mmgrpo.distributed import Ranks
from mmgrpo.trainer.backends.base import BACKENDS, OptimizerSpec
from mmgrpo.trainer.backends.deepspeed_config import implied_settings, merged_config, read_user_config
from mmgrpo.trainer.backends.sharded_loading import partition_from_main_process
from mmgrpo.trainer.optim import parameter_groups
from mmgrpo.trainer.nonfinite import require_finite

if TYPE_CHECKING:
    from mmgrpo.config.schema import TrainConfig


logger = logging.getLogger(__name__)
ZERO_CHECKPOINT_TAG = "zero"  # the folder inside a checkpoint that holds DeepSpeed's own files
UNIVERSAL_CHECKPOINT_TAG = "zero_universal"  # the same, converted for another number of ranks


@BACKENDS.register("deepspeed")
class DeepSpeedBackend:
    """``model`` wrapped in a DeepSpeed engine with ZeRO as ``train`` says.

    Checkpoints hold DeepSpeed's own per-rank files (``zero/``); a run resumes from them on
    the number of ranks that wrote them, and on another number through DeepSpeed's
    universal checkpoint format (converted on first use).
    """

    traits = BACKEND_TRAITS["deepspeed"]

    def __init__(self, model: torch.nn.Module, spec: OptimizerSpec, train: TrainConfig) -> None:
        deepspeed = _import_deepspeed()
        _require_fp16_support(deepspeed, train)
        one_process_group_unless_launched()
        # a no-op when the process group exists
        deepspeed.init_distributed(timeout=datetime.timedelta(seconds=train.collective_timeout_s))
        world_size = torch.distributed.get_world_size()
        self.config = merged_config(
            implied_settings(train, spec, world_size), read_user_config(train.deepspeed_config),
            train.deepspeed_config or "the DeepSpeed config",
        )
        self.shards_weights = self.traits.shards_weights(train)
        if train.offload_optimizer:  # DeepSpeed builds its CPU Adam from config["optimizer"]
            optimizer: dict[str, Any] = {"model_parameters": parameter_groups(model, spec.weight_decay)}
        else:
            optimizer = {"optimizer": spec.optimizer_for(model)}
        if self.shards_weights:  # after the optimizer's groups: they tell matrices from vectors by whole shapes
            partition_from_main_process(deepspeed, model, self.config, _local_device(deepspeed), self._weight_dtype())
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            **optimizer,
            lr_scheduler=spec.scheduler_for,
            config=self.config,
        )
        self.model: torch.nn.Module = self.engine.module
        self._deepspeed = deepspeed
        self.device = self.engine.device
        self.ranks = Ranks.of_process_group(self.device)
        self.zero_stage = train.zero_stage

    def prepare_frozen(self, module: torch.nn.Module) -> torch.nn.Module:
        """Under ZeRO-3 an inference engine partitions ``module``'s weights like the policy's, one module's
        parameters at a time as they move to the device, so the device never holds all of them; where ``module``
        is on the meta device on some rank (sharded loading), the main process's copy is the only whole one
        (:func:`~mmgrpo.trainer.backends.sharded_loading.partition_from_main_process`). Under ZeRO-2 (weights
        replicated anyway) it is kept whole on the device, in bf16 when the policy's weights are."""
        if not self.shards_weights:
            module = module.to(self.device)
            return module.to(torch.bfloat16) if self.config["bf16"]["enabled"] else module
        frozen = {key: self.config[key] for key in ("train_micro_batch_size_per_gpu", "bf16", "zero_optimization")}
        frozen["zero_optimization"] = {
            key: value for key, value in frozen["zero_optimization"].items() if key != "offload_optimizer"
        }
        # Without this, initialize() would move the whole module to the device before partitioning it.
        partition_from_main_process(self._deepspeed, module, frozen, self.device, None)
        engine, *_ = self._deepspeed.initialize(model=module, config=frozen)
        return engine.module

    def _weight_dtype(self) -> torch.dtype | None:
        """The policy's partitions' dtype, as DeepSpeed casts a model it partitions itself: fp16 or bf16 as the
        config says, else None (the loaded dtype)."""
        if self.config["fp16"]["enabled"]:
            return torch.float16
        return torch.bfloat16 if self.config["bf16"]["enabled"] else None

    def backward(self, loss: torch.Tensor) -> None:
        # The trainer calls the policy's submodules, never engine.forward, which is where DeepSpeed
        # starts a micro-step: without this, ZeRO-3 overwrites the earlier micro-batches' gradients.
        self.engine.optimizer.clear_backward_seen_flag()
        # DeepSpeed averages over ranks; the ranks' losses add up to the global one.
        self.engine.backward(loss * self.ranks.world_size, scale_wrt_gas=False)

    def step(self) -> float:
        """DeepSpeed clips and steps in one call, so a non-finite gradient norm is found after its update
        (fp16 skips such steps itself); the trainer checks the loss before, which catches the usual cause."""
        self.engine.step()
        grad_norm = float(self.engine.get_global_grad_norm())
        return grad_norm if self.engine.fp16_enabled() else require_finite("gradient norm", grad_norm)

    def release(self) -> None:
        self.engine.destroy()

    def zero_grad(self) -> None:
        self.engine.zero_grad()

    def precision_metrics(self) -> dict[str, float]:
        if not self.engine.fp16_enabled():
            return {}
        return {"precision/loss_scale": float(self.engine.optimizer.loss_scale),
                "precision/skipped_steps": float(self.engine.skipped_steps)}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        if self.zero_stage == 3:  # gathered one module at a time onto rank 0 (every rank takes part)
            return dict(self.engine._zero3_consolidated_16bit_state_dict() or {})
        if not self.ranks.is_main_process:
            return {}
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, torch.Tensor]]:
        if self.zero_stage < 3:  # every rank holds the whole module
            return streamed_plain_weights(self.model, skip=skip)
        return streamed_plain_weights(self.model, self._gathered, skip)

    @contextmanager
    def _gathered(self, parameters: Sequence[torch.nn.Parameter]) -> Iterator[WholeTensor]:
        """ZeRO-3: ``parameters`` all-gathered inside the block (their ``data`` whole), partitioned after."""
        with self._deepspeed.zero.GatheredParameters(list(parameters)):
            yield _data

    def save_optimizer(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(folder), tag=ZERO_CHECKPOINT_TAG, client_state={"world_size": self.ranks.world_size},
                                    save_latest=False)

    def load_optimizer(self, folder: Path, recorded: dict[str, Any] | None) -> None:
        """DeepSpeed's files as they are on the number of ranks that wrote them; on another number,
        converted once into DeepSpeed's universal checkpoint (``zero_universal/``) and loaded from that."""
        shards = folder / ZERO_CHECKPOINT_TAG
        if not shards.is_dir():
            raise FileNotFoundError(f"{folder} holds no DeepSpeed state ({shards} is missing): was it saved by "
                                    "another train.backend? Start from its weights instead (model.name_or_path)")
        written_by = len(list(shards.glob("*optim_states.pt")))
        tag = ZERO_CHECKPOINT_TAG if written_by == self.ranks.world_size else self._universal(folder)
        self.engine._config.load_universal_checkpoint = tag == UNIVERSAL_CHECKPOINT_TAG
        try:
            self.engine.load_checkpoint(str(folder), tag=tag, load_optimizer_states=True, load_lr_scheduler_states=False)
        finally:
            self.engine._config.load_universal_checkpoint = False

    def _universal(self, folder: Path) -> str:
        """``folder``'s ZeRO files as a universal checkpoint (rank-count independent), converted once."""
        universal = folder / UNIVERSAL_CHECKPOINT_TAG
        if self.ranks.is_main_process and not universal.is_dir():
            staging = folder / f".tmp-{UNIVERSAL_CHECKPOINT_TAG}"
            shutil.rmtree(staging, ignore_errors=True)
            convert = [
                sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                str(folder / ZERO_CHECKPOINT_TAG), "--output_folder", str(staging), "--inject_missing_state",
            ]
            done = subprocess.run(convert, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"converting {folder / ZERO_CHECKPOINT_TAG} to a universal checkpoint for "
                                   f"{self.ranks.world_size} ranks failed:\n{done.stderr[-3000:]}")
            os.replace(staging, universal)
            logger.info("converted %s to DeepSpeed's universal checkpoint %s, to resume on %d rank(s)",
                        folder / ZERO_CHECKPOINT_TAG, universal, self.ranks.world_size)
        self.ranks.barrier()
        return UNIVERSAL_CHECKPOINT_TAG


def _local_device(deepspeed: Any) -> torch.device:
    """This rank's accelerator device, as ``zero.Init`` and the engine pick it (LOCAL_RANK)."""
    return torch.device(deepspeed.get_accelerator().device_name(int(os.environ["LOCAL_RANK"])))


def _data(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.data


def _import_deepspeed() -> Any:
    try:
        import deepspeed
    except ImportError as missing:
        raise ConfigError(
            f"train.backend=deepspeed needs DeepSpeed ({missing}): pip install 'mmgrpo[deepspeed]'"
        ) from None
    return deepspeed


def _require_fp16_support(deepspeed: Any, train: TrainConfig) -> None:
    """Refuse fp16 where DeepSpeed's accelerator has none (its CPU accelerator: fp32 and bf16 only)."""
    accelerator = deepspeed.get_accelerator()
    if train.precision == "fp16" and not accelerator.is_fp16_supported():
        supported = ", ".join(str(dtype).removeprefix("torch.") for dtype in accelerator.supported_dtypes())
        raise ConfigError(
            f"train.precision=fp16 with train.backend=deepspeed: DeepSpeed's {accelerator.device_name()} accelerator "
            f"has no fp16 (it supports {supported}); use train.precision=bf16 here, fp16 on GPUs"
        )
