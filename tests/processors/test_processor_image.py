"""Image loading: every reference kind, EXIF orientation, RGB conversion, budgets, typed errors."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from processors import ImageBudget, load_image
from processors.errors import CorruptMediaError, EmptyMediaError, MediaShapeError, MissingMediaError

# 112x56 is already a multiple of 28, so this budget keeps such images at their size.
ROOMY = ImageBudget(min_pixels=28 * 28, max_pixels=1024 * 1024)
RED, BLUE, WHITE = (255, 0, 0), (0, 0, 255), (255, 255, 255)


def two_halves(width: int = 112, height: int = 56) -> Image.Image:
    """Left half red, right half blue."""
    image = Image.new("RGB", (width, height), RED)
    image.paste(BLUE, (width // 2, 0, width, height))
    return image


def encoded(image: Image.Image, fmt: str = "PNG", **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def assert_two_halves(image: Image.Image) -> None:
    assert image.mode == "RGB" and image.size == (112, 56)
    assert image.getpixel((10, 28)) == RED and image.getpixel((100, 28)) == BLUE


@pytest.fixture
def png_path(tmp_path: Path) -> Path:
    path = tmp_path / "halves.png"
    two_halves().save(path)
    return path


@pytest.mark.parametrize("kind", ["str", "Path", "file URI", "bytes", "PIL", "dict bytes", "dict path"])
def test_every_reference_kind_loads_the_same_image(kind: str, png_path: Path) -> None:
    refs = {
        "str": str(png_path),
        "Path": png_path,
        "file URI": png_path.as_uri(),
        "bytes": png_path.read_bytes(),
        "PIL": Image.open(png_path),
        "dict bytes": {"bytes": png_path.read_bytes(), "path": "halves.png"},
        "dict path": {"bytes": None, "path": str(png_path)},
    }
    assert_two_halves(load_image(refs[kind], ROOMY))


def test_numpy_arrays_of_each_layout_load() -> None:
    halves = np.asarray(two_halves())  # [56, 112, 3] uint8
    assert_two_halves(load_image(halves, ROOMY))
    assert_two_halves(load_image(halves.astype(np.float32) / 255, ROOMY))
    gray = load_image(np.full((56, 112), 200, dtype=np.uint8), ROOMY)
    assert gray.mode == "RGB" and gray.getpixel((0, 0)) == (200, 200, 200)
    single_channel = load_image(np.full((56, 112, 1), 7, dtype=np.uint8), ROOMY)
    assert single_channel.getpixel((0, 0)) == (7, 7, 7)


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    two_halves().save(path, exif=exif, quality=95)
    upright = load_image(path, ROOMY)
    assert upright.size == (56, 112)  # portrait after rotation; the left (red) half is now on top
    assert np.allclose(upright.getpixel((28, 10)), RED, atol=8)
    assert np.allclose(upright.getpixel((28, 100)), BLUE, atol=8)


def test_transparency_is_composited_on_white() -> None:
    rgba = np.zeros((56, 112, 4), dtype=np.uint8)
    rgba[:, :56] = (255, 0, 0, 255)  # opaque red left, fully transparent right
    image = load_image(rgba, ROOMY)
    assert image.getpixel((10, 10)) == RED and image.getpixel((100, 10)) == WHITE
    palette = Image.new("P", (112, 56), 0)
    palette.putpalette([0, 255, 0] + [0, 0, 0] * 255)
    palette.info["transparency"] = 0
    assert load_image(encoded(palette), ROOMY).getpixel((0, 0)) == WHITE


def test_cmyk_and_grayscale_files_become_rgb() -> None:
    cmyk = Image.new("CMYK", (112, 56), (0, 255, 255, 0))  # pure red in CMYK
    assert np.allclose(load_image(encoded(cmyk, "JPEG", quality=95), ROOMY).getpixel((5, 5)), RED, atol=8)
    gray = Image.new("L", (112, 56), 90)
    assert load_image(encoded(gray), ROOMY).getpixel((5, 5)) == (90, 90, 90)


@pytest.mark.parametrize("size", [(1000, 30), (30, 1000), (640, 480), (20, 20), (4000, 3000)])
def test_resized_into_the_budget_on_factor_multiples(size: tuple[int, int]) -> None:
    budget = ImageBudget(min_pixels=56 * 56, max_pixels=224 * 224, factor=28)
    image = load_image(Image.new("RGB", size, RED), budget)
    width, height = image.size
    assert width % 28 == 0 and height % 28 == 0
    assert budget.min_pixels <= width * height <= budget.max_pixels
    ratio = size[0] / size[1]
    assert abs(width - height * ratio) <= 28 * (1 + ratio)  # each side within one factor of a common scale


def test_bad_image_files_raise_typed_errors_naming_the_file(tmp_path: Path, png_path: Path) -> None:
    cases = {
        tmp_path / "missing.png": MissingMediaError,
        tmp_path: MissingMediaError,  # a directory is not an image file
        tmp_path / "empty.png": EmptyMediaError,
        tmp_path / "garbage.png": CorruptMediaError,
        tmp_path / "truncated.png": CorruptMediaError,
    }
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "garbage.png").write_bytes(b"this is not an image" * 10)
    (tmp_path / "truncated.png").write_bytes(png_path.read_bytes()[:60])
    for path, error in cases.items():
        with pytest.raises(error, match=str(path)) as raised:
            load_image(path, ROOMY)
        assert raised.value.source == str(path) and isinstance(raised.value, ValueError)


def test_bad_in_memory_images_raise_typed_errors() -> None:
    with pytest.raises(EmptyMediaError):
        load_image(b"", ROOMY)
    with pytest.raises(EmptyMediaError):
        load_image(np.zeros((0, 10, 3), dtype=np.uint8), ROOMY)
    with pytest.raises(MediaShapeError, match=r"\[0, 1\]"):
        load_image(np.full((10, 10, 3), 2.0), ROOMY)
    with pytest.raises(MediaShapeError, match="HxWxC"):
        load_image(np.zeros((10, 10, 2), dtype=np.uint8), ROOMY)
    with pytest.raises(MissingMediaError):
        load_image({"bytes": None, "path": None}, ROOMY)
    with pytest.raises(MissingMediaError):
        load_image(None, ROOMY)


def test_absurd_aspect_ratio_is_a_shape_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "strip.png"
    Image.new("RGB", (2010, 10), RED).save(path)
    with pytest.raises(MediaShapeError, match=f"{path}.*aspect ratio"):
        load_image(path, ROOMY)
