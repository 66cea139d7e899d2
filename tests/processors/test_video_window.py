"""Video windows: a ``VideoSpan`` is decoded from the frames inside its [start, end] seconds only, prints and
hashes with its window, and a window holding no frame is a typed error naming the clip."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from processors import VideoBudget, VideoSpan, load_video
from processors.errors import EmptyMediaError
from processors.fingerprint import media_fingerprint
from processors.video_backends import VIDEO_BACKENDS

SMALL = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}


@pytest.mark.parametrize("backend", sorted(VIDEO_BACKENDS))
def test_a_window_of_a_file_shows_only_its_frames(video_file: Callable[..., Path], frame_code, backend: str) -> None:
    if backend == "decord":
        pytest.importorskip("decord")
    path = video_file(frames=30, fps=10)  # frame i at i / 10 s shows colour i
    clip = load_video(VideoSpan(path, 1.0, 2.0), VideoBudget(fps=2.0, **SMALL), backend=backend)
    shown = [frame_code.index_of(frame, 30) for frame in clip.frames]
    assert shown == clip.frame_indices == [10, 13, 17, 20]  # 4 (min_frames) spread over frames 10..20
    assert clip.timestamps == pytest.approx([1.0, 1.3, 1.7, 2.0], abs=1e-3)
    assert clip.fps == pytest.approx(4 / 11 * 10)  # sampled frames per second of the window
    assert (clip.total_frames, clip.source_fps) == (30, 10.0)  # positions stay in the whole video's timeline


def test_a_window_spanning_more_than_the_budget_is_sampled_at_the_budgets_rate(video_file, frame_code) -> None:
    clip = load_video(VideoSpan(video_file(frames=30, fps=10), 0.5, 2.95), VideoBudget(fps=2.0, **SMALL))
    shown = [frame_code.index_of(frame, 30) for frame in clip.frames]
    assert shown == clip.frame_indices and len(shown) == 4  # 2.5 s at 2 fps, floored to pairs
    assert min(shown) == 5 and max(shown) == 29  # 2.95 s holds frame 29 (2.9 s), the last


def test_a_window_of_a_frame_sequence_counts_time_at_the_budgets_rate(frame_code) -> None:
    frames = [np.full((28, 28, 3), frame_code.colour(index), np.uint8) for index in range(10)]
    clip = load_video(VideoSpan(frames, 1.0, 3.0), VideoBudget(fps=2.0, **SMALL))  # frames 2..6
    assert [frame_code.index_of(frame, 10) for frame in clip.frames] == clip.frame_indices == [2, 3, 5, 6]
    assert clip.timestamps == [1.0, 1.5, 2.5, 3.0]


@pytest.mark.parametrize("backend", sorted(VIDEO_BACKENDS))
def test_a_window_past_the_end_names_the_clip_and_its_window(video_file, backend: str) -> None:
    if backend == "decord":
        pytest.importorskip("decord")
    path = video_file(frames=10, fps=10)
    with pytest.raises(EmptyMediaError, match=r"#t=5\.0,6\.0.*no frame inside the window"):
        load_video(VideoSpan(path, 5.0, 6.0), VideoBudget(**SMALL), backend=backend)


@pytest.mark.parametrize(("start", "end"), [(2.0, 1.0), (-1.0, 1.0), (0.0, float("nan"))])
def test_a_window_must_be_one(start: float, end: float) -> None:
    with pytest.raises(ValueError, match="start <= end"):
        VideoSpan("clip.mp4", start, end)


def test_a_window_prints_as_a_media_fragment_and_reads_back() -> None:
    span = VideoSpan("videos/clip.mp4", 3, 7.5)
    assert str(span) == "videos/clip.mp4#t=3.0,7.5"
    assert VideoSpan.from_label(str(span)) == VideoSpan("videos/clip.mp4", 3.0, 7.5)
    assert VideoSpan.from_label("videos/clip.mp4") == "videos/clip.mp4"


def test_windows_of_one_file_hash_apart(video_file) -> None:
    path = video_file(frames=10, fps=10)
    prints = {media_fingerprint(ref) for ref in (path, VideoSpan(path, 0.0, 0.5), VideoSpan(path, 0.5, 1.0))}
    assert len(prints) == 3 and None not in prints
    assert media_fingerprint(VideoSpan(path, 0.0, 0.5)) == media_fingerprint(VideoSpan(str(path), 0, 0.5))
