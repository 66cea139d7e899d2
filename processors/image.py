"""Load one image from any reference a dataset row may hold, as RGB within a pixel budget.

Accepted references: a path (``str`` / ``Path``) or ``file://`` URI, encoded bytes, a
PIL image, a numpy array (HxWx3/4 or HxW, uint8 or float in [0, 1]) and a Hugging Face
``datasets`` image dict (``{"bytes": ..., "path": ...}``). Bad media raises a typed
``MediaError`` naming the source.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from functools import singledispatch
from typing import Any, BinaryIO

import numpy as np
from PIL import Image, ImageOps

from processors.budgets import ImageBudget
from processors.errors import (
    CorruptMediaError, EmptyMediaError, MediaError, MediaShapeError, MissingMediaError,
)
from processors.finite import require_finite
from processors.sizing import smart_resize
from processors.sources import describe, existing_file

ImageRef = str | os.PathLike | bytes | Image.Image | np.ndarray | dict[str, Any]

RESAMPLE = Image.Resampling.BICUBIC
BACKGROUND = (255, 255, 255)  # transparent pixels are composited on white, as qwen-vl-utils does
ARRAY_CHANNELS = (3, 4)  # RGB or RGBA; a single channel is squeezed to grayscale first
# Integer grayscale modes holding 16-bit samples (16-bit PNG / TIFF). Pillow's convert("RGB")
# clips them at 255, which turns nearly every pixel white; they are scaled to 8 bits instead.
# Mode "I" (32-bit) is how older Pillow versions open 16-bit files, so it is read as 16-bit too.
SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
SIXTEEN_TO_EIGHT_BIT = 65535 / 255  # = 257: 0 -> 0 and 65535 -> 255
FLOAT_MODES = frozenset({"F"})  # 32-bit float pixels (float TIFF): the only Pillow modes that can hold NaN


def load_image(ref: ImageRef, budget: ImageBudget = ImageBudget()) -> Image.Image:
    """Decode ``ref``, apply its EXIF orientation, convert to RGB and resize into ``budget``."""
    source = describe(ref)
    return resize_to_budget(to_rgb(decode_image(ref, source)), budget, source=source)


def resize_to_budget(image: Image.Image, budget: ImageBudget, *, source: str) -> Image.Image:
    """``image`` resized to qwen-vl-utils' ``smart_resize`` target for ``budget``."""
    width, height = budget_size(image.size, budget, source=source)
    if (width, height) == image.size:
        return image
    return image.resize((width, height), RESAMPLE)


def budget_size(size: tuple[int, int], budget: ImageBudget, *, source: str = "image") -> tuple[int, int]:
    """``(width, height)`` an image of ``size`` (width, height) has once resized into ``budget``.

    The one place the image size the model sees is computed: the batch builder resizes
    with it and the grounding task converts box coordinates with it.
    """
    height, width = smart_resize(
        size[1],
        size[0],
        factor=budget.factor,
        min_pixels=budget.min_pixels,
        max_pixels=budget.max_pixels,
        max_aspect_ratio=budget.max_aspect_ratio,
        source=source,
    )
    return width, height


def to_rgb(image: Image.Image) -> Image.Image:
    """``image`` in RGB mode; transparent pixels become white, 16-bit grayscale is scaled to
    8 bits, other modes are converted."""
    if image.mode == "RGB":
        return image
    if image.mode in SIXTEEN_BIT_MODES:
        image = to_8bit_grayscale(image)
    if image.has_transparency_data:
        rgba = image.convert("RGBA")
        composed = Image.new("RGB", image.size, BACKGROUND)
        composed.paste(rgba, mask=rgba.getchannel("A"))
        return composed
    return image.convert("RGB")


def to_8bit_grayscale(image: Image.Image) -> Image.Image:
    """A 16-bit grayscale ``image`` as 8-bit ("L"): each sample divided by 257, rounded, clipped."""
    samples = np.asarray(image).astype(np.float64)  # [H, W], 0..65535
    scaled = np.clip(np.round(samples / SIXTEEN_TO_EIGHT_BIT), 0, 255).astype(np.uint8)
    return Image.fromarray(scaled)  # uint8 [H, W] -> mode "L"


@contextlib.contextmanager
def _decoding(source: str) -> Iterator[None]:
    """Translate Pillow's decoding failures into typed media errors naming ``source``."""
    try:
        yield
    except MediaError:
        raise
    except Image.DecompressionBombError as error:
        raise MediaShapeError(source, str(error)) from error
    except (OSError, SyntaxError, ValueError) as error:  # Pillow raises all three for bad data
        raise CorruptMediaError(source, f"cannot decode image: {error}") from error


def _open_encoded(file: str | os.PathLike | BinaryIO, source: str) -> Image.Image:
    with _decoding(source), Image.open(file) as image:
        image.load()
        return _finite(ImageOps.exif_transpose(image), source)  # a detached, upright copy


def _finite(image: Image.Image, source: str) -> Image.Image:
    """``image``, checked to hold no NaN or infinite pixel when its mode stores floats (Pillow's
    conversion to RGB would turn them into black or white pixels without a word)."""
    if image.mode in FLOAT_MODES:
        require_finite(np.asarray(image), source, "pixel values")
    return image


@singledispatch
def decode_image(ref: object, source: str) -> Image.Image:
    """Decode any supported reference to an upright PIL image (any mode, not resized)."""
    raise TypeError(f"{source}: unsupported image reference of type {type(ref).__name__}; "
                    "expected a path, bytes, PIL image, numpy array or {'bytes', 'path'} dict")


@decode_image.register(type(None))
def _decode_none(ref: None, source: str) -> Image.Image:
    raise MissingMediaError(source, "no image reference (None)")


@decode_image.register(str)
@decode_image.register(os.PathLike)
def _decode_path(ref: str | os.PathLike, source: str) -> Image.Image:
    return _open_encoded(existing_file(ref), source)


@decode_image.register(bytes)
@decode_image.register(bytearray)
def _decode_bytes(ref: bytes, source: str) -> Image.Image:
    if not ref:
        raise EmptyMediaError(source, "no image bytes")
    return _open_encoded(io.BytesIO(ref), source)


@decode_image.register(dict)
def _decode_dict(ref: dict[str, Any], source: str) -> Image.Image:
    # A Hugging Face ``datasets`` Image feature without decoding: bytes win over path.
    if ref.get("bytes"):
        return _decode_bytes(ref["bytes"], source)
    if ref.get("path"):
        return _decode_path(ref["path"], source)
    raise MissingMediaError(source, "image dict has neither 'bytes' nor 'path'")


@decode_image.register(Image.Image)
def _decode_pil(ref: Image.Image, source: str) -> Image.Image:
    with _decoding(source):
        ref.load()  # a lazily opened image may still fail to decode here
        return _finite(ImageOps.exif_transpose(ref), source)


@decode_image.register(np.ndarray)
def _decode_array(ref: np.ndarray, source: str) -> Image.Image:
    if ref.size == 0:
        raise EmptyMediaError(source, "array has no pixels")
    pixels = ref[..., 0] if ref.ndim == 3 and ref.shape[2] == 1 else ref  # [H, W, 1] -> [H, W]
    if not (pixels.ndim == 2 or (pixels.ndim == 3 and pixels.shape[2] in ARRAY_CHANNELS)):
        raise MediaShapeError(source, "expected an HxW or HxWxC array with C in 1, 3 or 4")
    return Image.fromarray(np.ascontiguousarray(_as_uint8(pixels, source)))


def _as_uint8(pixels: np.ndarray, source: str) -> np.ndarray:
    """uint8 pixels kept as they are; floats in [0, 1] scaled to 0..255."""
    if pixels.dtype == np.uint8:
        return pixels
    if not np.issubdtype(pixels.dtype, np.floating):
        raise MediaShapeError(source, f"unsupported pixel dtype {pixels.dtype}; use uint8 or float in [0, 1]")
    require_finite(pixels, source, "pixel values")
    low, high = float(pixels.min()), float(pixels.max())
    if not (0.0 <= low and high <= 1.0):
        raise MediaShapeError(source, f"float pixels must lie in [0, 1], got [{low:.3g}, {high:.3g}]")
    return (pixels * 255).round().astype(np.uint8)
