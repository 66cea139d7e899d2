"""Which video back end decodes files by default: decord when installed, PyAV otherwise."""

from __future__ import annotations

import importlib.util
import platform
from collections.abc import Callable
from pathlib import Path

import pytest

import processors.video
from mmgrpo.registry import RegistryError
from processors import VideoBudget, load_video
from processors.video_backends import default_video_backend

SMALL = VideoBudget(min_pixels=28 * 28, max_pixels=56 * 56)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="decord ships x86-64 wheels only")
def test_the_dev_extra_installs_decord_and_it_is_the_default() -> None:
    assert importlib.util.find_spec("decord") is not None, "pip install -e .[dev] installs decord"
    assert default_video_backend() == "decord"


def test_pyav_is_the_fallback_without_decord(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "decord" else find_spec(name))
    assert default_video_backend() == "pyav"


def test_load_video_decodes_files_with_the_default_back_end(
    video_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = video_file(frames=10, fps=10)
    monkeypatch.setattr(processors.video, "default_video_backend", lambda: "not_a_back_end")
    with pytest.raises(RegistryError, match="not_a_back_end"):
        load_video(path, SMALL)
    assert len(load_video(path, SMALL, backend="pyav").frames) > 0  # an explicit choice still wins
