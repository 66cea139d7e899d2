"""Model-family quirks behind one interface, so the data path never branches on a family.

A :class:`FamilyAdapter` answers the questions a training or decoding loop must ask
about a VLM family:

- ``prompt_positions`` / ``continuation_positions``: the position ids of a left-padded
  prompt and of the tokens that follow it (Qwen-VL's M-RoPE gives media tokens 3-D
  positions, so they are not simply 0..n-1). The continuation of a prompt ending in text
  continues from its last position + 1 on every axis, exactly what the family's own
  forward computes over the whole prompt + completion sequence.
- ``expected_media_tokens``: how many placeholder tokens each row's media features need.
- ``select_media``: the media tensors of a subset of rows (some families concatenate
  all images' patches into one tensor instead of stacking them per row).
- ``backbone`` / ``output_head``: the module giving hidden states and the LM head, so
  log-probs can be computed in chunks instead of materialising all logits.
- ``tower_prefixes`` / ``projector_prefixes``: the parameter-name prefixes (in memory) of the media encoder and
  of the projector, which ``model.freeze_vision_tower`` / ``model.freeze_projector`` freeze.
- ``tower_inputs`` / ``dummy_media`` / ``tower_output``: the inputs that make the forward run the media tower, a
  smallest valid one of each, and the tower run on it (the dummy media pass, :mod:`mmgrpo.models.dummy_media`).

Adapters are registered in :data:`FAMILY_ADAPTERS` under the config's ``model_type``; unknown families get the
generic :class:`FamilyAdapter` (1-D rotary positions over real tokens, media tensors stacked per row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import PretrainedConfig, ProcessorMixin

from mmgrpo.models.compat import omni_thinker_holds_towers
from mmgrpo.models.media_rows import MediaCounts, audio_tokens_per_row, item_index, patch_index, tokens_per_row
from mmgrpo.registry import Registry

MEDIA_KINDS = ("image", "video", "audio")
# Position ids: [B, T] for 1-D rotary models, [3, B, T] for M-RoPE (temporal, height, width).
PositionIds = torch.Tensor


class FamilyAdapter:
    """A decoder VLM with 1-D rotary positions and media tensors stacked per row.

    Subclasses override only what differs. ``per_token_keys`` are processor outputs
    with one entry per prompt token besides ``input_ids`` / ``attention_mask`` (zero
    over completions, which are text). ``per_item_keys`` maps a processor output
    with one leading entry per media item to that item's modality; ``per_patch_keys``
    maps a processor output that concatenates the patch rows of all items to the grid
    key whose product gives each item's row count. Any other tensor is per row. ``layout_keys``
    are media inputs the adapter adds itself (``media_layout``), kept out of the forward.
    """

    per_token_keys: tuple[str, ...] = ("mm_token_type_ids", "token_type_ids")
    per_item_keys: Mapping[str, str] = {}
    per_patch_keys: Mapping[str, str] = {}
    # Parameter-name prefixes of the media encoder and of its projector (which may lie inside the
    # encoder's prefix, as Qwen-VL's merger does: the tower is then the rest). Unknown: none.
    tower_prefixes: tuple[str, ...] = ()
    projector_prefixes: tuple[str, ...] = ()
    inline_media: bool = False
    """Whether media may come mid-sequence, after a completion's first tokens (a tool's images,
    :mod:`mmgrpo.models.inline_media`): every media input per item or per patch, items read in token order."""

    # -- modules -----------------------------------------------------------------
    def backbone(self, model: torch.nn.Module) -> torch.nn.Module:
        """The inner model returning ``last_hidden_state`` (vision tower + decoder, no LM head)."""
        return unwrap_model(model).model

    def output_head(self, model: torch.nn.Module) -> torch.nn.Module:
        """The LM head mapping hidden states ``[..., D]`` to vocabulary logits ``[..., V]``."""
        return unwrap_model(model).get_output_embeddings()

    # -- positions ---------------------------------------------------------------
    def prompt_positions(
        self, model: torch.nn.Module, inputs: Mapping[str, torch.Tensor]
    ) -> tuple[PositionIds, torch.Tensor]:
        """(position ids ``[B, Tp]`` of a left-padded prompt batch, next position ``[B]``)."""
        mask = inputs["attention_mask"].long()  # [B, Tp]
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, Tp]
        return position_ids, mask.sum(-1)

    def continuation_positions(self, next_position: torch.Tensor, length: int) -> PositionIds:
        """Position ids ``[N, L]`` of ``length`` tokens following prompts whose next position is ``[N]``."""
        return next_position[:, None] + torch.arange(length, device=next_position.device)  # [N, L]

    # -- media -------------------------------------------------------------------
    # Media inputs saying how the media tensors line up with rows (for ``select_media`` / ``concat_media``) that
    # the processor does not return and the forward does not take: ``media_layout`` makes them, ``forward_media``
    # drops them.
    layout_keys: tuple[str, ...] = ()

    def media_layout(self, processor: ProcessorMixin, media: Sequence[Mapping[str, Sequence[Any]]]) -> dict[str, Any]:
        """The ``layout_keys`` inputs of a batch whose row b carries ``media[b]`` (modality -> loaded items)."""
        return {}

    def forward_media(self, media_inputs: Mapping[str, Any]) -> dict[str, Any]:
        """``media_inputs`` without the layout inputs: what the family's forward takes."""
        return {key: value for key, value in media_inputs.items() if key not in self.layout_keys}

    def image_pixel_range(self, processor: ProcessorMixin) -> tuple[int, int] | None:
        """(fewest, most) pixels the processor resizes every image into; None if it does not resize by area."""
        return None

    def placeholder_token_ids(self, processor: ProcessorMixin) -> dict[str, int]:
        """Token id standing for each modality's features (``<|image_pad|>``...), where the processor has one."""
        ids = {modality: getattr(processor, f"{modality}_token_id", None) for modality in MEDIA_KINDS}
        return {modality: token_id for modality, token_id in ids.items() if token_id is not None}

    def expected_media_tokens(
        self,
        processor: ProcessorMixin,
        encoded: Mapping[str, torch.Tensor],
        media_counts: Sequence[MediaCounts],
    ) -> list[dict[str, int]]:
        """Placeholder tokens each row's media features need, per modality.

        The generic family has no feature-to-token formula, so it trusts the processor's
        own expansion: the placeholders it wrote into the prompt. Families that know
        their formula override this to check the prompt against the features.
        """
        placeholders = self.placeholder_token_ids(processor)
        input_ids = encoded["input_ids"]  # [B, Tp]
        return [
            {modality: int((row == token_id).sum()) for modality, token_id in placeholders.items()}
            for row in input_ids
        ]

    def select_media(
        self,
        media_inputs: Mapping[str, Any],
        media_counts: Sequence[MediaCounts],
        rows: Sequence[int],
    ) -> dict[str, Any]:
        """The media inputs of ``rows`` (repeats allowed) of a batch whose rows hold ``media_counts``.

        A per-item or per-patch input none of ``rows`` has an item of is left out, as the
        processor leaves it out of a batch without that modality.
        """
        selected = {}
        for key, value in media_inputs.items():
            if key in self.per_item_keys or key in self.per_patch_keys:
                grid_key = self.per_patch_keys.get(key, key)
                items = item_index(media_counts, self.per_item_keys[grid_key], rows)
                if len(items):
                    index = patch_index(media_inputs[grid_key], items) if key in self.per_patch_keys else items
                    selected[key] = value[index]
            elif isinstance(value, torch.Tensor) and value.shape[0] == len(media_counts):
                selected[key] = value[torch.as_tensor(list(rows), dtype=torch.long)]
            else:
                raise ValueError(
                    f"cannot split processor output {key!r} by rows for {type(self).__name__}: "
                    "declare it in the family adapter's per_item_keys or per_patch_keys"
                )
        return selected

    def concat_media(self, rows: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """The media inputs of a batch made of ``rows`` (each as ``select_media`` gives one row).

        Per-item and per-patch inputs are concatenated in row order (rows without such
        items have none); per-row inputs are stacked, zero-padded on every dimension past
        the first to the largest row, as processors pad tiles and masks within a batch.
        """
        merged = {}
        for key in sorted({key for row in rows for key in row}):
            present = [row[key] for row in rows if key in row]
            if key in self.per_item_keys or key in self.per_patch_keys:
                merged[key] = torch.cat(present)
                continue
            shape = [max(value.shape[dim] for value in present) for dim in range(1, present[0].dim())]
            stacked = present[0].new_zeros((len(rows), *shape))
            for index, row in enumerate(rows):
                if key in row:
                    stacked[(index, *(slice(0, size) for size in row[key].shape[1:]))] = row[key][0]
            merged[key] = stacked
        return merged

    # -- the dummy media pass -------------------------------------------------------
    # Modality -> the forward input that makes the family run its media tower for it (once per forward).
    tower_inputs: Mapping[str, str] = {}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """The smallest valid tower input of ``modality`` (one of ``tower_inputs``), on the tower's device."""
        raise NotImplementedError(f"{type(self).__name__} has no dummy {modality} input")

    def tower_output(self, backbone: torch.nn.Module, modality: str, media: Mapping[str, torch.Tensor]) -> Any:
        """The tower and projector run on ``media`` as the family's forward runs them (``get_<modality>_features``)."""
        return getattr(backbone, f"get_{modality}_features")(**media)


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
        device, dtype = _placement(backbone.visual)
        pixels, grid = self.tower_inputs[modality], {"image": "image_grid_thw", "video": "video_grid_thw"}[modality]
        return {
            pixels: torch.ones(merge * merge, width, device=device, dtype=dtype),
            grid: torch.tensor([[1, merge, merge]], device=device),
        }

    def image_pixel_range(self, processor: ProcessorMixin) -> tuple[int, int] | None:
        """Qwen-VL image processors keep an image's area in ``size`` = {shortest_edge: min, longest_edge: max} pixels."""
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


class TiledImageAdapter(FamilyAdapter):
    """SmolVLM / Idefics3: each image is split into tiles stacked per row, all-zero tiles pad."""

    tower_prefixes = ("model.vision_model.",)
    projector_prefixes = ("model.connector.",)

    tower_inputs = {"image": "pixel_values"}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One tile of the tower's input size (not all zero: an all-zero tile is padding)."""
        vision = backbone.config.vision_config
        size = vision.image_size
        device, dtype = _placement(backbone.vision_model)
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
        device, dtype = _placement(backbone.vision_tower)
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


class AudioPerItemAdapter(FamilyAdapter):
    """Audio families whose features are stacked per clip (Qwen2-Audio), not per row."""

    per_item_keys = {"input_features": "audio", "feature_attention_mask": "audio"}
    tower_prefixes = ("model.audio_tower.",)
    projector_prefixes = ("model.multi_modal_projector.",)

    tower_inputs = {"audio": "input_features"}

    def dummy_media(self, backbone: torch.nn.Module, modality: str) -> dict[str, torch.Tensor]:
        """One clip of the encoder's fixed input length."""
        audio = backbone.config.audio_config
        device, dtype = _placement(backbone.audio_tower)
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
        device, dtype = _placement(backbone.audio_tower)
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
        """Images and videos as for Qwen-VL, audio clips as for Qwen2-Audio."""
        expected = super().expected_media_tokens(processor, encoded, media_counts)
        for row, count in zip(expected, audio_tokens_per_row(encoded, media_counts)):
            row["audio"] = count
        return expected


FAMILY_ADAPTERS: Registry[FamilyAdapter] = Registry("model family adapter")
for _model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
    FAMILY_ADAPTERS.add(_model_type, QwenVLAdapter())
for _model_type in ("smolvlm", "idefics3"):
    FAMILY_ADAPTERS.add(_model_type, TiledImageAdapter())
FAMILY_ADAPTERS.add("qwen2_audio", AudioPerItemAdapter())
FAMILY_ADAPTERS.add("internvl", InternVLAdapter())
if omni_thinker_holds_towers():  # the thinker's model type (a full qwen2_5_omni checkpoint is refused at load)
    FAMILY_ADAPTERS.add("qwen2_5_omni_thinker", OmniThinkerAdapter())

GENERIC_ADAPTER = FamilyAdapter()


def adapter_for(family: str | PretrainedConfig | torch.nn.Module) -> FamilyAdapter:
    """The adapter of a ``model_type`` name, a config, or a model; the generic one if none is registered."""
    if isinstance(family, torch.nn.Module):
        family = unwrap_model(family).config
    if isinstance(family, PretrainedConfig):
        family = family.model_type
    return FAMILY_ADAPTERS.get(family) if family in FAMILY_ADAPTERS else GENERIC_ADAPTER


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside PEFT (``get_base_model``) or DeepSpeed (``module``) wrappers."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return getattr(model, "module", model)


def _placement(module: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of ``module``'s weights (also of sharded ones)."""
    weight = next(module.parameters())
    return weight.device, weight.dtype


def _refuse_audio_in_video(config: PretrainedConfig, input_ids: torch.Tensor) -> None:
    """Raise if a video's placeholders open with ``<|audio_bos|>`` (the processor's ``load_audio_from_video``)."""
    opens = input_ids[:, :-1] == config.vision_start_token_id  # [B, T-1]
    if (opens & (input_ids[:, 1:] == config.audio_start_token_id)).any():
        raise ValueError(
            "Qwen2.5-Omni: a video with its audio track interleaved (use_audio_in_video / load_audio_from_video) is "
            "not supported: give the audio as its own audio part beside the video"
        )
