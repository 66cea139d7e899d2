"""The colocated vLLM engine's config section (``rollout.vllm``), beside the rollout section that holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmgrpo.config.fields import option


@dataclass
class VLLMConfig:
    """The colocated vLLM engine (``rollout.engine: vllm``): built once per process from the policy's
    checkpoint, fed the trainer's weights after every optimizer step."""

    gpu_memory_utilization: float = option(
        0.3, "Share of GPU memory vLLM takes for weights and KV cache, beside training (TRL colocate: 0.3).",
        gt=0, le=1,
    )
    tensor_parallel_size: int = option(
        1, "GPUs one engine shards the model over; on several ranks, each group of this many ranks shares one engine.",
        ge=1,
    )
    max_model_len: int | None = option(
        None, "Longest prompt + completion in tokens; None = data.max_prompt_tokens + the most tokens a trajectory "
        "takes after its prompt (rollout.max_trajectory_tokens, else max_turns turns of max_new_tokens with a tool "
        "result of max_observation_tokens between each two, a result's images not counted).", ge=1
    )
    dtype: str | None = option(None, "Engine weights dtype (float32, bfloat16, ...); None = the policy's.")
    enable_prefix_caching: bool = option(
        True, "Reuse a prompt's KV cache across its group (the G samples share one prefill)."
    )
    enable_sleep_mode: bool = option(
        False, "GPU only: free the engine's memory (weights offloaded, KV cache dropped) while the policy trains."
    )
    sleep_level: Literal[1, 2] = option(
        1, "With enable_sleep_mode: 1 frees the KV cache and moves the weights to CPU memory after each sampling; 2 "
        "keeps the engine awake through sampling and discards its weights and KV cache when the policy update starts, "
        "the push after it sending every weight (the most GPU memory for the update, no CPU copy, a whole push a "
        "step).",
    )
    enforce_eager: bool | None = option(None, "Skip CUDA graphs; None = eager on CPU, graphs on GPU.")
    in_process: bool = option(
        True, "Run vLLM's engine core inside the trainer process, so new weights are copied from memory; "
        "false: its own process, new weights go through files in weights_dir (needed for tensor_parallel_size > 1 "
        "in one process; an engine over several ranks always runs in their processes).",
    )
    weights_dir: str | None = option(
        None, "Where weights for an out-of-process engine are written each step; None = a temporary folder."
    )
    cpu_kv_cache_gib: float = option(
        1.0, "CPU only: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE, unless that is set).", gt=0
    )
