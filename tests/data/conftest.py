"""Shared helpers for the data tests: tiny valid and broken media files."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable, Iterable

import pytest
from PIL import Image


def _png_bytes(colour: tuple[int, int, int] = (200, 30, 30), size: int = 24) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def _write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def png_bytes() -> Callable[..., bytes]:
    """``png_bytes(colour=(200, 30, 30), size=24)``: a solid-colour PNG."""
    return _png_bytes


@pytest.fixture
def write_jsonl() -> Callable[[Path, Iterable[dict[str, Any]]], Path]:
    """``write_jsonl(path, rows)``: one JSON object per line, folders created."""
    return _write_jsonl


@pytest.fixture
def images(tmp_path: Path) -> dict[str, Path]:
    """``good.png``, ``other.png``, a truncated ``truncated.png`` and a non-image ``garbage.png`` under tmp/images."""
    folder = tmp_path / "images"
    folder.mkdir()
    good, other = _png_bytes(), _png_bytes((30, 30, 200), size=40)
    files = {"good": good, "other": other, "truncated": other[: len(other) // 2], "garbage": b"definitely not a png"}
    for name, data in files.items():
        (folder / f"{name}.png").write_bytes(data)
    return {name: folder / f"{name}.png" for name in files}


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the ``datasets`` cache of these tests' throwaway files out of the user's cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.getbasetemp() / "hf_datasets_cache")
