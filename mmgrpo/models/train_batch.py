"""Training batches: encoded prompts (:class:`~mmgrpo.models.batch.PromptBatch`) each followed by one completion.

Assembly only: prompts are encoded once per distinct sample by :mod:`mmgrpo.models.batch`; here each
completion is paired with its prompt's row and right-padded, so a group's G completions share one encoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import ProcessorMixin

from mmgrpo.models.batch import MediaBudgets, PromptBatch, TokenIds, build_prompt_batch, ragged_rows
from mmgrpo.models.inline_media import extended_row, placeholder_counts
from mmgrpo.models.media_check import check_media_tokens
from mmgrpo.types import InlineMedia, Sample


@dataclass
class TrainBatch:
    """Prompts (left-padded, ``[B, Tp]``) each followed by one completion (right-padded, ``[B, Tc]``).

    Token-level training tensors (log-probs, advantages per token) are ``[B, Tc]``,
    aligned with ``completion_ids`` and masked by ``completion_mask``. Row b holds
    completion ``kept[b]`` of the list the batch was built from; completions of dropped
    prompts are left out and counted in ``num_dropped``.
    """

    prompt: PromptBatch  # one row per completion
    completion_ids: torch.Tensor  # [B, Tc]
    completion_mask: torch.Tensor  # [B, Tc]
    kept: list[int]
    num_dropped: int = 0
    completion_media: list[InlineMedia | None] | None = None  # media inside completion b (a tool's images)

    @property
    def has_inline_media(self) -> bool:
        return self.completion_media is not None and any(m is not None for m in self.completion_media)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def prompt_length(self) -> int:
        return self.prompt.input_ids.shape[1]

    def model_inputs(self) -> dict[str, Any]:
        """Forward kwargs over the whole ``[B, Tp + Tc]`` sequence; per-token extras zero-padded over the completion
        (but for the media inside it)."""
        if self.has_inline_media:
            return self._inline_model_inputs()
        completion_zeros = torch.zeros_like(self.completion_ids)  # [B, Tc]
        prompt = self.prompt
        return {
            "input_ids": torch.cat([prompt.input_ids, self.completion_ids], 1),  # [B, T]
            "attention_mask": torch.cat([prompt.attention_mask, self.completion_mask], 1),  # [B, T]
            **{
                key: torch.cat([value, completion_zeros.to(value.dtype)], 1)  # [B, T]
                for key, value in prompt.token_inputs.items()
            },
            **prompt.adapter.forward_media(prompt.media_inputs),
        }

    def forward_inputs(self, model: torch.nn.Module) -> tuple[dict[str, Any], torch.Tensor]:
        """:meth:`model_inputs` and the position ids ``[(3,) B, T]`` the family gives them."""
        adapter, inputs = self.prompt.adapter, self.model_inputs()
        if self.has_inline_media:  # positions over each whole row, the media inside its completion included
            position_ids, _ = adapter.prompt_positions(model, inputs)  # [(3,) B, T]
            return inputs, position_ids
        prompt_positions, next_position = adapter.prompt_positions(model, self.prompt.model_inputs())
        completion_positions = adapter.continuation_positions(next_position, self.completion_ids.shape[1])
        return inputs, torch.cat([prompt_positions, completion_positions], -1)  # [(3,) B, T]

    def _inline_model_inputs(self) -> dict[str, Any]:
        """:meth:`model_inputs` of completions holding media: each row's media are its prompt's then its
        completion's, in the order of their placeholders."""
        prompt, adapter, device = self.prompt, self.prompt.adapter, self.completion_ids.device
        rows = [
            extended_row(adapter, row, self.completion_ids[b].tolist(), self.completion_media[b])
            for b, row in enumerate(prompt.to("cpu").rows())
        ]
        width = self.completion_ids.shape[1]
        token_inputs = {}
        for key, value in prompt.token_inputs.items():  # the completion part: each extended row's last Tc extras
            completion_part = torch.stack([row.token_inputs[key][-width:] for row in rows]).to(device, value.dtype)
            token_inputs[key] = torch.cat([value, completion_part], 1)  # [B, T]
        return {
            "input_ids": torch.cat([prompt.input_ids, self.completion_ids], 1),  # [B, T]
            "attention_mask": torch.cat([prompt.attention_mask, self.completion_mask], 1),  # [B, T]
            **token_inputs,
            **{key: value.to(device) for key, value in
               adapter.forward_media(adapter.concat_media([row.media_inputs for row in rows])).items()},
        }

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """Rows ``rows`` as a batch of their own (for micro-batches)."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        return TrainBatch(
            prompt=self.prompt.select(rows),
            completion_ids=self.completion_ids[index],
            completion_mask=self.completion_mask[index],
            kept=[self.kept[r] for r in rows],
            num_dropped=self.num_dropped,
            completion_media=None if self.completion_media is None else [self.completion_media[r] for r in rows],
        )


def build_train_batch(
    processor: ProcessorMixin,
    samples: Sequence[Sample],
    completions_token_ids: Sequence[TokenIds],
    budgets: MediaBudgets | None = None,
    *,
    family: str,
    max_prompt_len: int | None = None,
) -> TrainBatch:
    """Prompt + completion rows, one per completion; ``samples[i]`` is completion i's prompt.

    A sample repeated for its G completions (the same object) is loaded and encoded once.
    """
    if len(samples) != len(completions_token_ids):
        raise ValueError(f"{len(samples)} samples but {len(completions_token_ids)} completions")
    unique: dict[int, int] = {}  # id(sample) -> index among the distinct samples
    prompt_of = [unique.setdefault(id(sample), len(unique)) for sample in samples]
    distinct = list({id(sample): sample for sample in samples}.values())
    prompts = build_prompt_batch(processor, distinct, budgets, family=family, max_prompt_len=max_prompt_len)
    return attach_completions(prompts, completions_token_ids, prompt_of)


def attach_completions(
    prompts: PromptBatch, completions_token_ids: Sequence[TokenIds], prompt_of: Sequence[int],
    media: Sequence[InlineMedia | None] | None = None,
) -> TrainBatch:
    """A train batch pairing completion i with prompt ``prompt_of[i]`` (an index into the samples
    ``prompts`` was built from), ``media[i]`` inside it. Completions of dropped prompts are left out and counted."""
    row_of_sample = {sample: row for row, sample in enumerate(prompts.kept)}
    kept = [i for i, sample in enumerate(prompt_of) if sample in row_of_sample]
    prompt_rows = [row_of_sample[prompt_of[i]] for i in kept]
    completion_ids, completion_mask = pad_completions(
        [completions_token_ids[i] for i in kept], pad_token_id=prompts.pad_token_id, device=prompts.input_ids.device
    )  # [B, Tc]
    rows = prompts.select(prompt_rows)
    kept_media = None if media is None else [media[i] for i in kept]
    check_media_tokens(completion_ids, placeholder_counts(kept_media, len(kept)), rows.placeholder_ids, rows.sample_ids)
    return TrainBatch(
        prompt=rows,
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        kept=kept,
        num_dropped=len(prompt_of) - len(kept),
        completion_media=kept_media,
    )


def pad_completions(
    completions_token_ids: Sequence[TokenIds], *, pad_token_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded completion ids ``[N, Tc]`` and their 0/1 mask ``[N, Tc]`` (Tc >= 1), on ``device``."""
    filled = ragged_rows(completions_token_ids)  # [N, Tc]
    ids = torch.full(filled.shape, pad_token_id, dtype=torch.long)
    ids[filled] = torch.tensor([token for tokens in completions_token_ids for token in tokens], dtype=torch.long)
    return ids.to(device), filled.long().to(device)
