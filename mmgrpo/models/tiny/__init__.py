"""Tiny randomly initialised VLMs of each supported family, built offline for tests and demos.

Importing this package registers every family builder in ``TINY_FAMILIES``.
"""

from mmgrpo.models.tiny import (  # noqa: F401  (registers the families)
    audio, gemma3, glm4v, internvl, llava_onevision, omni, qwen, smolvlm,
)
from mmgrpo.models.tiny.factory import make_tiny, tiny_identity
from mmgrpo.models.tiny.families import TINY_FAMILIES, VLLM_CPU_TINY_OPTIONS, TinySpec

__all__ = ["TINY_FAMILIES", "VLLM_CPU_TINY_OPTIONS", "TinySpec", "make_tiny", "tiny_identity"]
