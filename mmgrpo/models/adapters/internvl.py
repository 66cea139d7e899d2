"""InternVL3 and 3.5: aspect-ratio tiles of all images concatenated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.base import FamilyAdapter, weight_placement
from mmgrpo.models.media_rows import MediaCounts, tokens_per_row


class InternVLAdapter(FamilyAdapter):
    """InternVL3 / 3.5: each image is cut into tiles of the tower's input size (plus a thumbnail when
    there are several), the tiles of all images concatenated in ``pixel_values`` ``[tiles, 3, S, S]``.

    The processor drops how many tiles each image has (``num_patches``), so the adapter recomputes them
    from the image sizes with the processor's own formula (``_get_num_multimodal_tokens``, what vLLM
    asks) as the layout input ``image_tiles`` ``[images, 1]``, by which the tiles are split by row.
    Images only: the processor writes a video's frames as the same ``<IMG_CONTEXT>`` tokens,
    interleaved with the images' in text order, and mmgrpo does not split those.
    """

    per_item_keys = {"image_tiles": "image"}
    per_patch_keys = {"pixel_values": "image_tiles"}
    layout_keys = ("image_tiles",)
    tower_prefixes = ("model.vision_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)
    tower_inputs = {"image": "pixel_values"}

    def media_layout(self, processor: ProcessorMixin, media: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
        """``image_tiles`` ``[images, 1]``: each image's tile count, images in row order."""
        sizes = [(image.height, image.width) for row in media for image in row.get("image", ())]
        if not sizes:
            return {}
        tiles = processor._get_num_multimodal_tokens(image_sizes=sizes).num_image_patches
        return {"image_tiles": torch.tensor(tiles, dtype=torch.long)[:, None]}  # [images, 1]

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One tile of the tower's input size."""
        vision = backbone.config.vision_config
        height, width = vision.image_size
        device, dtype = weight_placement(backbone.vision_tower)
        return {"pixel_values": torch.ones(1, vision.num_channels, height, width, device=device, dtype=dtype)}

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Each tile needs ``image_seq_length`` tokens; the tile counts must add up to the processor's tiles."""
        videos = sum(row.get("video", 0) for row in media_counts)
        if videos:
            raise ValueError(f"InternVL: mmgrpo takes images only, got {videos} video(s)")
        tiles = encoded.get("image_tiles", torch.zeros(0, 1, dtype=torch.long))[:, 0]  # [images]
        made = encoded["pixel_values"].shape[0] if "pixel_values" in encoded else 0
        if int(tiles.sum()) != made:
            raise ValueError(f"InternVL: the processor made {made} tiles, its tile formula says {int(tiles.sum())}")
        per_row = tokens_per_row(tiles, media_counts, "image")
        return [{"image": count * processor.image_seq_length} for count in per_row]
