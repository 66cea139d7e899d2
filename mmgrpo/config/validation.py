"""Every check on a built config, in one place: field bounds, cross-field rules, registry names.

``validate_config`` collects all problems and raises one ``ConfigError`` listing them,
each naming the keys and numbers involved, so a user fixes a recipe in one pass.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mmgrpo.config.backend_traits import BACKEND_TRAITS, backend_specific_keys, backends_supporting
from mmgrpo.config.errors import ConfigError
from mmgrpo.config.fields import field_bounds
from mmgrpo.config.loss_types import LOSS_TYPES, SEQUENCE_LEVEL
from mmgrpo.plugins import PluginError, load_entry_points, load_plugin
from mmgrpo.registry import Registry, RegistryError

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config, DatasetConfig

Rule = Callable[["Config"], Iterator[str]]

# config key -> (module, attribute) of the registry its value must be in. A registry
# that is not importable or still empty is skipped: the config stays loadable on its own.
# A key at its default is not looked up, so a default config loads without importing torch
# or transformers (the registries of estimators and engines live next to their tensor code).
REGISTERED_KEYS: dict[str, tuple[str, str]] = {
    "algo.advantage_estimator": ("mmgrpo.algos", "ADVANTAGE_ESTIMATORS"),
    "algo.policy_loss": ("mmgrpo.algos", "SURROGATES"),
    "task.name": ("tasks", "TASKS"),
    "rollout.engine": ("mmgrpo.rollout", "ENGINES"),
}


def validate_config(config: Config) -> None:
    """Raise ``ConfigError`` listing every problem in ``config``; return quietly if there is none.
    Its plugins load first, so that the names they register are known to the checks."""
    problems = [*_bound_problems(config), *_plugin_problems(config), *(problem for rule in RULES for problem in rule(config))]
    if problems:
        raise ConfigError.listing("invalid config", problems)


def _bound_problems(node: Any, key: str = "") -> Iterator[str]:
    """Range violations of every field with bounds, walking nested sections and dataset lists."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        dotted = f"{key}.{f.name}" if key else f.name
        if dataclasses.is_dataclass(value):
            yield from _bound_problems(value, dotted)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from _bound_problems(item, f"{dotted}[{index}]")
        elif why := field_bounds(f).violation(value):
            yield f"{dotted}={value!r} {why}"


def _batch_sizes(config: Config) -> Iterator[str]:
    rollout, train, sft = config.rollout, config.train, config.sft
    batch = rollout.prompts_per_step * rollout.num_generations
    batch_text = (
        f"rollout batch rollout.prompts_per_step={rollout.prompts_per_step} x "
        f"rollout.num_generations={rollout.num_generations} = {batch}"
    )
    step_size = train.mini_batch_size or batch
    if train.mini_batch_size and batch % train.mini_batch_size:
        yield f"{batch_text} is not divisible by train.mini_batch_size={train.mini_batch_size}"
    elif step_size % train.micro_batch_size:
        size_text = f"train.mini_batch_size={step_size}" if train.mini_batch_size else batch_text
        yield f"{size_text} is not divisible by train.micro_batch_size={train.micro_batch_size}"
    if sft.batch_size % sft.micro_batch_size:
        yield f"sft.batch_size={sft.batch_size} is not divisible by sft.micro_batch_size={sft.micro_batch_size}"


def _group_sizes(config: Config) -> Iterator[str]:
    algo, group_size = config.algo, config.rollout.num_generations
    if algo.dynamic_group_size and not algo.group_size_min <= group_size <= algo.group_size_max:
        yield (
            f"dynamic group size needs algo.group_size_min={algo.group_size_min} <= "
            f"rollout.num_generations={group_size} <= algo.group_size_max={algo.group_size_max}"
        )


def _overlong(config: Config) -> Iterator[str]:
    buffer, max_new = config.algo.overlong_buffer, config.rollout.max_new_tokens
    if buffer >= max_new:
        yield f"algo.overlong_buffer={buffer} must be smaller than rollout.max_new_tokens={max_new}"


def _policy_loss(config: Config) -> Iterator[str]:
    algo = config.algo
    if algo.loss_type is not None and algo.loss_type not in LOSS_TYPES:
        yield f"algo.loss_type={algo.loss_type!r} is not one of {', '.join(LOSS_TYPES)} (or null)"
        return
    if algo.loss_type is not None:
        defaults = type(algo)()
        for key, value in LOSS_TYPES[algo.loss_type]._asdict().items():
            if getattr(algo, key) not in (value, getattr(defaults, key)):
                yield (f"algo.loss_type={algo.loss_type} sets algo.{key}={value}, but algo.{key}="
                       f"{getattr(algo, key)}: leave one of them out")
    objective = algo.objective()
    if algo.importance_sampling_level == "sequence" and objective.policy_loss not in SEQUENCE_LEVEL.values():
        yield (f"algo.importance_sampling_level=sequence turns policy_loss vanilla into gspo; policy_loss "
               f"{objective.policy_loss} has no sequence-level form here")
    if objective.policy_loss == "gpg" and algo.num_iterations > 1:
        yield (f"algo.policy_loss=gpg has no importance ratio: each batch is on-policy for one update only, got "
               f"algo.num_iterations={algo.num_iterations}")
    if objective.policy_loss == "clip_cov" and algo.clip_cov_lb >= algo.clip_cov_ub:
        yield (f"algo.clip_cov_lb={algo.clip_cov_lb} must be below algo.clip_cov_ub={algo.clip_cov_ub}: no token's "
               f"covariance lies between them")
    if algo.dual_clip is not None and objective.policy_loss != "vanilla":
        yield (f"algo.dual_clip={algo.dual_clip} bounds PPO's per-token clipped loss (algo.policy_loss=vanilla); "
               f"algo.policy_loss={objective.policy_loss} has none to bound: set algo.dual_clip=null")


def _eval_sampling(config: Config) -> Iterator[str]:
    if config.eval.samples > 1 and config.eval.temperature == 0:
        yield f"eval.samples={config.eval.samples} needs eval.temperature > 0 (greedy decoding gives one answer)"


def _predictions_model(config: Config) -> Iterator[str]:
    if config.eval.predictions_model and not config.eval.predictions:
        yield "eval.predictions_model names the model of saved predictions: it needs eval.predictions"


def _lora(config: Config) -> Iterator[str]:
    if config.lora.enabled and not config.lora.target_modules:
        yield "lora.target_modules is empty: LoRA needs at least one layer name"


def _training_backend(config: Config) -> Iterator[str]:
    train = config.train
    traits = BACKEND_TRAITS[train.backend]
    for key, backends in backend_specific_keys().items():
        if train.backend not in backends and not at_default(config, key):
            names = " or ".join(f"train.backend={name}" for name in backends)
            yield f"{key}={value_of(config, key)!r} is read only by {names} (got {train.backend})"
    if train.precision not in traits.precisions:
        why = traits.not_yet.get(train.precision, "not supported")
        elsewhere = " or ".join(f"train.backend={name}" for name in backends_supporting(train.precision))
        yield (f"train.precision={train.precision} is not supported with train.backend={train.backend} yet ({why}): "
               f"use {' or '.join(traits.precisions)}, or {train.precision} with {elsewhere}")
    for key in ("train.fp16_initial_scale", "train.fp16_growth_interval"):
        if train.precision != "fp16" and not at_default(config, key):
            yield f"{key}={value_of(config, key)!r} is read only with train.precision=fp16 (got {train.precision})"
    if train.offload_parameters and train.zero_stage != 3:
        yield f"train.offload_parameters=true needs train.zero_stage=3 (got {train.zero_stage}): ZeRO-2 keeps whole weights"
    if train.deepspeed_config is not None and not Path(train.deepspeed_config).is_file():
        yield f"train.deepspeed_config={train.deepspeed_config!r}: no such file"


def _padding_free(config: Config) -> Iterator[str]:
    """Packed continuations of a shared prompt need a 4-D attention mask, which flash attention does not take."""
    train, attention = config.train, config.model.attn_implementation or ""
    if train.padding_free and train.group_shared_encoding and attention.startswith("flash"):
        yield (f"train.padding_free=true with train.group_shared_encoding=true needs sdpa or eager attention "
               f"(model.attn_implementation={attention}): set train.group_shared_encoding=false to pack whole "
               "sequences, which flash attention takes")


def _data_parallel(config: Config) -> Iterator[str]:
    """Under N launched ranks (torchrun's WORLD_SIZE), the global batch sizes must split by rank."""
    ranks = launched_world_size()
    if ranks == 1:
        return
    rollout, train = config.rollout, config.train
    launched = f"{ranks} ranks were launched (WORLD_SIZE={ranks})"
    if train.backend == "single":
        yield f"{launched} but train.backend=single trains in one process: set train.backend=deepspeed or fsdp2"
    if rollout.prompts_per_step % ranks:
        yield (f"rollout.prompts_per_step={rollout.prompts_per_step} (prompts per step, all ranks together) "
               f"does not divide across {ranks} ranks")
    sft = config.sft
    if sft.enabled and sft.steps > 0 and sft.batch_size % ranks:
        yield f"sft.batch_size={sft.batch_size} (examples per SFT step, all ranks together) does not divide across {ranks} ranks"
    step_size = train.mini_batch_size or rollout.prompts_per_step * rollout.num_generations
    if step_size % (ranks * train.micro_batch_size):
        size_key = "train.mini_batch_size" if train.mini_batch_size else "rollout.prompts_per_step x rollout.num_generations"
        yield (f"{size_key}={step_size} (completions per optimizer step, all ranks together) does not divide into "
               f"{ranks} ranks x train.micro_batch_size={train.micro_batch_size}")


def _rollout_engine(config: Config) -> Iterator[str]:
    """Engine options that cannot work together, and a vllm engine without vLLM; found before any model loads."""
    if config.rollout.logprobs_source == "engine" and config.rollout.temperature != 1.0:
        yield (f"rollout.logprobs_source=engine needs rollout.temperature=1 (got {config.rollout.temperature}): "
               "engines report log-probs at temperature 1, the loss uses rollout.temperature")
    correction = config.algo.is_correction
    if config.rollout.logprobs_source == "engine" and correction != "none":
        yield (f"algo.is_correction={correction} weights by trainer / sampler log-probs, but "
               "rollout.logprobs_source=engine makes them the same: use rollout.logprobs_source=trainer with it")
    if correction != "none" and config.rollout.temperature != 1.0:
        yield (f"algo.is_correction={correction} needs rollout.temperature=1 (got {config.rollout.temperature}): "
               "engines report log-probs at temperature 1")
    yield from _tools(config)
    if config.rollout.engine == "vllm_server" and not config.rollout.server_url:
        yield "rollout.engine=vllm_server needs rollout.server_url (where `mmgrpo rollout-serve` listens)"
    if config.rollout.engine != "vllm":
        return
    if importlib.util.find_spec("vllm") is None:
        yield ("rollout.engine=vllm but vLLM is not installed here: pip install -e '.[vllm]' on a GPU machine, "
               "scripts/vllm_cpu_env.sh for a CPU environment, or rollout.engine=hf")
    ranks, tensor_parallel = launched_world_size(), config.rollout.vllm.tensor_parallel_size
    if ranks > 1 and ranks % tensor_parallel:
        yield (f"rollout.vllm.tensor_parallel_size={tensor_parallel} does not divide the {ranks} ranks launched "
               "(each group of that many ranks shares one engine)")


def _tools(config: Config) -> Iterator[str]:
    """Tool turns need more than one turn, more turns need tools, and a trajectory's budget holds its first turn."""
    rollout = config.rollout
    if bool(rollout.tools) != (rollout.max_turns > 1):
        yield (f"rollout.tools={rollout.tools} with rollout.max_turns={rollout.max_turns}: tools need max_turns > 1, "
               "and more turns need tools")
    budget = rollout.max_trajectory_tokens
    if budget is not None and budget < rollout.max_new_tokens:
        yield (f"rollout.max_trajectory_tokens={budget} is less than rollout.max_new_tokens={rollout.max_new_tokens}, "
               "the first turn's own limit")


def _async_rollout(config: Config) -> Iterator[str]:
    """The asynchronous rollout's keys mean nothing in sync mode."""
    if config.rollout.mode == "sync":
        for key in ("rollout.max_staleness", "rollout.worker_device", "rollout.worker_threads"):
            if not at_default(config, key):
                yield f"{key}={value_of(config, key)!r} is read only by rollout.mode=async (got rollout.mode=sync)"


def launched_world_size() -> int:
    """How many ranks the launcher (torchrun, accelerate, mmgrpo train --nproc) started; 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _resume(config: Config) -> Iterator[str]:
    if config.checkpoint.resume == "latest" and not config.log.run_name:
        yield "--resume (checkpoint.resume=latest) needs log.run_name: the name of the run to continue"


def _reward_weights(config: Config) -> Iterator[str]:
    for name, weight in config.task.rewards.items():
        if not math.isfinite(weight):
            yield f"task.rewards.{name}={weight}: a reward weight must be a finite number"


def _media(config: Config) -> Iterator[str]:
    model = config.model
    if model.min_pixels > model.max_pixels:
        yield f"model.min_pixels={model.min_pixels} is larger than model.max_pixels={model.max_pixels}"


def _datasets(config: Config) -> Iterator[str]:
    if not config.data.train:
        yield "data.train is empty: training needs at least one dataset"
    dataset_lists = {"data.train": config.data.train, "data.test": config.data.test, "sft.data": config.sft.data}
    for key, specs in dataset_lists.items():
        for index, spec in enumerate(specs):
            yield from _dataset_source(spec, f"{key}[{index}]")
    for index, spec in enumerate(config.sft.data):
        if spec.path is None:
            yield f"sft.data[{index}] needs a path: a JSON-lines file of prompt messages + completion"


def _unread_dataset_fields(config: Config) -> Iterator[str]:
    """Dataset fields set away from their default where nothing reads them: eval reports each
    test dataset on its own (no mixing weight), SFT reads every row of each file it is given."""
    unused = {
        "data.test": (config.data.test, lambda name: name == "weight", "eval reports each test dataset separately"),
        "sft.data": (
            config.sft.data, lambda name: name not in ("path", "recipe"), "SFT reads every row of each path"
        ),
    }
    for key, (specs, is_unread, why) in unused.items():
        for index, spec in enumerate(specs):
            for f in dataclasses.fields(spec):
                value = getattr(spec, f.name)
                if is_unread(f.name) and value != _default(f):
                    yield f"{key}[{index}].{f.name}={value!r} is not used ({why}); remove it"


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _dataset_source(spec: DatasetConfig, key: str) -> Iterator[str]:
    if (spec.path is None) == (spec.recipe is None):
        given = "both" if spec.path else "neither"
        yield f"{key}: set exactly one of path (a dataset) or recipe (a generator), got {given}"


def plugin_specs(config: Config) -> list[str]:
    """Every plugin the config names (``task.plugins``, then the older ``task.reward_plugins``)."""
    return [*config.task.plugins, *config.task.reward_plugins]


def _plugin_problems(config: Config) -> Iterator[str]:
    """Load the installed and the named plugins; one problem per plugin that does not load."""
    try:
        load_entry_points()
    except PluginError as error:
        yield str(error)
    for key in ("task.plugins", "task.reward_plugins"):
        for index, spec in enumerate(value_of(config, key)):
            try:
                load_plugin(spec)
            except (PluginError, RegistryError) as error:
                yield f"{key}[{index}]: {error}"


def _registered_names(config: Config) -> Iterator[str]:
    for key, (module, attribute) in REGISTERED_KEYS.items():
        if at_default(config, key):
            continue  # defaults are registered (a test checks): no need to import a registry's heavy module
        registry = _find_registry(module, attribute)
        if registry is None or not len(registry):
            continue
        try:
            registry.get(value_of(config, key))
        except RegistryError as error:
            yield f"{key}: {error}"


def value_of(config: Config, key: str) -> Any:
    """The value of a dotted ``key`` (e.g. ``"rollout.engine"``) in ``config``."""
    return functools.reduce(getattr, key.split("."), config)


def at_default(config: Config, key: str) -> bool:
    """Whether ``key`` holds its schema default in ``config``."""
    return value_of(config, key) == value_of(type(config)(), key)


def _find_registry(module: str, attribute: str) -> Registry | None:
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as missing:
        if missing.name and module.startswith(missing.name):
            return None  # that part of mmgrpo is not installed/written yet
        raise
    registry = getattr(imported, attribute, None)
    return registry if isinstance(registry, Registry) else None


RULES: list[Rule] = [
    _batch_sizes,
    _group_sizes,
    _overlong,
    _policy_loss,
    _eval_sampling,
    _predictions_model,
    _lora,
    _training_backend,
    _padding_free,
    _data_parallel,
    _rollout_engine,
    _async_rollout,
    _resume,
    _reward_weights,
    _media,
    _datasets,
    _unread_dataset_fields,
    _registered_names,
]
