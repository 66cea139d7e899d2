"""The rollout engine interface: sample G completions for each of P prompts.

The trainer only ever talks to a :class:`RolloutEngine`: it calls ``generate`` once per
step and ``update_weights`` after each optimizer step, so a new engine plugs in without
touching the loop. Engines are registered by name in :data:`ENGINES` and built from the
config as ``ENGINES.get(name).from_config(config, model, processor, budgets, backend)``.

Two exist: ``"hf"`` (:mod:`mmgrpo.rollout.hf`) decodes with the policy module itself, so it
needs no weight sync; ``"vllm"`` (:mod:`mmgrpo.rollout.vllm`) holds a copy of the weights in a
colocated vLLM engine, one request per sample with ``n`` = its group size (vLLM's prefix
cache then shares the prompt and media across the group, the saving the HF engine's
group-shared prefill makes), and reloads the policy's weights in ``update_weights``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

import torch

from mmgrpo.distributed import Ranks
from mmgrpo.models.batch import PROMPT_TOO_LONG, MediaBudgets, PromptBatch
from mmgrpo.registry import Registry
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Completion, Sample

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config

LogprobsMode = Literal["raw", "processed"]


class WeightSource(Protocol):
    """What an engine needs of the training back end that prepared its model (the trainer's back ends have it
    all): whether weights are sharded over ranks, how to gather them, and the ranks they are on."""

    ranks: Ranks
    shards_weights: bool
    """True when forward passes gather weights from every rank (all ranks must run the same ones)."""

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's weights (plain names, LoRA merged; less the names in ``skip``) one whole tensor at a time,
        on every rank: gathering is collective, so every rank draws all of them (with the same ``skip``); a tensor
        may be freed once the next is drawn."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled; the same fields a vLLM engine takes."""

    n: int = 1
    """Completions per prompt (the group size G), unless ``generate`` gets per-sample sizes."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling: keep the most probable tokens whose mass first reaches ``top_p``."""
    top_k: int = 0
    """Keep only the ``top_k`` most probable tokens (ties at the boundary kept); 0 disables."""
    max_new_tokens: int = 256
    """Completion length cap; a completion that reaches it without a stop token is truncated."""
    seed: int | None = None
    """Seed of the engine's random generator: same seed, same completions. None: torch's global RNG."""
    stop_token_ids: tuple[int, ...] = ()
    """Extra ids that end a completion, besides the model's generation-config EOS ids."""
    logprobs_mode: LogprobsMode = "raw"
    """Which log-probs completions report for their tokens. "raw": log_softmax of the model's
    logits at temperature 1 over the full vocabulary, what the trainer recomputes as the
    policy's log-prob (``old_logp`` for the PPO ratio). "processed": log-probs under the
    distribution actually sampled from (forbidden ids masked, temperature, top-k, top-p)."""

    def __post_init__(self) -> None:
        checks = {
            "n must be >= 1": self.n >= 1,
            "temperature must be >= 0": self.temperature >= 0,
            "top_p must be in (0, 1]": 0 < self.top_p <= 1,
            "top_k must be >= 0": self.top_k >= 0,
            "max_new_tokens must be >= 1": self.max_new_tokens >= 1,
            "logprobs_mode must be 'raw' or 'processed'": self.logprobs_mode in ("raw", "processed"),
        }
        failed = [message for message, ok in checks.items() if not ok]
        if failed:
            raise ValueError(f"invalid SamplingParams ({'; '.join(failed)}): {self}")

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax (temperature 0 or top_k 1)."""
        return self.temperature == 0 or self.top_k == 1


@runtime_checkable
class RolloutEngine(Protocol):
    """Samples completions from the current policy."""

    needs_loaded_media: ClassVar[bool]
    """True when the engine takes the loaded media themselves (vLLM) rather than the processor's tensors:
    its prompts cannot come from the preprocessing cache."""
    lockstep: bool
    """True when each ``generate`` that decodes is a collective across ranks (an in-process engine over ZeRO-3 or FSDP2
    weights): every rank must make as many such calls, in the same order."""

    def encode(self, samples: Sequence[Sample]) -> PromptBatch | None:
        """``samples`` as the engine's batch builder encodes them, those it cannot take left out with the reason
        (``PromptBatch.dropped``: bad media, a prompt over the length limit); None when the engine has no
        prompts of its own to build (:class:`EncodesNothing`)."""
        ...

    def generate(
        self,
        samples: Sequence[Sample],
        params: SamplingParams,
        group_sizes: Sequence[int] | None = None,
        *,
        prompts: PromptBatch | None = None,
    ) -> list[list[Completion]]:
        """One list of completions per sample, ``group_sizes[i]`` (default ``params.n``) for sample i.

        A sample the engine cannot take (its media fail to decode, its prompt exceeds the
        engine's prompt length limit) gets an empty list; the caller drops that group (``encode``
        says why). ``prompts`` is ``samples`` already encoded by the caller (``encode`` or
        ``build_prompt_batch``): an in-process engine reuses it rather than encoding twice.
        """
        ...

    def before_update(self) -> None:
        """The policy update is about to start: an engine holding device memory it can give back for it does (vLLM
        sleep level 2); the ``update_weights`` after the update restores it."""
        ...

    def update_weights(self, model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Make the next ``generate`` sample from these policy weights."""
        ...

    @classmethod
    def from_config(
        cls, config: Config, model: torch.nn.Module, processor: Any, budgets: MediaBudgets,
        backend: WeightSource | None = None,
    ) -> RolloutEngine:
        """The engine ``config`` describes, sampling from ``model`` as ``backend`` prepared it."""
        ...


class EncodesNothing:
    """For an engine whose answers need no prompt of ours (saved completions, a finished evaluation's stand-in):
    nothing to encode, nothing to take from the preprocessing cache."""

    needs_loaded_media: ClassVar[bool] = True
    lockstep: ClassVar[bool] = False

    def encode(self, samples: Sequence[Sample]) -> None:
        return None


ENGINES: Registry[type[RolloutEngine]] = Registry("rollout engine")


def generate_or_skip(
    engine: RolloutEngine, samples: Sequence[Sample], params: SamplingParams
) -> tuple[list[tuple[Sample, list[Completion]]], list[SkippedRow]]:
    """Completions of ``samples`` (pairs of sample and its non-empty group) and the samples left
    out, each with why: the engine's batch builder reason (bad media, a prompt over the length
    limit), else "prompt too long" for a group the engine returned empty."""
    prompts = engine.encode(samples)
    groups = engine.generate(samples, params, **({} if prompts is None else {"prompts": prompts}))
    reasons = {row.row_id: row for row in getattr(prompts, "dropped", [])}
    kept, skipped = [], []
    for sample, group in zip(samples, groups):
        if group:
            kept.append((sample, group))
        else:
            default = SkippedRow(sample.id, sample.task, PROMPT_TOO_LONG, "dropped by the rollout engine")
            skipped.append(reasons.get(sample.id, default))
    return kept, skipped


def resolve_group_sizes(
    samples: Sequence[Sample], params: SamplingParams, group_sizes: Sequence[int] | None
) -> list[int]:
    """Per-sample group sizes: ``group_sizes`` validated against ``samples``, or ``params.n`` each."""
    if group_sizes is None:
        return [params.n] * len(samples)
    sizes = list(group_sizes)
    if len(sizes) != len(samples):
        raise ValueError(f"got {len(sizes)} group sizes for {len(samples)} samples")
    bad = [(sample.id, size) for sample, size in zip(samples, sizes) if size < 1]
    if bad:
        raise ValueError(f"group sizes must be >= 1; got (sample id, size) {bad}")
    return sizes
