"""The Qwen-Omni thinkers (Qwen2.5-Omni, Qwen3-Omni): images, videos and audio in one policy."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import PretrainedConfig, ProcessorMixin

from mmgrpo.models.adapters.base import PositionIds, zero_padded, weight_placement, unwrap_model
from mmgrpo.models.adapters.qwen_vl import QwenVLAdapter
from mmgrpo.models.media_rows import MediaCounts, audio_tokens_per_row, chunked_clip_tokens, whisper_clip_tokens


AUDIO_HALVINGS = 3  # Qwen3-Omni's audio tower: three stride-2 convolutions over each chunk


class OmniThinkerAdapter(QwenVLAdapter):
    """Qwen2.5-Omni's thinker: Qwen2.5-VL's vision tower and patches, Qwen2-Audio-style clips stacked per item, and
    TMRoPE positions (``get_rope_index`` with the images', videos' and clips' sizes).

    TMRoPE numbers an audio clip's tokens like text; a video's temporal positions step by
    ``position_id_per_seconds`` x seconds per temporal patch (25 per second); text after any media item
    continues from the item's largest position + 1 on any axis (the original Qwen numbering), so a
    continuation starts at the prompt's largest position + 1, as for Qwen-VL. A video's own audio track
    interleaved with its frames (``use_audio_in_video``) is refused: mmgrpo loads a video's frames only.
    """

    per_item_keys = {
        "image_grid_thw": "image",
        "video_grid_thw": "video",
        "video_second_per_grid": "video",
        "input_features": "audio",
        "feature_attention_mask": "audio",
    }
    tower_prefixes = ("model.visual.", "model.audio_tower.")
    # The vision merger and the audio tower's last norm + projection into the language model's width.
    projector_prefixes = ("model.visual.merger.", "model.audio_tower.ln_post.", "model.audio_tower.proj.")
    tower_inputs = {"image": "pixel_values", "video": "pixel_values_videos", "audio": "input_features"}
    inline_media = False  # media inside a completion (tool images) are not tested on this family

    def prompt_positions(
        self, model: torch.nn.Module, inputs: Mapping[str, torch.Tensor]
    ) -> tuple[PositionIds, torch.Tensor]:
        thinker = unwrap_model(model).model
        input_ids = inputs["input_ids"]  # [B, Tp]
        _refuse_audio_in_video(thinker.config, input_ids)
        grids = {key: inputs.get(key) for key in ("image_grid_thw", "video_grid_thw")}
        if all(grid is None for grid in grids.values()):  # text and audio only: 1-D positions on all three axes
            return super().prompt_positions(model, {"input_ids": input_ids, "attention_mask": inputs["attention_mask"]})
        clip_frames = inputs.get("feature_attention_mask")  # [clips, F]
        position_ids, _ = thinker.get_rope_index(
            input_ids,
            attention_mask=inputs["attention_mask"],
            audio_seqlens=None if clip_frames is None else clip_frames.sum(-1),
            second_per_grids=inputs.get("video_second_per_grid"),
            **grids,
        )  # [3, B, Tp]
        return position_ids, position_ids[:, :, -1].amax(0) + 1  # left padding: the last column is real

    def media_layout(self, processor: ProcessorMixin, media: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
        """``video_second_per_grid`` ``[videos]``: the seconds each temporal patch spans at the fps its frames were
        sampled at. The processor ignores the frames' metadata and assumes 2 fps unless given one ``fps`` for all
        videos, which would misplace in time (TMRoPE) every video sampled at another rate. A forward input: it
        replaces the processor's."""
        clips = [clip for row in media for clip in row.get("video", ())]
        if not clips:
            return {}
        patch = processor.video_processor.temporal_patch_size
        return {"video_second_per_grid": torch.tensor([patch / clip.fps for clip in clips], dtype=torch.float32)}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """Image and video as for Qwen-VL; audio: one clip of one attention window (``2 * n_window`` frames)."""
        if modality != "audio":
            return super().dummy_media(backbone, modality)
        audio = backbone.config.audio_config
        device, dtype = weight_placement(backbone.audio_tower)
        frames = 2 * audio.n_window
        return {
            "input_features": torch.ones(1, audio.num_mel_bins, frames, device=device, dtype=dtype),
            "feature_attention_mask": torch.ones(1, frames, device=device, dtype=torch.long),
        }

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Images and videos as for Qwen-VL, audio clips by :meth:`clip_tokens`."""
        expected = super().expected_media_tokens(processor, encoded, media_counts)
        clip_tokens = functools.partial(self.clip_tokens, processor)
        for row, count in zip(expected, audio_tokens_per_row(encoded, media_counts, clip_tokens)):
            row["audio"] = count
        return expected

    def clip_tokens(self, processor: ProcessorMixin, frames: torch.Tensor) -> torch.Tensor:
        """Tokens ``[clips]`` of clips of ``frames`` ``[clips]`` feature frames: one per 4, as for Qwen2-Audio."""
        return whisper_clip_tokens(frames)


class Qwen3OmniThinkerAdapter(OmniThinkerAdapter):
    """Qwen3-Omni's thinker: as Qwen2.5-Omni's (TMRoPE from its own ``get_rope_index``, 13 positions a second), with
    Qwen3-VL's vision tower, whose deepstack mergers feed early vision layers to the decoder, and an audio tower that
    cuts a clip into chunks of ``2 * n_window`` feature frames (1 s) and halves each three times (13 tokens a
    second), projecting through ``proj1`` and ``proj2``."""

    projector_prefixes = (
        "model.visual.merger.", "model.visual.merger_list.",
        "model.audio_tower.ln_post.", "model.audio_tower.proj1.", "model.audio_tower.proj2.",
    )
    # Its processor pads clips to the batch's longest (not to a fixed length, as Qwen2.5-Omni's): rows of other
    # batches (cached prompts) are padded when batched together.
    padded_item_keys = frozenset({"input_features", "feature_attention_mask"})

    def media_layout(self, processor: ProcessorMixin, media: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
        """As Qwen2.5-Omni's, and ``input_features`` / ``feature_attention_mask`` ``[clips, ...]`` of each clip
        extracted alone, zero-padded to the longest. The processor extracts a batch's clips padded to the longest
        waveform, so a clip's last frames (their windows reach past its end) would depend on the clips beside it;
        alone, each row's features are the same in any batch (and as an engine given the clip alone computes them).
        Forward inputs: they replace the processor's."""
        layout = super().media_layout(processor, media)
        clips = [clip for row in media for clip in row.get("audio", ())]
        if not clips:
            return layout
        extractor = processor.feature_extractor
        alone = [extractor(clip.samples, sampling_rate=clip.sample_rate, padding=True, truncation=False,
                           return_attention_mask=True, return_tensors="pt") for clip in clips]
        return layout | {
            "input_features": zero_padded([features["input_features"] for features in alone]),  # [clips, mel, F]
            "feature_attention_mask": zero_padded([features["attention_mask"] for features in alone]),  # [clips, F]
        }

    def clip_tokens(self, processor: ProcessorMixin, frames: torch.Tensor) -> torch.Tensor:
        """The processor's (and the audio tower's) count: chunks of ``2 * n_window`` frames, each halved 3 times."""
        return chunked_clip_tokens(frames, 2 * processor.n_window, AUDIO_HALVINGS)


def _refuse_audio_in_video(config: PretrainedConfig, input_ids: torch.Tensor) -> None:
    """Raise if a video's placeholders open with the audio start token (the processor's ``load_audio_from_video``)."""
    opens = input_ids[:, :-1] == config.vision_start_token_id  # [B, T-1]
    if (opens & (input_ids[:, 1:] == config.audio_start_token_id)).any():
        raise ValueError(
            "Qwen-Omni: a video with its audio track interleaved (use_audio_in_video / load_audio_from_video) is "
            "not supported: give the audio as its own audio part beside the video"
        )
