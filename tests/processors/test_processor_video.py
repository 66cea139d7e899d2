"""Video loading: frame sampling by fps / nframes, decoded content, pixel budgets, back ends, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from mmgrpo.registry import RegistryError
from processors import VideoBudget, load_video
from processors.errors import CorruptMediaError, EmptyMediaError, MediaShapeError, MissingMediaError
from processors.video_backends import VIDEO_BACKENDS

SMALL = {"min_pixels": 28 * 28, "max_pixels": 56 * 56}  # frames come out 56x56 from 64x48


def decoded_indices(frames: np.ndarray, frame_code, count: int) -> list[int]:
    return [frame_code.index_of(frame, count) for frame in frames]


def test_fps_mode_samples_evenly_at_the_requested_rate(video_file: Callable[..., Path], frame_code) -> None:
    clip = load_video(video_file(frames=30, fps=10), VideoBudget(fps=2.0, **SMALL))  # 3 s -> 6 frames
    assert clip.frames.shape == (6, 56, 56, 3) and clip.frames.dtype == np.uint8
    assert clip.frame_indices == [0, 6, 12, 17, 23, 29]
    assert decoded_indices(clip.frames, frame_code, 30) == clip.frame_indices
    assert clip.timestamps == pytest.approx([index / 10 for index in clip.frame_indices])
    assert clip.fps == pytest.approx(2.0)
    assert (clip.source_fps, clip.total_frames) == (10.0, 30)


def test_nframes_mode_overrides_fps_and_rounds_to_pairs(video_file: Callable[..., Path], frame_code) -> None:
    clip = load_video(video_file(frames=30, fps=10), VideoBudget(nframes=7, **SMALL))  # 7 -> 8
    assert len(clip.frames) == 8 == len(clip.timestamps)
    assert decoded_indices(clip.frames, frame_code, 30) == clip.frame_indices
    assert clip.frame_indices[0] == 0 and clip.frame_indices[-1] == 29
    assert clip.fps == pytest.approx(8 / 30 * 10)


def test_frame_count_is_clamped_to_max_frames_and_the_video(video_file: Callable[..., Path]) -> None:
    path = video_file(frames=20, fps=10)
    assert len(load_video(path, VideoBudget(fps=10.0, max_frames=6, **SMALL)).frames) == 6
    assert len(load_video(path, VideoBudget(nframes=100, **SMALL)).frames) == 20


def test_a_single_frame_video_repeats_its_frame(video_file: Callable[..., Path]) -> None:
    clip = load_video(video_file(frames=1, fps=10), VideoBudget(**SMALL))
    assert clip.frame_indices == [0, 0] and np.array_equal(clip.frames[0], clip.frames[1])


def test_total_pixels_caps_each_frame(video_file: Callable[..., Path]) -> None:
    path = video_file(frames=20, fps=10, width=224, height=224)
    roomy = load_video(path, VideoBudget(nframes=4, min_pixels=28 * 28, max_pixels=224 * 224))
    assert roomy.frames.shape == (4, 224, 224, 3)
    # 4 frames = 2 temporal patches sharing 2 x 112 x 112 pixels -> 112 x 112 each.
    capped = load_video(path, VideoBudget(nframes=4, min_pixels=28 * 28, max_pixels=224 * 224,
                                          total_pixels=2 * 112 * 112))
    assert capped.frames.shape == (4, 112, 112, 3)


def test_frame_sequences_are_videos_at_the_budget_fps(tmp_path: Path, frame_code) -> None:
    paths = []
    for index in range(5):
        paths.append(tmp_path / f"frame{index}.png")
        Image.new("RGB", (56, 56), frame_code.colour(index)).save(paths[-1])
    clip = load_video(paths, VideoBudget(fps=2.0, min_frames=2, **SMALL))  # 5 frames -> 4
    assert clip.frame_indices == [0, 1, 3, 4]
    assert decoded_indices(clip.frames, frame_code, 5) == clip.frame_indices
    assert clip.timestamps == pytest.approx([0.0, 0.5, 1.5, 2.0])
    array_clip = load_video(np.stack([np.asarray(Image.open(path)) for path in paths]), VideoBudget(**SMALL))
    assert np.array_equal(array_clip.frames, clip.frames)


def test_frame_sequences_of_mixed_sizes_are_shape_errors(tmp_path: Path) -> None:
    frames = [np.zeros((56, 56, 3), np.uint8), np.zeros((28, 56, 3), np.uint8)]
    with pytest.raises(MediaShapeError, match="frame 1 is 56x28"):
        load_video(frames, VideoBudget(nframes=2, **SMALL))
    with pytest.raises(EmptyMediaError):
        load_video([], VideoBudget(**SMALL))


def test_decord_back_end_agrees_with_pyav(video_file: Callable[..., Path]) -> None:
    pytest.importorskip("decord")
    path, budget = video_file(frames=30, fps=10), VideoBudget(fps=2.0, **SMALL)
    by_pyav, by_decord = load_video(path, budget), load_video(path, budget, backend="decord")
    assert by_decord.frame_indices == by_pyav.frame_indices
    assert by_decord.timestamps == pytest.approx(by_pyav.timestamps, abs=1e-4)
    assert np.abs(by_decord.frames.astype(int) - by_pyav.frames).max() <= 2


def test_unknown_back_end_lists_the_known_ones(video_file: Callable[..., Path]) -> None:
    with pytest.raises(RegistryError, match="pyav"):
        load_video(video_file(), VideoBudget(**SMALL), backend="torchvision")


def write_empty_video(path: Path) -> Path:
    """A valid AVI container with a video stream but not a single frame."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        container.start_encoding()  # write the header although no frame follows
    return path


def write_audio_only(path: Path) -> Path:
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=16000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 16000
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.mark.parametrize("backend", sorted(VIDEO_BACKENDS))
def test_bad_video_files_raise_typed_errors_naming_the_file(tmp_path: Path, backend: str) -> None:
    if backend == "decord":
        pytest.importorskip("decord")
    (tmp_path / "empty.mp4").write_bytes(b"")
    (tmp_path / "garbage.mp4").write_bytes(b"this is not a video" * 20)
    cases = {
        tmp_path / "missing.mp4": MissingMediaError,
        tmp_path / "empty.mp4": EmptyMediaError,
        tmp_path / "garbage.mp4": CorruptMediaError,
    }
    if backend == "pyav":  # decord cannot tell these from corrupt files
        cases[write_empty_video(tmp_path / "no_frames.avi")] = EmptyMediaError
        cases[write_audio_only(tmp_path / "audio_only.m4a")] = EmptyMediaError
    for path, error in cases.items():
        with pytest.raises(error, match=str(path)) as raised:
            load_video(path, VideoBudget(**SMALL), backend=backend)
        assert raised.value.source == str(path)


@pytest.mark.parametrize("total_pixels", [2 * 112 * 112, 10**8])
def test_sizes_and_timing_agree_with_qwen_vl_utils(video_file: Callable[..., Path], total_pixels: int) -> None:
    pytest.importorskip("decord")  # qwen-vl-utils' only back end that works with torchvision >= 0.29
    vision_process = pytest.importorskip("qwen_vl_utils.vision_process")
    path = video_file(frames=30, fps=10, width=224, height=160)
    options = {"fps": 2.0, "min_pixels": 28 * 28, "max_pixels": 224 * 224, "total_pixels": total_pixels}
    expected, expected_fps = vision_process.fetch_video({"video": str(path), **options}, return_video_sample_fps=True)
    clip = load_video(path, VideoBudget(**options))
    frames, _, height, width = expected.shape  # [T, C, H, W]
    assert clip.frames.shape == (frames, height, width, 3)
    assert clip.fps == pytest.approx(expected_fps)


def test_max_frames_wins_over_min_frames(video_file: Callable[..., Path]) -> None:
    clip = load_video(video_file(frames=20, fps=10), VideoBudget(min_frames=8, max_frames=2, **SMALL))
    assert clip.frame_indices == [0, 19]
