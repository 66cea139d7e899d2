"""The engines on a CUDA GPU (skipped elsewhere): log-probs against CPU, vLLM's sleep mode.

Run on a lent GPU by scripts/gpu_check.sh; the model is the tiny Qwen2.5-VL at a larger size.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS

pytestmark = pytest.mark.gpu
LARGER = {**VLLM_CPU_TINY_OPTIONS, "hidden_size": 256, "intermediate_size": 512, "num_layers": 4, "num_heads": 8,
          "num_kv_heads": 2}


def test_cuda_logprobs_match_cpu(tiny_model_dir, samples, teacher_forced_logprobs) -> None:
    from mmgrpo.rollout import HFEngine, SamplingParams

    cpu_model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl", **LARGER))
    groups = HFEngine(cpu_model, processor).generate(samples, SamplingParams(n=2, max_new_tokens=8, seed=0))
    on_cpu = teacher_forced_logprobs(cpu_model, processor, samples, groups)
    gpu_model, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl", **LARGER), device="cuda")
    on_gpu = teacher_forced_logprobs(gpu_model, processor, samples, groups)
    for a, b in zip(on_cpu, on_gpu):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=0)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed on this GPU machine")
def test_vllm_sleep_mode_frees_memory_and_keeps_the_weights(tiny_model_dir, samples, make_peaked) -> None:
    from mmgrpo.config.vllm_section import VLLMConfig
    from mmgrpo.rollout import SamplingParams
    from mmgrpo.rollout.vllm import VLLMEngine

    model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl", **LARGER), device="cuda")
    engine = VLLMEngine(model, processor, options=VLLMConfig(enable_sleep_mode=True, gpu_memory_utilization=0.2),
                        max_model_len=1024)
    params = SamplingParams(n=4, max_new_tokens=8, seed=0)
    first = engine.generate(samples, params)  # the engine sleeps after sampling
    free_asleep, _ = torch.cuda.mem_get_info()
    engine.update_weights(make_peaked(model))
    second = engine.generate(samples, params)
    assert [c.logprobs for g in first for c in g] != [c.logprobs for g in second for c in g]
    again = engine.generate(samples, params)  # asleep since the last call, no update between: same weights
    for a, b in zip((c for g in again for c in g), (c for g in second for c in g)):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert free_asleep > 0.5 * torch.cuda.mem_get_info()[1] * 0.2  # the KV cache share was given back


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed on this GPU machine")
def test_vllm_sleep_level_2_gives_the_weights_back_for_the_update_and_a_push_restores_them(
    tiny_model_dir, samples
) -> None:
    from mmgrpo.config.vllm_section import VLLMConfig
    from mmgrpo.rollout import SamplingParams
    from mmgrpo.rollout.vllm import VLLMEngine

    model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl", **LARGER), device="cuda")
    engine = VLLMEngine(model, processor, max_model_len=1024,
                        options=VLLMConfig(enable_sleep_mode=True, sleep_level=2, gpu_memory_utilization=0.2))
    params = SamplingParams(n=4, max_new_tokens=8, seed=0)
    first = engine.generate(samples, params)  # awake through sampling
    free_awake, _ = torch.cuda.mem_get_info()
    engine.before_update()
    free_asleep, total = torch.cuda.mem_get_info()
    assert free_asleep - free_awake > 0.5 * total * 0.2  # the KV cache share (and the weights) given back
    engine.update_weights(model)  # every weight again
    again = engine.generate(samples, params)
    for a, b in zip((c for g in again for c in g), (c for g in first for c in g)):
        assert a.token_ids == b.token_ids
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
