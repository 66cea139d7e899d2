"""Session-wide fixtures: tiny random models of each family, each built once per test run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

# Tiny models run many small ops: torch's intra-op threads cost more in synchronisation
# than they save, and on a shared 2-core CPU they contend with other processes.
TEST_THREADS = 1


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
