"""Samples (chat messages with media) -> model inputs, for rollout and for training.

One modality-agnostic path: media are loaded through ``processors.MODALITIES`` under
their budgets, the family's Hugging Face processor renders the chat template and
expands media placeholders, and a :class:`~mmgrpo.models.adapters.FamilyAdapter` says
how the family's tensors line up with rows. Prompts are left-padded so that every
prompt ends in the same column and completions continue from there.

A sample that cannot become a prompt row never fails the batch: media that do not load
(missing, corrupt, truncated, absurd aspect ratio), placeholders that do not match the
media, and prompts longer than ``max_prompt_len`` (counted after media expansion, never
truncated: cutting through media tokens corrupts the row) leave that sample out, recorded
as a :class:`~mmgrpo.skipped_rows.SkippedRow` in ``PromptBatch.dropped``; the rest are
encoded. Callers record the dropped rows and go on, even with a batch of zero rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from transformers import ProcessorMixin
from transformers.video_utils import VideoMetadata

from mmgrpo.models.adapters import FamilyAdapter, adapter_for
from mmgrpo.models.media_check import (
    MediaTokenMismatchError, check_media_tokens, check_prompt_placeholders, nonfinite_inputs,
)
from mmgrpo.models.special_tokens import tokenizer_of
from mmgrpo.registry import Registry
from mmgrpo.skipped_rows import SkippedRow
from mmgrpo.types import Sample
from processors import MODALITIES, AudioClip, Budget, LoadedMedia, MediaError, NonFiniteMediaError, VideoClip
from processors.sources import describe

if TYPE_CHECKING:
    from mmgrpo.models.prompt_cache import PromptCache

MediaBudgets = Mapping[str, Budget]  # modality name -> budget; a missing modality gets its defaults
TokenIds = Sequence[int]

PROMPT_TOO_LONG = "prompt too long"  # skip reason of a prompt over max_prompt_len
PLACEHOLDER_MISMATCH = "media placeholder mismatch"  # skip reason of a row whose text and media disagree

# modality -> f(loaded items, one list per row) -> keyword arguments of the HF processor call
PROCESSOR_MEDIA_ARGS: Registry[Callable[[list[list[LoadedMedia]]], dict[str, Any]]] = Registry(
    "processor media argument builder"
)


@PROCESSOR_MEDIA_ARGS.register("image")
def _image_args(rows: list[list[LoadedMedia]]) -> dict[str, Any]:
    return {"images": rows}


@PROCESSOR_MEDIA_ARGS.register("video")
def _video_args(rows: list[list[VideoClip]]) -> dict[str, Any]:
    clips = [clip for row in rows for clip in row]
    metadata = [
        VideoMetadata(
            total_num_frames=clip.total_frames,
            fps=clip.source_fps,
            height=clip.frames.shape[1],
            width=clip.frames.shape[2],
            frames_indices=clip.frame_indices,
        )
        for clip in clips
    ]
    # Frames are already sampled under the budget; the processor must not resample them.
    return {"videos": [clip.frames for clip in clips], "video_metadata": metadata, "do_sample_frames": False}


@PROCESSOR_MEDIA_ARGS.register("audio")
def _audio_args(rows: list[list[AudioClip]]) -> dict[str, Any]:
    clips = [clip for row in rows for clip in row]
    rates = {clip.sample_rate for clip in clips}
    if len(rates) > 1:
        raise ValueError(f"audio clips of one batch must share a sample rate, got {sorted(rates)}")
    return {"audio": [clip.samples for clip in clips], "sampling_rate": rates.pop()}


@dataclass
class PromptBatch:
    """B left-padded prompts with their media, ready for a forward or ``generate``.

    Row b is ``samples[kept[b]]`` of the list it was built from; ``dropped`` records each
    sample left out (bad media, placeholder mismatch, prompt over ``max_prompt_len``) and
    why. A batch may have zero rows when every sample was left out.
    """

    family: str  # config.model_type, selects the FamilyAdapter
    sample_ids: list[str]
    input_ids: torch.Tensor  # [B, Tp]
    attention_mask: torch.Tensor  # [B, Tp]
    token_inputs: dict[str, torch.Tensor]  # other per-token processor outputs, e.g. mm_token_type_ids [B, Tp]
    media_inputs: dict[str, Any]  # pixel_values, image_grid_thw, input_features, ...
    media_counts: list[dict[str, int]]  # media items per row, by modality
    placeholder_ids: dict[str, int]  # modality -> placeholder token id
    pad_token_id: int
    kept: list[int]
    dropped: list[SkippedRow]
    prepared: list[PreparedPrompt] = field(default_factory=list)  # row b's prompt text and media; empty if a row is cached

    @property
    def adapter(self) -> FamilyAdapter:
        return adapter_for(self.family)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def model_inputs(self) -> dict[str, Any]:
        """Keyword arguments of the family's forward (positions excluded)."""
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            **self.token_inputs,
            **self.adapter.forward_media(self.media_inputs),
        }

    def to(self, device: torch.device | str) -> PromptBatch:
        """The same batch with every tensor on ``device``."""

        def move(value: Any) -> Any:
            return value.to(device) if isinstance(value, torch.Tensor) else value

        return replace(
            self,
            input_ids=move(self.input_ids),
            attention_mask=move(self.attention_mask),
            token_inputs={key: move(value) for key, value in self.token_inputs.items()},
            media_inputs={key: move(value) for key, value in self.media_inputs.items()},
        )

    def rows(self) -> list[EncodedRow]:
        """Each row on its own, unpadded."""
        rows = []
        for row in range(len(self)):
            alone = self.select([row])
            rows.append(
                EncodedRow(
                    input_ids=alone.input_ids[0],
                    token_inputs={key: value[0] for key, value in alone.token_inputs.items()},
                    media_inputs=alone.media_inputs,
                    media_counts=alone.media_counts[0],
                )
            )
        return rows

    def select(self, rows: Sequence[int]) -> PromptBatch:
        """Rows ``rows`` (repeats allowed), left padding shared by all of them trimmed."""
        if list(rows) == list(range(len(self))):
            return self  # every row in order: nothing to trim (some row is unpadded)
        index = torch.as_tensor(list(rows), dtype=torch.long)
        first = _first_real_column(self.attention_mask[index])
        return replace(
            self,
            sample_ids=[self.sample_ids[r] for r in rows],
            input_ids=self.input_ids[index, first:],
            attention_mask=self.attention_mask[index, first:],
            token_inputs={key: value[index, first:] for key, value in self.token_inputs.items()},
            media_inputs=self.adapter.select_media(self.media_inputs, self.media_counts, rows),
            media_counts=[self.media_counts[r] for r in rows],
            kept=[self.kept[r] for r in rows],
            prepared=[self.prepared[r] for r in rows] if self.prepared else [],
        )


def build_prompt_batch(
    processor: ProcessorMixin,
    samples: Sequence[Sample],
    budgets: MediaBudgets | None = None,
    *,
    family: str,
    max_prompt_len: int | None = None,
    cache: PromptCache | None = None,
) -> PromptBatch:
    """Load each sample's media once, render and encode the prompts, left-padded.

    ``family`` is the model's ``config.model_type``. A sample whose media raise a
    ``processors.MediaError``, whose placeholders do not match its media, or whose prompt
    exceeds ``max_prompt_len`` is left out and recorded in ``dropped``; the batch holds
    the others (zero rows when none is left). ``MediaTokenMismatchError`` is raised only
    when the processor's expansion disagrees with the adapter (a bug, not a bad row).
    With a ``cache``, prompts encoded before (by any step, stage or run) are read from it
    instead, the others are encoded and stored; a batch with rows from the cache has no
    ``prepared`` prompts.
    """
    if cache is None:
        batch = _encode_samples(processor, samples, budgets or {}, family)
    else:
        batch = _encode_through_cache(processor, samples, budgets or {}, family, cache)
    return _drop_overlong(batch, [samples[index] for index in batch.kept], max_prompt_len)


def _encode_samples(
    processor: ProcessorMixin, samples: Sequence[Sample], budgets: MediaBudgets, family: str
) -> PromptBatch:
    """Every sample loaded, rendered and encoded in one processor call (bad ones left out)."""
    adapter = adapter_for(family)
    placeholder_ids = adapter.placeholder_token_ids(processor)
    placeholders = adapter.prompt_markers(processor)
    prepared: list[PreparedPrompt] = []
    dropped: list[SkippedRow] = []
    for index, sample in enumerate(samples):
        try:
            prepared.append(_prepare(processor, sample, index, budgets, placeholders))
        except (MediaError, MediaTokenMismatchError) as error:
            dropped.append(skipped_sample(sample, error))
    encoded = _encode(processor, prepared) if prepared else {}
    if nonfinite_inputs(encoded):  # rare: find the rows the processor turned into NaN or infinity
        prepared, nonfinite = _split_nonfinite(processor, prepared)
        dropped += nonfinite
        encoded = _encode(processor, prepared) if prepared else {}
    encoded |= adapter.media_layout(processor, [prompt.media for prompt in prepared])
    if not prepared:
        return _empty_batch(family, placeholder_ids, _pad_token_id(processor), dropped)
    media_counts = [prompt.media_counts for prompt in prepared]
    sample_ids = [prompt.sample.id for prompt in prepared]
    _check_expansion(processor, adapter, encoded, media_counts, sample_ids, placeholder_ids)
    input_ids = encoded.pop("input_ids")
    attention_mask = encoded.pop("attention_mask")
    return PromptBatch(
        family=family,
        sample_ids=sample_ids,
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_inputs={k: v for k, v in encoded.items() if k in adapter.per_token_keys},
        media_inputs={k: v for k, v in encoded.items() if k not in adapter.per_token_keys},
        media_counts=media_counts,
        placeholder_ids=placeholder_ids,
        pad_token_id=_pad_token_id(processor),
        kept=[prompt.index for prompt in prepared],
        dropped=dropped,
        prepared=prepared,
    )


def _split_nonfinite(
    processor: ProcessorMixin, prepared: Sequence[PreparedPrompt]
) -> tuple[list[PreparedPrompt], list[SkippedRow]]:
    """The prompts whose media the processor encodes to finite values alone, and the records of the
    others (each encoded on its own to tell them apart)."""
    kept, dropped = [], []
    for prompt in prepared:
        bad = nonfinite_inputs(_encode(processor, [prompt]))
        if not bad:
            kept.append(prompt)
            continue
        sources = ", ".join(describe(ref) for name in prompt.media for ref in prompt.sample.media(name))
        error = NonFiniteMediaError(sources, f"the processor's {', '.join(bad)} hold NaN or infinity")
        dropped.append(skipped_sample(prompt.sample, error))
    return kept, dropped


def _encode_through_cache(
    processor: ProcessorMixin, samples: Sequence[Sample], budgets: MediaBudgets, family: str, cache: PromptCache
) -> PromptBatch:
    """The samples' rows read from ``cache`` where it has them, the rest encoded (and stored), in sample order."""
    keys = [cache.key(processor, sample, budgets, family) for sample in samples]
    rows: dict[int, EncodedRow] = {}
    for index, key in enumerate(keys):
        row = cache.get(key) if key is not None else None
        if row is not None:
            rows[index] = row
    missing = [index for index in range(len(samples)) if index not in rows]
    dropped: list[SkippedRow] = []
    if missing:
        fresh = _encode_samples(processor, [samples[index] for index in missing], budgets, family)
        dropped = fresh.dropped
        for fresh_index, row in zip(fresh.kept, fresh.rows()):
            index = missing[fresh_index]
            rows[index] = row
            if keys[index] is not None:
                cache.put(keys[index], row)
        if len(missing) == len(samples):  # nothing came from the cache: the fresh batch is the batch
            return fresh
    kept = sorted(rows)
    batch = batch_from_rows(
        [rows[index] for index in kept],
        family=family,
        sample_ids=[samples[index].id for index in kept],
        kept=kept,
        dropped=dropped,
        placeholder_ids=adapter_for(family).placeholder_token_ids(processor),
        pad_token_id=_pad_token_id(processor),
    )
    if len(batch):
        encoded = {"input_ids": batch.input_ids, **batch.token_inputs, **batch.media_inputs}
        _check_expansion(
            processor, batch.adapter, encoded, batch.media_counts, batch.sample_ids, batch.placeholder_ids
        )
    return batch


def _check_expansion(
    processor: ProcessorMixin,
    adapter: FamilyAdapter,
    encoded: Mapping[str, Any],
    media_counts: Sequence[Mapping[str, int]],
    sample_ids: Sequence[str],
    placeholder_ids: Mapping[str, int],
) -> None:
    """Each row's placeholder tokens match what its media features need (raises otherwise)."""
    expected = adapter.expected_media_tokens(processor, encoded, media_counts)
    check_media_tokens(encoded["input_ids"], expected, placeholder_ids, sample_ids)


@dataclass
class EncodedRow:
    """One prompt as the processor encoded it, unpadded: what the preprocessing cache keeps."""

    input_ids: torch.Tensor  # [T]
    token_inputs: dict[str, torch.Tensor]  # per-token processor outputs, each [T]
    media_inputs: dict[str, torch.Tensor]  # this row's media tensors, as ``PromptBatch.select`` gives them
    media_counts: dict[str, int]


def batch_from_rows(
    rows: Sequence[EncodedRow],
    *,
    family: str,
    sample_ids: list[str],
    kept: list[int],
    dropped: list[SkippedRow],
    placeholder_ids: dict[str, int],
    pad_token_id: int,
) -> PromptBatch:
    """Encoded rows stacked into one left-padded batch (per-token extras zero-padded)."""
    if not rows:
        return _empty_batch(family, placeholder_ids, pad_token_id, dropped)
    filled = ragged_rows([row.input_ids for row in rows]).flip(1)  # [B, Tp], real tokens at the right
    input_ids = torch.full(filled.shape, pad_token_id, dtype=torch.long)
    input_ids[filled] = torch.cat([row.input_ids for row in rows])
    token_inputs = {}
    for key in sorted({key for row in rows for key in row.token_inputs}):
        first = next(row.token_inputs[key] for row in rows if key in row.token_inputs)
        values = torch.zeros(filled.shape, dtype=first.dtype)
        values[filled] = torch.cat([row.token_inputs.get(key, torch.zeros_like(row.input_ids, dtype=first.dtype))
                                    for row in rows])
        token_inputs[key] = values
    media_counts = [dict(row.media_counts) for row in rows]
    return PromptBatch(
        family=family,
        sample_ids=sample_ids,
        input_ids=input_ids,
        attention_mask=filled.long(),
        token_inputs=token_inputs,
        media_inputs=adapter_for(family).concat_media([row.media_inputs for row in rows]),
        media_counts=media_counts,
        placeholder_ids=placeholder_ids,
        pad_token_id=pad_token_id,
        kept=kept,
        dropped=dropped,
    )


def skipped_sample(sample: Sample, error: MediaError | MediaTokenMismatchError) -> SkippedRow:
    """The record of ``sample`` left out for ``error``: the bad file as source when it is media."""
    if isinstance(error, MediaError):
        return SkippedRow(sample.id, error.source, error.category, error.reason)
    return SkippedRow(sample.id, sample.task, PLACEHOLDER_MISMATCH, str(error))


def ragged_rows(rows: Sequence[Sequence[Any]]) -> torch.Tensor:
    """``[N, T]`` bool: True at the first ``len(rows[n])`` places of row n (T = the longest, >= 1).
    Assigning the concatenated rows to ``tensor[mask]`` fills each row from the left, in order."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)  # [N]
    width = max(1, int(lengths.max())) if len(rows) else 1
    return torch.arange(width) < lengths.unsqueeze(1)


@dataclass
class PreparedPrompt:
    """One sample ready for the processor: its rendered prompt text and loaded media (what an
    engine with its own processor, such as vLLM, takes instead of the encoded tensors)."""

    index: int  # position in the samples the batch is built from
    sample: Sample
    text: str
    media: dict[str, list[LoadedMedia]]  # modality -> items, in message order
    token_ids: tuple[int, ...] | None = None
    """A continuation (a trajectory's next turn): the prompt as token ids instead of ``text``, each media item's
    placeholder run kept as one token, as an engine that expands placeholders itself (vLLM) takes it."""

    @property
    def media_counts(self) -> dict[str, int]:
        return {modality: len(items) for modality, items in self.media.items()}


def _prepare(
    processor: ProcessorMixin, sample: Sample, index: int, budgets: MediaBudgets, placeholders: Mapping[str, str]
) -> PreparedPrompt:
    """Load ``sample``'s media and render its prompt; raises the typed error of a bad sample."""
    media = _load_media(sample, budgets)
    # A conversation ending in an assistant turn is a whole exchange to score (a reward model's
    # input): rendered closed. Any other ends with the generation prompt the policy continues.
    open_ended = sample.messages[-1]["role"] != "assistant"
    text = processor.apply_chat_template(sample.messages, tools=sample.tools or None, tokenize=False,
                                         add_generation_prompt=open_ended)
    prepared = PreparedPrompt(index, sample, text, media)
    check_prompt_placeholders([text], [prepared.media_counts], placeholders, [sample.id])
    return prepared


def _load_media(sample: Sample, budgets: MediaBudgets) -> dict[str, list[LoadedMedia]]:
    """Each modality's media of ``sample``, loaded under its budget, in message order."""
    loaded = {}
    for name in MODALITIES:
        refs = sample.media(name)
        if refs:
            modality = MODALITIES.get(name)
            budget = budgets.get(name) or modality.budget_type()
            loaded[name] = [modality.load(ref, budget) for ref in refs]
    return loaded


def _encode(processor: ProcessorMixin, prompts: Sequence[PreparedPrompt]) -> dict[str, Any]:
    """The processor's tensors for the prepared prompts, left-padded, never truncated."""
    media_args: dict[str, Any] = {}
    for modality in sorted({name for prompt in prompts for name in prompt.media}):
        media_args |= PROCESSOR_MEDIA_ARGS.get(modality)([list(prompt.media.get(modality, [])) for prompt in prompts])
    texts = [prompt.text for prompt in prompts]
    encoded = processor(text=texts, padding=True, padding_side="left", return_tensors="pt",
                        add_special_tokens=not renders_bos(processor, texts), **media_args)
    return dict(encoded)


def renders_bos(processor: ProcessorMixin, texts: Sequence[str]) -> bool:
    """Whether the chat template wrote the tokenizer's ``bos_token`` itself (Gemma's does): the tokenizer must not
    add a second one, as ``apply_chat_template(tokenize=True)`` decides."""
    bos = tokenizer_of(processor).bos_token
    return bool(bos) and bool(texts) and texts[0].startswith(bos)


def _drop_overlong(batch: PromptBatch, samples: Sequence[Sample], max_prompt_len: int | None) -> PromptBatch:
    """``batch`` without the rows longer than ``max_prompt_len`` (row b is ``samples[b]``)."""
    if max_prompt_len is None:
        return batch
    lengths = batch.attention_mask.sum(-1).tolist()  # [B]
    keep = [row for row, length in enumerate(lengths) if length <= max_prompt_len]
    if len(keep) == len(lengths):
        return batch
    too_long = [
        SkippedRow(sample.id, sample.task, PROMPT_TOO_LONG, f"{length} tokens > max_prompt_len={max_prompt_len}")
        for sample, length in zip(samples, lengths)
        if length > max_prompt_len
    ]
    if not keep:
        return _empty_batch(batch.family, batch.placeholder_ids, batch.pad_token_id, batch.dropped + too_long)
    return replace(batch.select(keep), dropped=batch.dropped + too_long)


def _empty_batch(
    family: str, placeholder_ids: dict[str, int], pad_token_id: int, dropped: list[SkippedRow]
) -> PromptBatch:
    """A batch of zero rows: every sample was left out for the reasons in ``dropped``."""
    no_tokens = torch.zeros((0, 0), dtype=torch.long)  # [0, 0]
    return PromptBatch(
        family=family, sample_ids=[], input_ids=no_tokens, attention_mask=no_tokens.clone(), token_inputs={},
        media_inputs={}, media_counts=[], placeholder_ids=placeholder_ids, pad_token_id=pad_token_id, kept=[],
        dropped=dropped,
    )


def _first_real_column(attention_mask: torch.Tensor) -> int:
    """Index of the first column holding a real token in any row (left padding before it)."""
    columns = attention_mask.any(0).nonzero()
    return int(columns[0]) if len(columns) else 0


def _pad_token_id(processor: ProcessorMixin) -> int:
    tokenizer = getattr(processor, "tokenizer", processor)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError(f"{type(tokenizer).__name__} has neither a pad nor an EOS token to pad with")
    return pad
