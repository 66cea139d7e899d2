"""The in-process Hugging Face rollout engine.

Two decoding modes behind one switch:

- ``group_shared=True`` (default): each prompt and its media are prefilled once and the
  group's G continuations branch from the cached prompt (:mod:`mmgrpo.rollout.decode`).
- ``group_shared=False``: the plain path, ``model.generate`` over every prompt repeated
  G times; the reference the shared path is tested against.

Under a back end whose forward passes are collective (ZeRO-3, FSDP2), pass
``all_ranks_done``: every rank then decodes until all ranks' completions have stopped.
Both forbid the processor's special/placeholder ids, stop each row at its first EOS (the
generation config's ids plus ``SamplingParams.stop_token_ids``), and report per-token
log-probs as ``SamplingParams.logprobs_mode`` says. The model runs in eval mode under
``torch.no_grad``; its training mode is restored afterwards. Works on a PEFT-wrapped model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase, ProcessorMixin

from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.batch import MediaBudgets, PromptBatch, build_prompt_batch
from mmgrpo.models.prompt_cache import PromptCache, open_prompt_cache
from mmgrpo.models.special_tokens import forbidden_generation_token_ids, tokenizer_of
from mmgrpo.rollout import sampling
from mmgrpo.rollout.base import ENGINES, SamplingParams, WeightSource, resolve_group_sizes
from mmgrpo.rollout.decode import DecodedTokens, TokenRules, decode_shared_prompts
from mmgrpo.types import Completion, Sample

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config


@ENGINES.register("hf")
class HFEngine:
    """Samples completions with the policy module itself (no copy, no weight sync)."""

    needs_loaded_media = False  # decodes from the encoded tensors: prompts may come from the preprocessing cache

    def __init__(
        self,
        model: torch.nn.Module,
        processor: ProcessorMixin,
        *,
        group_shared: bool = True,
        budgets: MediaBudgets | None = None,
        max_prompt_len: int | None = None,
        forbidden_token_ids: Sequence[int] | None = None,
        all_ranks_done: Callable[[bool], bool] | None = None,
        cache: PromptCache | None = None,
    ) -> None:
        """``budgets``, ``max_prompt_len`` and ``cache`` go to ``build_prompt_batch``: a longer prompt is
        dropped (its sample gets no completions), never truncated. ``forbidden_token_ids``
        defaults to every special id except the stop ids. ``all_ranks_done(done_here)``, when
        given, tells whether every rank has finished decoding (synced decoding)."""
        self.model = model
        self.all_ranks_done = all_ranks_done
        self.processor = processor
        self.group_shared = group_shared
        self.budgets = budgets
        self.max_prompt_len = max_prompt_len
        self.cache = cache
        self.tokenizer = tokenizer_of(processor)
        self.eos_token_ids = generation_eos_ids(model, self.tokenizer)
        self.forbidden_token_ids = tuple(
            forbidden_generation_token_ids(processor, allowed=self.eos_token_ids)
            if forbidden_token_ids is None
            else forbidden_token_ids
        )
        pad_id = model.generation_config.pad_token_id
        self.pad_token_id = pad_id if pad_id is not None else self.tokenizer.pad_token_id

    @classmethod
    def from_config(
        cls, config: Config, model: torch.nn.Module, processor: ProcessorMixin, budgets: MediaBudgets,
        backend: WeightSource | None = None,
    ) -> HFEngine:
        """The engine the config describes, around ``model`` (as ``backend`` prepared it: decoding is
        synced across ranks when its forward passes are collective)."""
        synced = backend is not None and backend.shards_weights
        return cls(
            model, processor, group_shared=config.train.group_shared_encoding, budgets=budgets,
            max_prompt_len=config.data.max_prompt_tokens, all_ranks_done=backend.ranks.all_ranks if synced else None,
            cache=open_prompt_cache(config),
        )

    def generate(
        self,
        samples: Sequence[Sample],
        params: SamplingParams,
        group_sizes: Sequence[int] | None = None,
        *,
        prompts: PromptBatch | None = None,
    ) -> list[list[Completion]]:
        """``group_sizes[i]`` (default ``params.n``) completions of sample i, in sample order.

        ``prompts``, when given, is ``samples`` already encoded by ``build_prompt_batch``
        (the trainer encodes once for rollout and training). A sample the batch builder
        left out (bad media, prompt over ``max_prompt_len``; see ``prompts.dropped``) gets
        an empty list.
        """
        sizes = resolve_group_sizes(samples, params, group_sizes)
        if not samples:
            return []
        if prompts is None:
            prompts = self.encode(samples)
        if not prompts.kept:  # every sample was left out (bad media, prompt too long)
            return [[] for _ in samples]
        kept_sizes = [sizes[i] for i in prompts.kept]
        rules = self._token_rules(params)
        with _inference_mode(self.model), _seeded(params.seed, self._device) as generator:
            if self.group_shared:
                decoded = decode_shared_prompts(
                    self.model,
                    self._on_device(prompts),
                    kept_sizes,
                    params,
                    rules=rules,
                    adapter=prompts.adapter,
                    generator=generator,
                    all_ranks_done=self.all_ranks_done or bool,
                )
            else:
                decoded = self._generate_plain(prompts, kept_sizes, params, rules)
        completions = completions_from_tokens(decoded, rules.stop_ids, self.tokenizer)
        groups: list[list[Completion]] = [[] for _ in samples]
        for sample_index, group in zip(prompts.kept, _split(completions, kept_sizes)):
            groups[sample_index] = group
        return groups

    def encode(self, samples: Sequence[Sample]) -> PromptBatch:
        """``samples`` as the left-padded prompt batch this engine decodes from."""
        return build_prompt_batch(
            self.processor, samples, self.budgets, family=self._family, max_prompt_len=self.max_prompt_len,
            cache=self.cache,
        )

    def before_update(self) -> None:
        """Nothing to give back: the engine decodes with the policy's own weights."""

    def update_weights(self, model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Sample from new weights: a module replaces the engine's, a state dict is loaded into it.

        The trainer normally hands over the policy module the engine already holds, so
        this is a no-op: the engine decodes with the live weights.
        """
        if isinstance(model_or_state_dict, torch.nn.Module):
            self.model = model_or_state_dict
        else:
            self.model.load_state_dict(model_or_state_dict)

    @property
    def lockstep(self) -> bool:
        """Decoding is synced across ranks (their forward passes are collectives)."""
        return self.all_ranks_done is not None

    @property
    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def _family(self) -> str:
        return unwrap_model(self.model).config.model_type

    def _on_device(self, prompts: PromptBatch) -> dict[str, Any]:
        return {
            key: value.to(self._device) if isinstance(value, torch.Tensor) else value
            for key, value in prompts.model_inputs().items()
        }

    def _token_rules(self, params: SamplingParams) -> TokenRules:
        stop_ids = sorted({*self.eos_token_ids, *params.stop_token_ids})
        forbidden = tuple(i for i in self.forbidden_token_ids if i not in stop_ids)
        return TokenRules(torch.tensor(stop_ids, device=self._device), self.pad_token_id, forbidden)

    def _generate_plain(
        self, prompts: PromptBatch, sizes: Sequence[int], params: SamplingParams, rules: TokenRules
    ) -> DecodedTokens:
        """``model.generate`` on each prompt repeated ``sizes[i]`` times (nothing shared)."""
        repeated = prompts.select([row for row, size in enumerate(sizes) for _ in range(size)])
        inputs = self._on_device(repeated)
        output = self.model.generate(
            **inputs, generation_config=_plain_generation_config(params, rules),
            synced_gpus=self.all_ranks_done is not None,
        )
        token_ids = output.sequences[:, inputs["input_ids"].shape[1] :]  # [N, T]
        step_logits = output.logits if params.logprobs_mode == "raw" else output.scores  # T x [N, V]
        logprobs = sampling.token_logprobs(
            torch.stack(step_logits, dim=1).flatten(0, 1), token_ids.flatten()
        ).view_as(token_ids)  # [N, T]
        return DecodedTokens(token_ids, logprobs)


def completions_from_tokens(
    decoded: DecodedTokens, stop_ids: torch.Tensor, tokenizer: PreTrainedTokenizerBase
) -> list[Completion]:
    """Cut each row after its first stop token; a row without one was truncated by the length cap."""
    lengths, stopped = sampling.completion_lengths(decoded.token_ids, stop_ids)  # [N], [N]
    completions = []
    for row, length in enumerate(lengths.tolist()):
        token_ids = decoded.token_ids[row, :length].tolist()
        completions.append(
            Completion(
                text=tokenizer.decode(token_ids, skip_special_tokens=True),
                token_ids=token_ids,
                logprobs=decoded.logprobs[row, :length].tolist(),
                truncated=not bool(stopped[row]),
            )
        )
    return completions


def _split(completions: list[Completion], sizes: Sequence[int]) -> list[list[Completion]]:
    """Consecutive groups of ``sizes[i]`` completions."""
    groups, start = [], 0
    for size in sizes:
        groups.append(completions[start : start + size])
        start += size
    return groups


def generation_eos_ids(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The generation config's EOS id(s), else the tokenizer's."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError(
            "the model's generation config and tokenizer define no EOS token; generation could not stop"
        )
    return tuple(eos) if isinstance(eos, (list, tuple)) else (eos,)


def _plain_generation_config(params: SamplingParams, rules: TokenRules) -> GenerationConfig:
    """Exactly ``params``, returning per-step logits: no sampling knob (e.g. a checkpoint's
    repetition penalty) comes from the model's own generation config."""
    sampling_knobs = (
        {"do_sample": False}
        if params.greedy
        else {
            "do_sample": True,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
        }
    )
    return GenerationConfig(
        **sampling_knobs,
        max_new_tokens=params.max_new_tokens,
        eos_token_id=rules.stop_ids.tolist(),
        pad_token_id=rules.pad_id,
        suppress_tokens=list(rules.forbidden_ids) or None,
        repetition_penalty=1.0,
        num_beams=1,
        num_return_sequences=1,
        return_dict_in_generate=True,
        output_logits=params.logprobs_mode == "raw",
        output_scores=params.logprobs_mode == "processed",
    )


@contextlib.contextmanager
def _inference_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode without autograd for the block; the previous training mode comes back after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device) -> Iterator[torch.Generator | None]:
    """A generator seeded with ``seed`` for the block, global RNG state untouched.

    ``model.generate`` draws from the global RNG, so the block also runs on a forked
    global state seeded the same way. ``seed`` None: torch's global RNG, advanced as usual.
    """
    if seed is None:
        yield None
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield torch.Generator(device=device).manual_seed(seed)
