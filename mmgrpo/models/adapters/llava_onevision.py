"""LLaVA-OneVision: a lone image tiled "anyres", images among several and video frames as one tile each."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import ProcessorMixin
from transformers.image_processing_utils import select_best_resolution

from mmgrpo.models.adapters.base import FamilyAdapter, weight_placement
from mmgrpo.models.media_rows import MediaCounts, tokens_per_row


class LlavaOnevisionAdapter(FamilyAdapter):
    """LLaVA-OneVision (SigLIP tower, MLP projector, Qwen2 decoder, 1-D positions). ``pixel_values`` holds each
    image's tiles ``[images, tiles, 3, S, S]``, zero-padded to the batch's most tiles (the forward reads each image's
    count from its ``image_sizes`` ``[images, 2]``); ``pixel_values_videos`` each video's frames ``[videos, frames,
    3, S, S]``. A row of several images takes each as one tile: the processor's ``batch_num_images`` (one count per
    row with images) says which; here it is each image's row's count ``[images]``, which splits by rows like the
    other per-image inputs and is regrouped for the forward."""

    per_item_keys = {
        "pixel_values": "image", "image_sizes": "image", "batch_num_images": "image", "pixel_values_videos": "video",
    }
    padded_item_keys = frozenset({"pixel_values"})  # each image's tiles, padded to the batch's most
    tower_prefixes = ("model.vision_tower.",)
    # The learned newline closing each row of an image's features is the projector's, as LLaVA trains them together.
    projector_prefixes = ("model.multi_modal_projector.", "model.image_newline")
    tower_inputs = {"image": "pixel_values", "video": "pixel_values_videos"}

    def media_layout(self, processor: ProcessorMixin, media: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
        """``batch_num_images`` ``[images]``: the number of images in each image's row, images in row order."""
        per_image = [len(row["image"]) for row in media for _ in row.get("image", ())]
        return {"batch_num_images": torch.tensor(per_image, dtype=torch.long)} if per_image else {}

    def forward_media(self, media_inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The inputs with ``batch_num_images`` regrouped as the forward takes it: one count per row with images."""
        inputs = super().forward_media(media_inputs)
        if "batch_num_images" in inputs:
            per_image, rows = inputs["batch_num_images"].tolist(), []
            while sum(rows) < len(per_image):  # a row of n images has n equal entries
                rows.append(per_image[sum(rows)])
            inputs["batch_num_images"] = torch.tensor(rows, dtype=torch.long)
        return inputs

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """An image alone in its row: a base tile's tokens plus its grid's, unpadded to the image's aspect ratio and
        downsampled past ``anyres_max_N`` tiles' worth, and a newline per grid row. An image among several: one tile
        and a newline. A video: each frame's tokens pooled 2 x 2, and a newline. (SigLIP: every patch is a token.)"""
        tile = processor.num_image_tokens
        sizes = encoded.get("image_sizes", torch.zeros(0, 2, dtype=torch.long)).tolist()  # [images, 2]
        alone = [row.get("image", 0) == 1 for row in media_counts for _ in range(row.get("image", 0))]
        images = torch.tensor([
            anyres_tokens(processor, height, width, encoded["pixel_values"].shape[-1]) if single else tile + 1
            for (height, width), single in zip(sizes, alone)
        ], dtype=torch.long)  # [images]
        frames = encoded["pixel_values_videos"].shape[1] if "pixel_values_videos" in encoded else 0
        pooled = math.ceil(math.isqrt(tile) / 2) ** 2
        videos = torch.full((sum(row.get("video", 0) for row in media_counts),), frames * pooled + 1)  # [videos]
        return [{"image": image, "video": video} for image, video in zip(
            tokens_per_row(images, media_counts, "image"), tokens_per_row(videos, media_counts, "video"))]

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One tile's image (its base tile and the one tile of its grid) or a one-frame video."""
        vision = backbone.config.vision_config
        device, dtype = weight_placement(backbone.vision_tower)
        side = vision.image_size
        if modality == "video":
            frame = torch.ones(1, 1, vision.num_channels, side, side, device=device, dtype=dtype)  # [1, 1, 3, S, S]
            return {"pixel_values_videos": frame}
        return {
            "pixel_values": torch.ones(1, 2, vision.num_channels, side, side, device=device, dtype=dtype),
            "image_sizes": torch.tensor([[side, side]], device=device),
        }


def anyres_tokens(processor: ProcessorMixin, height: int, width: int, tile_side: int) -> int:
    """Tokens of an image of ``height`` x ``width`` pixels alone in its row (``pack_image_features``' shapes)."""
    side = math.isqrt(processor.num_image_tokens)  # tokens along a tile's side
    grid_height, grid_width = select_best_resolution((height, width), processor.image_processor.image_grid_pinpoints)
    rows, cols = grid_height // tile_side * side, grid_width // tile_side * side
    if width / height > cols / rows:  # wider than the grid: rows of padding above and below
        rows -= (rows - int(round(height * (cols / width), 7))) // 2 * 2
    else:
        cols -= (cols - int(round(width * (rows / height), 7))) // 2 * 2
    most_tiles = int(processor.vision_aspect_ratio.removeprefix("anyres_max_"))
    ratio = math.sqrt(rows * cols / (most_tiles * side**2))
    if ratio > 1.1:
        rows, cols = int(rows // ratio), int(cols // ratio)
    return processor.num_image_tokens + rows * (cols + 1)
