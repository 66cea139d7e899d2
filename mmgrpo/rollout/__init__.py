"""Rollout engines: sample G completions per prompt from the current policy.

``ENGINES.get(name).from_config(config, model, processor, budgets, backend)`` builds one;
importing this package registers the in-process Hugging Face engine as ``"hf"``, the
colocated vLLM engine as ``"vllm"`` (vLLM itself is imported only when one is built) and the
client of a vLLM server as ``"vllm_server"``.
"""

from mmgrpo.rollout.base import ENGINES, RolloutEngine, SamplingParams
from mmgrpo.rollout.hf import HFEngine
from mmgrpo.rollout.vllm import VLLMEngine
from mmgrpo.rollout.vllm_server import VLLMServerEngine

__all__ = ["ENGINES", "HFEngine", "RolloutEngine", "SamplingParams", "VLLMEngine", "VLLMServerEngine"]
