"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from transformers import ProcessorMixin

from mmgrpo.models.adapters.base import FamilyAdapter, PositionIds, weight_placement, unwrap_model
from mmgrpo.models.media_rows import MediaCounts, tokens_per_row


class QwenVLAdapter(FamilyAdapter):
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL: M-RoPE positions, patches of all items concatenated.

    Continuations start at the prompt's last position + 1, as ``get_rope_index`` numbers
    text after text over a whole sequence. With the original numbering that models load
    with (:func:`mmgrpo.models.compat.use_original_qwen_positions`: text after a media item
    starts after its largest position on any axis) that is also the prompt's largest
    position + 1, where transformers' ``generate`` continues (``rope_deltas``).
    """

    per_item_keys = {"image_grid_thw": "image", "video_grid_thw": "video", "second_per_grid_ts": "video"}
    per_patch_keys = {"pixel_values": "image_grid_thw", "pixel_values_videos": "video_grid_thw"}
    tower_prefixes = ("model.visual.",)
    tower_inputs = {"image": "pixel_values", "video": "pixel_values_videos"}  # one tower, run once for each
    # Qwen3-VL also feeds early vision layers to the decoder through its deepstack mergers.
    projector_prefixes = ("model.visual.merger.", "model.visual.deepstack_merger_list.")
    _rope_media_keys = ("image_grid_thw", "video_grid_thw", "second_per_grid_ts")
    inline_media = True  # positions come from get_rope_index over the whole row, media included

    def prompt_positions(
        self, model: torch.nn.Module, inputs: Mapping[str, torch.Tensor]
    ) -> tuple[PositionIds, torch.Tensor]:
        input_ids = inputs["input_ids"]  # [B, Tp]
        media = {key: inputs[key] for key in self._rope_media_keys if key in inputs}
        if not media:  # text-only prompts: M-RoPE reduces to 1-D positions on all three axes
            position_ids, next_position = super().prompt_positions(model, inputs)
            return position_ids[None].expand(3, -1, -1), next_position
        token_types = inputs.get("mm_token_type_ids")
        if token_types is None:
            raise ValueError("Qwen-VL positions need the processor's mm_token_type_ids")
        position_ids, _ = unwrap_model(model).model.get_rope_index(
            input_ids, token_types, attention_mask=inputs["attention_mask"], **media
        )  # [3, B, Tp]
        # Left padding puts every row's last real token in the last column.
        next_position = position_ids[:, :, -1].amax(0) + 1  # [B]
        return position_ids, next_position

    def continuation_positions(self, next_position: torch.Tensor, length: int) -> PositionIds:
        return super().continuation_positions(next_position, length)[None].expand(3, -1, -1)  # [3, N, L]

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One image (or one-frame video) of one merged token: a ``merge x merge`` grid of patches."""
        vision = backbone.config.vision_config
        merge = vision.spatial_merge_size
        width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
        device, dtype = weight_placement(backbone.visual)
        pixels, grid = self.tower_inputs[modality], {"image": "image_grid_thw", "video": "video_grid_thw"}[modality]
        return {
            pixels: torch.ones(merge * merge, width, device=device, dtype=dtype),
            grid: torch.tensor([[1, merge, merge]], device=device),
        }

    def image_pixel_range(self, processor: ProcessorMixin) -> tuple[int, int] | None:
        """Qwen-VL image processors keep an image's area in ``size`` = {shortest_edge: min, longest_edge: max}."""
        size = processor.image_processor.size
        return size.get("shortest_edge"), size.get("longest_edge")

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Each image or video needs ``t * h * w / merge_size**2`` tokens of its grid."""
        expected = [dict.fromkeys(self.placeholder_token_ids(processor), 0) for _ in media_counts]
        for modality, grid_key, media_processor in (
            ("image", "image_grid_thw", getattr(processor, "image_processor", None)),
            ("video", "video_grid_thw", getattr(processor, "video_processor", None)),
        ):
            if grid_key not in encoded:
                continue
            tokens = encoded[grid_key].prod(-1) // media_processor.merge_size**2  # [items]
            for row, count in zip(expected, tokens_per_row(tokens, media_counts, modality)):
                row[modality] = count
        return expected


class Qwen3_5Adapter(QwenVLAdapter):
    """Qwen3.5 (dense and mixture of experts): Qwen3-VL's patches and M-RoPE before a hybrid decoder, whose
    linear-attention layers carry a group's prompt as their state (:mod:`mmgrpo.models.replay_cache`)."""

    projector_prefixes = ("model.visual.merger.",)  # no deepstack mergers
    inline_media = False  # media inside a completion (tool images) are not tested on this family
