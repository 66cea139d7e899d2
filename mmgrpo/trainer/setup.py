"""Turn a :class:`~mmgrpo.config.Config` into the trainer's live objects: the policy, its engine, scoring.

What eval needs as well (model paths, budgets, samples) lives in :mod:`mmgrpo.inputs`, below both.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model

from mmgrpo.config import Config, LoraConfig
from mmgrpo.inputs import media_budgets, reward_policy
from mmgrpo.models.budget_limits import require_budgets_fit
from mmgrpo.models.compat import enable_activation_checkpointing
from mmgrpo.models.freezing import FrozenParts, freeze, frozen_parts, lora_excluded_modules, parameter_counts
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.rollout.base import ENGINES, RolloutEngine, SamplingParams
from mmgrpo.rollout.tool_turns import ToolTurns
from mmgrpo.trainer.demonstrations import ScriptedTurns, demonstrated
from mmgrpo.trainer.rollouts import ScoringRule
from mmgrpo.trainer.sft import Demonstrate, SFTExample, end_of_turn
from mmgrpo.types import Completion
from tasks.base import Task

if TYPE_CHECKING:
    from mmgrpo.trainer.backends import TrainingBackend

logger = logging.getLogger(__name__)


def load_policy(
    config: Config, model_path: str, device: torch.device, *, checkpoint: Path | None = None
) -> tuple[torch.nn.Module, Any]:
    """The trainable policy (LoRA-wrapped when enabled) and its processor.

    With ``checkpoint`` (an mmgrpo checkpoint folder) the weights come from it: the full
    model, or the base model from ``model_path`` plus the saved LoRA adapter. The parts the
    ``model`` section freezes (:mod:`mmgrpo.models.freezing`) have gradients off, and LoRA puts
    no adapter into them.
    """
    full_checkpoint = checkpoint is not None and not config.lora.enabled
    model, processor = load_model_and_processor(
        str(checkpoint) if full_checkpoint else model_path,
        dtype=config.model.dtype,
        attn_implementation=config.model.attn_implementation,
        trust_remote_code=config.model.trust_remote_code,
        device=device,
    )
    require_budgets_fit(config.model, model, processor)
    if config.train.gradient_checkpointing:
        enable_activation_checkpointing(model, {"use_reentrant": False})
    frozen = frozen_parts(model, config.model)
    freeze(model, frozen)
    if config.lora.enabled and checkpoint is not None:
        with warnings.catch_warnings():  # on the meta device the adapter's values arrive from the main process
            warnings.filterwarnings("ignore", message=META_COPY_WARNING)
            model = PeftModel.from_pretrained(model, str(checkpoint), is_trainable=True)
    elif config.lora.enabled:
        model = add_lora(model, config.lora, frozen)
    _log_trainable(model, frozen)
    return model, processor


META_COPY_WARNING = ".*copying from a non-meta parameter in the checkpoint to a meta parameter"


def loading_device(config: Config, device: torch.device) -> torch.device:
    """Where this process reads the policy's weights to (and its KL reference's): ``device``, except under a back end
    that shards the weights (FSDP2, ZeRO-3) on several ranks with full fine-tuning, where the main process reads them
    into CPU memory and every other rank makes the model on the meta device, without weights: the back end shards it
    and scatters the main process's copy (:mod:`mmgrpo.trainer.backends.sharded_loading`), so no other rank holds a
    whole copy. With LoRA too: PEFT adds its adapters on the meta device (new ones get the main process's initial
    values, a resumed adapter the main process's loaded ones)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed or torch.distributed.get_world_size() == 1 or not config.train.shards_weights:
        return device
    return torch.device("cpu") if torch.distributed.get_rank() == 0 else torch.device("meta")


def add_lora(model: torch.nn.Module, lora: LoraConfig, frozen: FrozenParts) -> PeftModel:
    """``model`` with new LoRA adapters as ``lora`` says (every base weight frozen), none in a module that owns
    a ``frozen`` parameter."""
    return get_peft_model(
        model,
        PeftLoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules,
            exclude_modules=lora_excluded_modules(frozen, lora.target_modules) or None,
        ),
    )


def _log_trainable(model: torch.nn.Module, frozen: FrozenParts) -> None:
    """The start of the log says what trains: counts, and the parts the config froze."""
    trainable, fixed = parameter_counts(model)
    reasons = f"; frozen by config: {'; '.join(frozen.reasons)}" if frozen.reasons else ""
    logger.info(
        "parameters: %s trainable, %s frozen (%.1f%% trainable)%s", f"{trainable:,}", f"{fixed:,}",
        100 * trainable / max(1, trainable + fixed), reasons,
    )


def build_engine(
    config: Config, model: torch.nn.Module, processor: Any, backend: TrainingBackend | None = None
) -> RolloutEngine:
    """The configured rollout engine around ``model`` (as ``backend`` prepared it: decoding is synced
    across ranks when its forward passes are collective), taking tool turns when ``rollout.tools`` names any."""
    budgets = media_budgets(config.model, processor)
    engine = ENGINES.get(config.rollout.engine).from_config(config, model, processor, budgets, backend)
    if not config.rollout.tools:
        return engine
    collective = engine.lockstep and backend is not None  # every rank decodes as many turns
    return tool_turns_of(config, model, processor, backend.ranks.all_ranks if collective else bool)(
        engine, config.rollout.max_turns)


def tool_turns_of(config: Config, model: torch.nn.Module, processor: Any,
                  all_ranks_done: Callable[[bool], bool] = bool) -> Callable[[Any, int], ToolTurns]:
    """``(engine, max_turns) -> ToolTurns`` with the tools of ``rollout.tools``, as the model sees its images;
    ``all_ranks_done`` for an engine whose decoding is a collective of the ranks."""
    budgets = media_budgets(config.model, processor)
    return lambda engine, max_turns: ToolTurns.from_config(engine, config.rollout, model, processor, budgets,
                                                           max_turns=max_turns, all_ranks_done=all_ranks_done)


def demonstrator(config: Config, model: torch.nn.Module, processor: Any) -> Demonstrate | None:
    """How SFT turns tool demonstrations into trajectories (None without ``rollout.tools``)."""
    if not config.rollout.tools:
        return None
    tool_turns = tool_turns_of(config, model, processor)
    budgets, family = media_budgets(config.model, processor), unwrap_model(model).config.model_type

    def demonstrate(examples: Sequence[SFTExample]) -> list[Completion | None]:
        return demonstrated(
            [example.sample for example in examples], [example.tool_turns for example in examples], tool_turns,
            lambda turns: ScriptedTurns(processor, budgets, family, turns, end_of_turn(model)),
        )

    return demonstrate


def sampling_params(config: Config, seed: int) -> SamplingParams:
    """The rollout section as engine sampling parameters."""
    rollout = config.rollout
    return SamplingParams(
        n=rollout.num_generations, temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
        max_new_tokens=rollout.max_new_tokens, seed=seed,
    )


def scoring_rule(config: Config, task: Task) -> ScoringRule:
    """The task's weighted rewards (config weights, else the task's defaults) plus DAPO's overlong penalty."""
    weights = config.task.rewards or dict(task.default_rewards)
    return ScoringRule(
        weights=weights,
        reward_options=task.reward_options(weights),
        metric=task.metric_reward,
        max_new_tokens=config.rollout.max_new_tokens,
        overlong_buffer=config.algo.overlong_buffer,
        overlong_penalty=config.algo.overlong_penalty,
        policy=reward_policy(config.task),
        step_rule=task.step_rule,
    )
