"""GLM-4.1V (``glm4v``), GLM-4.5V and 4.6V (``glm4v_moe``): Qwen-VL's layout of patches and 3-D positions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.qwen_vl import QwenVLAdapter
from mmgrpo.models.media_rows import MediaCounts


class Glm4vAdapter(QwenVLAdapter):
    """GLM-4.1V, 4.5V and 4.6V: patches of all items concatenated with their ``[t, h, w]`` grids, 3-D rotary positions
    from the model's own ``get_rope_index`` (text after an image or a video frame continues past its largest
    position, as Qwen's original numbering does; so continuations start at the prompt's largest position + 1).

    A video is written as one image structure per temporal patch, each followed by its timestamp, and its tokens
    are ``<|image|>`` tokens too (the ``<|video|>`` marker is replaced): the image placeholder count of a row is its
    images' tokens plus its videos'. No ``second_per_grid_ts``. The projector is the convolution merging 2 x 2
    patches and the merger MLP after it.
    """

    per_item_keys = {"image_grid_thw": "image", "video_grid_thw": "video"}
    projector_prefixes = ("model.visual.downsample.", "model.visual.merger.")
    _rope_media_keys = ("image_grid_thw", "video_grid_thw")
    inline_media = False  # media inside a completion (tool images) are not tested on this family

    def image_pixel_range(self, processor: ProcessorMixin) -> tuple[int, int] | None:
        """GLM's image processor budgets an image as a two-frame temporal patch: its range is twice the area's."""
        low, high = super().image_pixel_range(processor)
        frames = processor.image_processor.temporal_patch_size
        return (None if low is None else low // frames), (None if high is None else high // frames)

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Images and videos alike need ``t * h * w / merge_size**2`` ``<|image|>`` tokens; no ``<|video|>`` stays."""
        expected = super().expected_media_tokens(processor, encoded, media_counts)
        for row in expected:
            row["image"] = row.get("image", 0) + row.pop("video", 0)  # a modality left out needs none
        return expected
