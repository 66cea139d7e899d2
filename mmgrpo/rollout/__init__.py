"""Rollout engines: sample G completions per prompt from the current policy.

``ENGINES.get(name)(model=..., processor=..., **options)`` builds one; importing this
package registers the in-process Hugging Face engine as ``"hf"``.
"""

from mmgrpo.rollout.base import ENGINES, RolloutEngine, SamplingParams
from mmgrpo.rollout.hf import HFEngine

__all__ = ["ENGINES", "HFEngine", "RolloutEngine", "SamplingParams"]
