"""Faulty images: what the load-time check catches, what only a full decode finds, 16-bit scaling."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from data_recipes.media_checks import check_image
from processors import CorruptMediaError, ImageBudget, MediaShapeError, load_image
from processors.image import to_rgb

# A budget that keeps every pixel of the 40x64 ramp (sides already multiples of 8).
KEEP_SIZE = ImageBudget(min_pixels=8 * 8, max_pixels=64 * 64, factor=8)


@pytest.mark.parametrize("name", ["truncated_jpeg", "corrupt_png"])
def test_damaged_pixel_stream_passes_the_header_check_but_not_decoding(bad_images, name):
    path = bad_images[name]
    check_image(str(path))  # the fault hides behind a valid header (and a valid PNG CRC) ...
    with pytest.raises(CorruptMediaError, match=path.name):  # ... until the pixels are decoded
        load_image(str(path))


@pytest.mark.parametrize("name", ["tall", "wide"])
def test_extreme_aspect_ratio_is_rejected_at_load_naming_the_file(bad_images, name):
    if name == "wide":  # 5000x30 is within qwen-vl-utils' ratio 200 but shrinks to a zero side
        with pytest.raises(MediaShapeError, match="too elongated"):
            load_image(str(bad_images[name]), ImageBudget(max_pixels=112 * 112))
        return
    with pytest.raises(MediaShapeError, match=rf"{bad_images[name].name}: aspect ratio 4000\.0 of 1x4000"):
        check_image(str(bad_images[name]))


def test_sixteen_bit_grayscale_is_scaled_to_eight_bits(bad_images):
    with Image.open(bad_images["gray16"]) as original:
        assert original.mode == "I;16"
        ramp = np.asarray(original)  # [40, 64] uint16, 0..65535
    expected = np.round(ramp / 257).astype(np.uint8)  # 0 -> 0, 65535 -> 255
    image = load_image(str(bad_images["gray16"]), KEEP_SIZE)
    pixels = np.asarray(image)  # [H, W, 3]
    assert image.size == (64, 40)
    assert np.array_equal(pixels[..., 0], expected) and np.array_equal(pixels[..., 2], expected)
    assert pixels.mean() == pytest.approx(127.5, abs=1)  # a ramp: mid-gray on average, not 99% white


@pytest.mark.parametrize("mode", ["I;16B", "I"])
def test_other_sixteen_bit_modes_scale_the_same(mode):
    ramp = np.tile(np.arange(0, 65536, 1024, dtype=np.uint16), (4, 1))  # [4, 64]
    if mode == "I;16B":  # big-endian 16-bit, as some TIFFs are
        image = Image.frombytes(mode, (ramp.shape[1], ramp.shape[0]), ramp.astype(">u2").tobytes())
    else:  # 32-bit integer: how older Pillow versions open a 16-bit PNG
        image = Image.fromarray(ramp.astype(np.int32))
    assert image.mode == mode
    assert np.array_equal(np.asarray(to_rgb(image))[..., 1], np.round(ramp / 257).astype(np.uint8))
