"""Gemma 3: every image resized to one square, its pooled patches a fixed number of tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.base import FamilyAdapter, weight_placement
from mmgrpo.models.media_rows import MediaCounts


class Gemma3Adapter(FamilyAdapter):
    """Gemma 3 (4B and up): a SigLIP tower whose patches are average-pooled to ``mm_tokens_per_image`` tokens,
    images stacked per item in ``pixel_values`` ``[images, 3, S, S]``, 1-D positions. The processor's
    ``token_type_ids`` (per token, 1 on an image's tokens) make those tokens attend to each other both ways;
    completions are text (0). Its ``image_token_id`` is ``<start_of_image>``, one per image: the tokens
    standing for the features are the ``<image_soft_token>``s it expands that into."""

    per_item_keys = {"pixel_values": "image"}
    tower_prefixes = ("model.vision_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)
    tower_inputs = {"image": "pixel_values"}

    def placeholder_token_ids(self, processor: ProcessorMixin) -> dict[str, int]:
        return {"image": processor.tokenizer.image_token_id}

    def prompt_markers(self, processor: ProcessorMixin) -> dict[str, str]:
        return {"image": processor.boi_token}

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Each image needs ``image_seq_length`` tokens (``mm_tokens_per_image``), whatever its size."""
        if any(row.get("video", 0) for row in media_counts):
            raise ValueError("Gemma 3 takes images only (a video is given as its frames, images)")
        return [{"image": row.get("image", 0) * processor.image_seq_length} for row in media_counts]

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One image of the tower's input size."""
        vision = backbone.config.vision_config
        device, dtype = weight_placement(backbone.vision_tower)
        side = vision.image_size
        return {"pixel_values": torch.ones(1, vision.num_channels, side, side, device=device, dtype=dtype)}
