"""The adapter every family starts from: 1-D rotary positions over real tokens, media tensors stacked per row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import ProcessorMixin

from mmgrpo.models.media_rows import MediaCounts, item_index, patch_index

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
    padded_item_keys: frozenset[str] = frozenset()
    """Per-item inputs whose items the processor zero-pads to the batch's largest (a row's own batch may differ)."""
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
        """The LM head mapping hidden states ``[..., D]`` to vocabulary logits ``[..., V]``: what log-probs are
        computed from, in chunks. A model that soft-caps its logits (``final_logit_softcapping``; none of Gemma 3's
        released checkpoints does) is refused here, as those log-probs would miss the cap."""
        softcap = getattr(unwrap_model(model).config.get_text_config(), "final_logit_softcapping", None)
        if softcap is not None:
            raise ValueError(f"final_logit_softcapping={softcap} is not supported: mmgrpo computes log-probs from "
                             "the output head's logits, without the cap")
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

    def prompt_markers(self, processor: ProcessorMixin) -> dict[str, str]:
        """Each modality's marker as the chat template writes it, once per media item, before the processor expands
        it: by default the placeholder token itself (Qwen-VL's one ``<|image_pad|>`` becomes as many as needed)."""
        tokenizer = getattr(processor, "tokenizer", processor)
        return {modality: tokenizer.convert_ids_to_tokens(token_id)
                for modality, token_id in self.placeholder_token_ids(processor).items()}

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

        Per-item and per-patch inputs are concatenated in row order (rows without such items have none), per-row
        inputs stacked; per-row inputs and ``padded_item_keys`` zero-padded on every dimension past the first to the
        largest row, as processors pad tiles and masks within a batch (LLaVA-OneVision's tiles of each image). Other
        per-item inputs must agree in shape past the first dimension (a mismatch is an error, not padding).
        """
        merged = {}
        for key in sorted({key for row in rows for key in row}):
            if key in self.per_item_keys or key in self.per_patch_keys:
                items = [row[key] for row in rows if key in row]
                merged[key] = zero_padded(items) if key in self.padded_item_keys else torch.cat(items)
            else:
                present = next(row[key] for row in rows if key in row)
                merged[key] = zero_padded([row[key] if key in row else present.new_zeros(present.shape)
                                            for row in rows])
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


def zero_padded(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``parts`` concatenated along the first dimension, each zero-padded past it to the largest."""
    shape = [max(part.shape[dim] for part in parts) for dim in range(1, parts[0].dim())]
    merged = parts[0].new_zeros((sum(part.shape[0] for part in parts), *shape))
    start = 0
    for part in parts:
        merged[(slice(start, start + part.shape[0]), *(slice(0, size) for size in part.shape[1:]))] = part
        start += part.shape[0]
    return merged


def weight_placement(module: torch.nn.Module) -> tuple[torch.device, torch.dtype]:
    """The device and dtype of ``module``'s weights (also of sharded ones)."""
    weight = next(module.parameters())
    return weight.device, weight.dtype


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face model inside PEFT (``get_base_model``) or DeepSpeed (``module``) wrappers."""
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return getattr(model, "module", model)
