"""Audio families whose features are stacked per clip (Qwen2-Audio)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.base import FamilyAdapter, weight_placement
from mmgrpo.models.media_rows import MediaCounts, audio_tokens_per_row


class AudioPerItemAdapter(FamilyAdapter):
    """Audio families whose features are stacked per clip (Qwen2-Audio), not per row."""

    per_item_keys = {"input_features": "audio", "feature_attention_mask": "audio"}
    tower_prefixes = ("model.audio_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)

    tower_inputs = {"audio": "input_features"}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One clip of the encoder's fixed input length."""
        audio = backbone.config.audio_config
        device, dtype = weight_placement(backbone.audio_tower)
        return {"input_features": torch.ones(1, audio.num_mel_bins, 2 * audio.max_source_positions, device=device,
                                             dtype=dtype)}

    def tower_output(self, backbone: torch.nn.Module, modality: str, media: Mapping[str, torch.Tensor]) -> Any:
        return backbone.multi_modal_projector(backbone.audio_tower(media["input_features"]).last_hidden_state)

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """A clip of F feature frames needs one token per 4 frames (``audio_tokens_per_row``)."""
        return [{"audio": count} for count in audio_tokens_per_row(encoded, media_counts)]
