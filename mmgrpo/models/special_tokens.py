"""Token ids a sampled completion must never contain.

A randomly initialised (or barely trained) model happily samples placeholders such as
``<|image_pad|>`` or ``<|vision_start|>``; the next forward over prompt + completion then
fails ("Image features and image tokens do not match") or silently mis-aligns media.
Rollout engines suppress these ids during generation.
"""

from __future__ import annotations

from collections.abc import Iterable

from transformers import PreTrainedTokenizerBase, ProcessorMixin


def tokenizer_of(processor_or_tokenizer: ProcessorMixin | PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """The tokenizer itself, or the one a multimodal processor wraps."""
    return getattr(processor_or_tokenizer, "tokenizer", processor_or_tokenizer)


def forbidden_generation_token_ids(
    processor_or_tokenizer: ProcessorMixin | PreTrainedTokenizerBase,
    *,
    allowed: Iterable[int] = (),
) -> list[int]:
    """Every special token id (media placeholders, chat markers, ...) except the stop tokens.

    The tokenizer's EOS (the end-of-turn token of chat checkpoints) and the ids in
    ``allowed`` (e.g. ``model.generation_config.eos_token_id``) stay allowed so that
    generation can still stop. Normal added tokens such as ``<answer>`` stay allowed.
    Sorted ascending, for ``suppress_tokens`` or ``[[i] for i in ids]`` as ``bad_words_ids``.
    """
    tokenizer = tokenizer_of(processor_or_tokenizer)
    special = set(tokenizer.all_special_ids)
    special.update(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)
    keep = set(allowed)
    if tokenizer.eos_token_id is not None:
        keep.add(tokenizer.eos_token_id)
    return sorted(special - keep)
