"""Session-wide fixtures: tiny random models of each family, each built once per test run."""

from __future__ import annotations

import functools
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import transformers
from PIL import Image

from mmgrpo.config import Config
from tests.training import DIGIT_REWARD_PLUGIN, ZOOM, built_once, small_run_config

# Tiny models run many small ops: torch's intra-op threads cost more in synchronisation
# than they save, and on a shared 2-core CPU they contend with other processes.
TEST_THREADS = 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` are skipped, with the reason, where CUDA is not available; tests of a Qwen-Omni thinker
    where this transformers has no backbone for it (the family is refused at load there)."""
    from mmgrpo.models.compat import OMNI_THINKER_BACKBONES, omni_thinker_holds_towers

    gpu = pytest.mark.skip(reason="needs a CUDA GPU (scripts/gpu_check.sh runs these on a lent one)")
    refused = {thinker: pytest.mark.skip(reason=f"transformers {transformers.__version__} has no {backbone}: the "
                                                f"{thinker} family is refused at load (mmgrpo.models.compat)")
               for thinker, (_, backbone) in OMNI_THINKER_BACKBONES.items() if not omni_thinker_holds_towers(thinker)}
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(gpu)
        for thinker, skip in refused.items():
            if thinker in item.nodeid:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def code_sandbox_where_bubblewrap_cannot_run() -> Iterator[None]:
    """Where bubblewrap cannot run, tests that only need some code sandbox opt into the unsafe ``process``
    back end (the red-team tests skip, naming why); outside the tests the code task refuses to start."""
    from tasks import sandbox
    from tasks.sandbox_bwrap import unavailable_reason

    if unavailable_reason("bwrap") is None:
        yield
        return
    sandbox.DEFAULT_BACKEND = "process"
    try:
        yield
    finally:
        sandbox.DEFAULT_BACKEND = "bwrap"


@pytest.fixture(scope="session", autouse=True)
def close_vllm_engines() -> Iterator[None]:
    """vLLM engines built by the tests shut down while pytest still owns the output streams (their
    exit-time finalizers would log into closed streams)."""
    yield
    import sys

    if "vllm" in sys.modules:
        from mmgrpo.rollout.vllm import close_shared_engines

        close_shared_engines()


@pytest.fixture(scope="session", autouse=True)
def preprocessing_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The preprocessing cache of every run a test starts lives in the session's temporary folder,
    never in the user's home (child processes inherit the variable)."""
    from mmgrpo.models.prompt_cache import DEFAULT_DIR_ENV

    previous = os.environ.get(DEFAULT_DIR_ENV)
    os.environ[DEFAULT_DIR_ENV] = str(tmp_path_factory.mktemp("preprocessing_cache"))
    yield
    if previous is None:
        del os.environ[DEFAULT_DIR_ENV]
    else:
        os.environ[DEFAULT_DIR_ENV] = previous


@pytest.fixture(scope="session", autouse=True)
def single_torch_thread() -> Iterator[None]:
    """Run the suite with ``TEST_THREADS`` torch threads, restoring the setting after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(TEST_THREADS)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_model_dir(family, seed=0, **overrides) -> Path``: a saved tiny checkpoint.

    Built on first request and cached for the session, so every test asking for the
    same family, seed and overrides shares one directory. Treat it as read-only.
    """
    from mmgrpo.models.tiny import make_tiny

    built: dict[tuple, Path] = {}

    def build(family: str, seed: int = 0, **overrides: object) -> Path:
        key = (family, seed, tuple(sorted(overrides.items())))
        if key not in built:
            out = tmp_path_factory.mktemp(f"tiny_{family}_seed{seed}")
            built[key] = make_tiny(family, out, seed=seed, **overrides)
        return built[key]

    return build


@pytest.fixture(scope="session")
def tiny_qwen25vl(tiny_model_dir: Callable[..., Path]) -> Path:
    """Directory of the default tiny Qwen2.5-VL (seed 0): the project's reference model."""
    return tiny_model_dir("qwen2_5_vl")


@pytest.fixture(scope="session")
def tiny_reward_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny sequence-classification reward model and a tiny generative judge, by kind."""
    from mmgrpo.models.tiny.reward import make_tiny_reward_model

    root = tmp_path_factory.mktemp("reward-models")
    return {kind: make_tiny_reward_model(kind, root / kind, seed=1) for kind in ("classifier", "judge")}


@pytest.fixture(scope="session")
def tiny_vlm_reward_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``tiny_vlm_reward_model(family) -> Path``: a tiny VLM with a value head (seed 1), built once per family."""
    from mmgrpo.models.tiny.reward import make_tiny_vlm_reward_model

    built: dict[str, Path] = {}

    def build(family: str = "qwen2_5_vl") -> Path:
        if family not in built:
            built[family] = make_tiny_vlm_reward_model(family, tmp_path_factory.mktemp(f"vlm-rm-{family}") / "rm", seed=1)
        return built[family]

    return build


@pytest.fixture(scope="session")
def bad_images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Image files that pass a header check yet fail later, plus a 16-bit one, by name.

    ``truncated_jpeg``: the second half of the bytes cut off. ``corrupt_png``: bytes inside
    IDAT flipped and the chunk CRC recomputed, so ``verify()`` passes but inflating fails.
    ``tall`` (1x4000) and ``wide`` (5000x30): extreme aspect ratios. ``gray16``: a 40x64
    ``I;16`` ramp over the whole 16-bit range.
    """
    pixels = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    ramp = np.tile(np.linspace(0, 65535, 64).round().astype(np.uint16), (40, 1))  # [40, 64]
    files = {
        "truncated_jpeg.jpg": _encoded(Image.fromarray(pixels), "JPEG")[:-600],
        "corrupt_png.png": _corrupt_idat(_encoded(Image.fromarray(pixels), "PNG")),
        "tall.png": _encoded(Image.new("RGB", (1, 4000), (90, 30, 200)), "PNG"),
        "wide.png": _encoded(Image.new("RGB", (5000, 30), (90, 30, 200)), "PNG"),
        "gray16.png": _encoded(Image.fromarray(ramp), "PNG"),
    }
    folder = tmp_path_factory.mktemp("bad_images")
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {Path(name).stem: folder / name for name in files}


def _encoded(image: Image.Image, format_name: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format_name)
    return buffer.getvalue()


def _corrupt_idat(png: bytes) -> bytes:
    """``png`` with bytes inside its first IDAT chunk flipped and the chunk CRC made valid again."""
    data = bytearray(png)
    tag = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[tag - 4 : tag])
    start, end = tag + 4, tag + 4 + length
    for position in range(start + 8, end - 4, 5):  # keep the zlib header, damage the deflate stream
        data[position] ^= 0xFF
    data[end : end + 4] = struct.pack(">I", zlib.crc32(bytes(data[tag:end])) & 0xFFFFFFFF)
    return bytes(data)


@pytest.fixture(scope="session")
def nonfinite_media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Media files whose values are not finite, as broken resampling or normalisation scripts write them.

    ``nan_wav`` / ``inf_wav``: 1 s of float32 WAV at 16 kHz with samples 100-200 NaN / +inf.
    ``loud_wav``: finite float32 samples at 1e30 (they decode, the audio feature extractor turns
    them into NaN). ``nan_tiff``: a 64x64 float TIFF (Pillow mode "F") with a 5x5 block of NaN.
    ``float_tiff``: the same without NaN (a valid file).
    """
    folder = tmp_path_factory.mktemp("nonfinite_media")
    rng = np.random.default_rng(0)
    clip = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    for name, change in (("nan_wav", np.nan), ("inf_wav", np.inf)):
        broken = clip.copy()
        broken[100:200] = change
        soundfile.write(folder / f"{name}.wav", broken, 16_000, subtype="FLOAT")
    soundfile.write(folder / "loud_wav.wav", clip * np.float32(1e30), 16_000, subtype="FLOAT")
    pixels = rng.uniform(0, 255, (64, 64)).astype(np.float32)
    Image.fromarray(pixels, mode="F").save(folder / "float_tiff.tif")
    pixels[5:10, 5:10] = np.nan
    Image.fromarray(pixels, mode="F").save(folder / "nan_tiff.tif")
    return {path.stem: path for path in folder.iterdir()}


@pytest.fixture(scope="session")
def digit_reward_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One plugin file per session: a reward name can be registered only once per process."""
    plugin = tmp_path_factory.mktemp("plugins") / "digit_reward.py"
    plugin.write_text(DIGIT_REWARD_PLUGIN)
    return plugin


@pytest.fixture()
def small_config(tmp_path: Path, tiny_qwen25vl: Path, digit_reward_plugin: Path) -> Callable[..., Config]:
    """``small_config(*overrides)``: a fast GRPO config writing under ``tmp_path``."""
    return functools.partial(small_run_config, tmp_path, tiny_qwen25vl, digit_reward_plugin)


@pytest.fixture(scope="session")
def zoom_policy(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Callable[..., Path], digit_reward_plugin: Path
) -> Callable[..., Path]:
    """``zoom_policy(**tiny_options) -> Path``: the tiny Qwen2.5-VL (built with ``tiny_options``) after the zoom task's
    cold start (``ZOOM``'s SFT on its demonstrations: the policy calls ``zoom_in``). Made once per test process
    (each xdist worker) and options: the tool tests start GRPO from it instead of each training its own; a failed
    build fails them all without being run again. Treat it as read-only."""
    from mmgrpo.trainer.pipeline import run_training
    from mmgrpo.trainer.resume import SFT_MODEL

    @built_once
    def trained(options: tuple[tuple[str, object], ...]) -> Path:
        config = small_run_config(tmp_path_factory.mktemp("zoom_sft"), tiny_model_dir("qwen2_5_vl", **dict(options)),
                                  digit_reward_plugin, *ZOOM, "train.steps=0")
        run_training(config)
        return Path(config.log.output_dir) / config.log.run_name / SFT_MODEL

    return lambda **tiny_options: trained(tuple(sorted(tiny_options.items())))
