"""SmolVLM and Idefics3: images split into tiles stacked per row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.base import FamilyAdapter, weight_placement
from mmgrpo.models.media_rows import MediaCounts


class TiledImageAdapter(FamilyAdapter):
    """SmolVLM / Idefics3: each image is split into tiles stacked per row, all-zero tiles pad."""

    tower_prefixes = ("model.vision_model.",)
    projector_prefixes = ("model.connector.",)

    tower_inputs = {"image": "pixel_values"}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One tile of the tower's input size (not all zero: an all-zero tile is padding)."""
        vision = backbone.config.vision_config
        size = vision.image_size
        device, dtype = weight_placement(backbone.vision_model)
        return {
            "pixel_values": torch.ones(1, 1, vision.num_channels, size, size, device=device, dtype=dtype),
            "pixel_attention_mask": torch.ones(1, 1, size, size, device=device, dtype=torch.bool),
        }

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Every real (not all-zero) tile needs ``image_seq_len`` tokens."""
        if "pixel_values" not in encoded:
            return [{"image": 0} for _ in media_counts]
        tiles = encoded["pixel_values"].flatten(2).ne(0).any(-1).sum(-1)  # [B] real tiles per row
        return [{"image": int(count) * processor.image_seq_len} for count in tiles]
