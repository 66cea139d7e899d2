"""The tiny-model family registry and the size spec every family builder reads.

A family builder turns a :class:`TinySpec` into a randomly initialised model and its
processor (tokenizer, media processors, chat template), ready for ``save_pretrained``.
Builders live in one module per family (``qwen.py``, ``smolvlm.py``, ``audio.py``) and
register themselves in :data:`TINY_FAMILIES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase, ProcessorMixin

from mmgrpo.registry import Registry

# How many merged vision tokens the default pixel budgets allow for one image.
DEFAULT_MIN_IMAGE_TOKENS = 4
DEFAULT_MAX_IMAGE_TOKENS = 16


# Overrides that make a tiny checkpoint run in vLLM's CPU build (measured, ../shared/ENVIRONMENT.md):
# its attention takes head_dim 32, not the default 16, and Qwen2-Audio a 30-second feature window.
# Its Gated DeltaNet kernel takes linear-attention heads of 128 dimensions, as Qwen3.5's.
VLLM_CPU_TINY_OPTIONS: dict[str, int] = {
    "num_heads": 2, "num_kv_heads": 1, "audio_max_seconds": 30, "linear_attention_head_dim": 128
}


# A real checkpoint's widths with a few layers (``make-tiny --shape``): the per-token cost of the real model (its
# 151k-row head, 2048-wide layers, 1280-wide vision tower, 448 x 448 images as 256 merged tokens) at a depth a CPU
# steps through in seconds to minutes. From the published configs of Qwen2.5-VL-3B/7B-Instruct.
QWEN2_5_VL_VISION = {"vision_hidden_size": 1280, "vision_intermediate_size": 3420, "vision_heads": 16,
                     "vision_depth": 2, "min_pixels": 56 * 56, "max_pixels": 448 * 448}
REAL_SHAPES: dict[str, dict[str, int]] = {
    "qwen2_5_vl_3b": {"embedding_rows": 151_936, "tie_word_embeddings": 1, "hidden_size": 2048,
                      "intermediate_size": 11_008, "num_heads": 16, "num_kv_heads": 2, "num_layers": 2,
                      **QWEN2_5_VL_VISION},
    "qwen2_5_vl_7b": {"embedding_rows": 152_064, "hidden_size": 3584, "intermediate_size": 18_944, "num_heads": 28,
                      "num_kv_heads": 4, "num_layers": 2, **QWEN2_5_VL_VISION},
}


@dataclass(frozen=True)
class TinySpec:
    """Sizes and media budgets of a tiny model; every field is a ``make_tiny`` override."""

    vocab_size: int = 400
    """BPE vocabulary (256 bytes + merges); special and reasoning tokens come on top."""
    embedding_rows: int | None = None
    """Rows of the token embedding and the output head; None = the tokenizer's length. A real family's
    vocabulary size (Qwen2.5-VL-3B: 151,936) gives them their real cost while the tokenizer uses the first rows."""
    tie_word_embeddings: bool = False
    """One matrix for the token embedding and the output head (Qwen2.5-VL-3B ties them, 7B does not);
    ``--set tie_word_embeddings=1``. Off: the family's default."""
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    linear_attention_head_dim: int | None = None
    """Key and value head width of linear-attention layers (Qwen3.5); None = the attention heads'."""
    vision_hidden_size: int = 32
    vision_intermediate_size: int = 64
    vision_depth: int = 2
    vision_heads: int = 2
    min_pixels: int | None = None
    """Image/video frame pixel floor; None = DEFAULT_MIN_IMAGE_TOKENS merged patches."""
    max_pixels: int | None = None
    """Image/video frame pixel ceiling; None = DEFAULT_MAX_IMAGE_TOKENS merged patches."""
    max_frames: int = 8
    """Most frames the video processor samples from one video."""
    audio_layers: int = 2
    audio_hidden_size: int = 32
    audio_heads: int = 2
    audio_num_mel_bins: int = 128
    audio_max_seconds: int = 10
    """Longest audio clip the audio encoder's positions cover."""
    audio_conv_init_std: float = 0.2
    """Std of the audio encoder's two input convolutions' random weights (transformers: 0.02).
    At 0.02 a beep (2-3 lit mel bins) barely moves the convolutions' output next to the
    clip-independent position embedding: ~3% of the encoder output's variance differs between
    clips, and neither SFT nor GRPO learns to count beeps. At 0.2 it is >99%
    (tests/models/test_tiny_audio_init.py)."""

    rope_theta: float = 10000.0
    """Base of the language model's rotary positions. Qwen's M-RoPE gives the height and width of
    image/video tokens the lowest frequencies: at 8 frequency pairs and base 10000, one image
    column turns the width pairs by at most 0.003 rad, so a tiny model cannot tell which tokens
    share a place (what deduplicating objects across video frames needs). Base 10: 0.13-0.24 rad."""
    vision_position_init_std: float | None = None
    """Std of Qwen3-VL's learned patch-position embeddings at init; None = transformers' (0.02).
    Only Qwen3-VL's and Qwen3.5's vision towers have absolute positions (the others rotate attention only)."""

    def pixel_budget(self, patch_size: int, merge_size: int) -> tuple[int, int]:
        """(min_pixels, max_pixels) for a vision tower with this patch grid."""
        token_pixels = (patch_size * merge_size) ** 2
        return (
            self.min_pixels or DEFAULT_MIN_IMAGE_TOKENS * token_pixels,
            self.max_pixels or DEFAULT_MAX_IMAGE_TOKENS * token_pixels,
        )

    @classmethod
    def from_overrides(cls, **overrides: object) -> TinySpec:
        """A spec with ``overrides`` applied; an unknown name lists the known fields."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown tiny-model option(s) {unknown}; known: {sorted(known)}")
        return cls(**overrides)


class TinyModel(NamedTuple):
    """What a family builder returns: a random model and its complete processor."""

    model: PreTrainedModel
    processor: ProcessorMixin


TinyBuilder = Callable[[TinySpec], TinyModel]
TINY_FAMILIES: Registry[TinyBuilder] = Registry("tiny model family")


def generation_config(tokenizer: PreTrainedTokenizerBase, stop_tokens: Sequence[str]) -> GenerationConfig:
    """Generation defaults of a chat checkpoint: stop on any turn/text end, pad with pad."""
    return GenerationConfig(
        eos_token_id=tokenizer.convert_tokens_to_ids(list(stop_tokens)),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


def decoder_config(spec: TinySpec, tokenizer: PreTrainedTokenizerBase, **overrides: Any) -> dict[str, Any]:
    """The language-model sizes and token ids every family's text config shares, plus ``overrides``."""
    if spec.embedding_rows is not None and spec.embedding_rows < len(tokenizer):
        raise ValueError(f"embedding_rows={spec.embedding_rows} is below the tokenizer's {len(tokenizer)} tokens")
    return {
        "vocab_size": spec.embedding_rows or len(tokenizer),
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "max_position_embeddings": spec.max_position_embeddings,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        **({"tie_word_embeddings": True} if spec.tie_word_embeddings else {}),
        **overrides,
    }
