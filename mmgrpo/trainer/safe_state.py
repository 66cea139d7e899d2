"""Nested Python state (optimizer, scheduler, RNG, counters) as JSON + safetensors: nothing is unpickled.

``torch.save`` / ``torch.load(weights_only=False)`` would run code hidden in a shared
checkpoint. Here every tensor goes to a safetensors file and everything else to JSON,
with small markers for what JSON cannot say (tuples, non-string dict keys, tensors,
NumPy arrays), so ``load_state(dump_state(x)) == x`` exactly for the state dicts of
torch optimizers and schedulers and the Python / NumPy / torch RNG states.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

TENSOR, TUPLE, PAIRS, ARRAY = "__tensor__", "__tuple__", "__pairs__", "__ndarray__"
_MARKERS = {TENSOR, TUPLE, PAIRS, ARRAY}


def dump_state(state: Any, json_path: Path, tensors_path: Path) -> None:
    """Write ``state`` as JSON (``json_path``) plus its tensors (``tensors_path``, safetensors)."""
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(state, tensors)
    save_file(tensors, str(tensors_path))
    json_path.write_text(json.dumps(encoded, indent=1))


def load_state(json_path: Path, tensors_path: Path) -> Any:
    """Read back what :func:`dump_state` wrote (tensors on the CPU)."""
    tensors = load_file(str(tensors_path), device="cpu")
    return _decode(json.loads(json_path.read_text()), tensors)


def _encode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        name = str(len(tensors))
        tensors[name] = value.detach().contiguous()
        return {TENSOR: name}
    if isinstance(value, np.ndarray):
        return {ARRAY: value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {TUPLE: [_encode(item, tensors) for item in value]}
    if isinstance(value, list):
        return [_encode(item, tensors) for item in value]
    if isinstance(value, dict):
        if all(isinstance(key, str) and key not in _MARKERS for key in value):
            return {key: _encode(item, tensors) for key, item in value.items()}
        return {PAIRS: [[_encode(key, tensors), _encode(item, tensors)] for key, item in value.items()]}
    raise TypeError(f"cannot store a {type(value).__name__} in trainer state: {value!r:.80}")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        return tensors[value[TENSOR]]
    if ARRAY in value:
        return np.array(value[ARRAY], dtype=value["dtype"])
    if TUPLE in value:
        return tuple(_decode(item, tensors) for item in value[TUPLE])
    if PAIRS in value:
        return {_decode(key, tensors): _decode(item, tensors) for key, item in value[PAIRS]}
    return {key: _decode(item, tensors) for key, item in value.items()}
