"""``make_tiny``: build one tiny family from a seed and save it like a real checkpoint."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from mmgrpo.models.compat import save_pretrained
from mmgrpo.models.tiny.families import TINY_FAMILIES, TinySpec
from mmgrpo.models.tiny.tokenizer import corpus_fingerprint

# Moved into place last, so its presence marks a complete checkpoint.
COMPLETION_MARKER = "config.json"


def tiny_identity(family: str, *, seed: int = 0, **overrides: object) -> dict[str, Any]:
    """Everything ``make_tiny`` builds from: family, seed and the whole spec, defaults included.

    A cache keyed on this is rebuilt when a spec default changes (e.g. an init), not only
    when an override does.
    """
    spec = dataclasses.asdict(TinySpec.from_overrides(**overrides))
    return {"family": family, "seed": seed, "tokenizer_corpus": corpus_fingerprint(), **spec}


def make_tiny(family: str, out_dir: str | Path, *, seed: int = 0, **overrides: object) -> Path:
    """Build a randomly initialised ``family`` model and save model + processor to ``out_dir``.

    ``overrides`` replace :class:`TinySpec` fields (sizes, pixel budgets). The same
    ``family``, ``seed`` and ``overrides`` always give identical weights and tokenizer.
    Returns ``out_dir`` as a ``Path``, loadable with ``load_model_and_processor`` or
    plain ``transformers`` (``AutoProcessor`` / ``AutoModelForImageTextToText``).
    """
    builder = TINY_FAMILIES.get(family)
    spec = TinySpec.from_overrides(**overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, processor = builder(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Saved beside the target then moved file by file: concurrent builders (e.g. two
    # ranks) and readers never see a half-written checkpoint.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as staging:
        save_pretrained(model, staging)
        processor.save_pretrained(staging)
        names = sorted(os.listdir(staging), key=lambda name: name == COMPLETION_MARKER)
        for name in names:
            os.replace(Path(staging) / name, out / name)
    return out
