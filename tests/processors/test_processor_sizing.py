"""Size arithmetic: agreement with qwen-vl-utils and the budget properties it promises."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from processors.budgets import VideoBudget
from processors.errors import EmptyMediaError, MediaShapeError
from processors.sizing import frame_max_pixels, sample_frame_count, sample_frame_indices, smart_resize

vision_process = pytest.importorskip("qwen_vl_utils.vision_process")

SIDES = [1, 3, 14, 27, 28, 29, 55, 100, 224, 333, 640, 1001, 1920, 4000]
BUDGETS = [(56 * 56, 112 * 112), (4 * 28 * 28, 16384 * 28 * 28), (128 * 28 * 28, 768 * 28 * 28)]


@pytest.mark.parametrize("factor", [28, 32])
@pytest.mark.parametrize("min_pixels, max_pixels", BUDGETS)
def test_smart_resize_agrees_with_qwen_vl_utils(factor: int, min_pixels: int, max_pixels: int) -> None:
    for height, width in itertools.product(SIDES, SIDES):
        try:
            expected = vision_process.smart_resize(height, width, factor, min_pixels, max_pixels)
        except ValueError:  # aspect ratio above 200
            with pytest.raises(MediaShapeError):
                smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
            continue
        if 0 in expected:  # qwen-vl-utils returns a zero side; we refuse instead
            with pytest.raises(MediaShapeError, match="too elongated"):
                smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
            continue
        actual = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
        assert actual == expected, (height, width)


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 5000),
    width=st.integers(1, 5000),
    factor=st.sampled_from([14, 28, 32]),
    min_tokens=st.sampled_from([1, 4, 64, 256]),
    spread=st.sampled_from([4, 16, 1024]),
)
def test_smart_resize_respects_the_budget_and_aspect_ratio(
    height: int, width: int, factor: int, min_tokens: int, spread: int
) -> None:
    min_pixels = min_tokens * factor**2
    max_pixels = min_pixels * spread
    ratio = max(height, width) / min(height, width)
    # Extreme ratios cannot honour both bounds; the budget must hold a one-factor-high strip.
    assume(ratio <= 20 and max_pixels >= ratio * factor**2)
    new_height, new_width = smart_resize(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    assert new_height % factor == 0 and new_width % factor == 0
    assert min_pixels <= new_height * new_width <= max_pixels
    # One common scale maps the original onto the result within one factor per side.
    low = max((new_height - factor) / height, (new_width - factor) / width)
    high = min((new_height + factor) / height, (new_width + factor) / width)
    assert low <= high


def test_smart_resize_rejects_zero_sizes_and_names_the_source() -> None:
    with pytest.raises(EmptyMediaError, match="cat.png"):
        smart_resize(0, 10, factor=28, min_pixels=784, max_pixels=10**6, source="cat.png")
    with pytest.raises(MediaShapeError, match="cat.png.*aspect ratio"):
        smart_resize(10, 2010, factor=28, min_pixels=784, max_pixels=10**6, source="cat.png")
    assert smart_resize(10, 2000, factor=28, min_pixels=784, max_pixels=10**6, max_aspect_ratio=200)


@pytest.mark.parametrize("total_frames, video_fps", [(1, 30.0), (3, 30.0), (20, 10.0), (75, 25.0), (900, 29.97)])
@pytest.mark.parametrize(
    "fps, min_frames, max_frames", [(2.0, 4, 768), (0.5, 4, 768), (4.0, 2, 10), (30.0, 6, 64), (2.0, 8, 4)]
)
def test_fps_mode_frame_count_agrees_with_qwen_vl_utils(
    total_frames: int, video_fps: float, fps: float, min_frames: int, max_frames: int
) -> None:
    budget = VideoBudget(fps=fps, min_frames=min_frames, max_frames=max_frames)
    element = {"fps": fps, "min_frames": min_frames, "max_frames": max_frames}
    ours = sample_frame_count(total_frames, video_fps, budget)
    try:
        expected = vision_process.smart_nframes(element, total_frames=total_frames, video_fps=video_fps)
    except ValueError:  # fewer frames than FRAME_FACTOR: we sample FRAME_FACTOR, repeating
        assert ours == budget.frame_factor
        return
    assert ours == expected


@pytest.mark.parametrize("nframes", [1, 2, 5, 7, 8, 16])
def test_nframes_mode_rounds_to_frame_factor_and_clamps(nframes: int) -> None:
    total_frames = 12
    ours = sample_frame_count(total_frames, 10.0, VideoBudget(nframes=nframes, max_frames=10))
    rounded = vision_process.round_by_factor(nframes, vision_process.FRAME_FACTOR)
    assert ours == max(2, min(rounded, 10))


def test_frame_indices_span_the_video_evenly() -> None:
    assert sample_frame_indices(30, 6) == [0, 6, 12, 17, 23, 29]
    assert sample_frame_indices(1, 2) == [0, 0]


def test_frame_pixel_cap_shares_total_pixels_between_frame_pairs() -> None:
    budget = VideoBudget(min_pixels=100, max_pixels=10_000, total_pixels=16_000)
    assert frame_max_pixels(4, budget) == 8_000  # 16000 / (4 frames / 2 per temporal patch)
    assert frame_max_pixels(2, budget) == 10_000  # the share is capped by max_pixels
    assert frame_max_pixels(1000, budget) == 105  # never below min_pixels x 1.05
