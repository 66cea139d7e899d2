"""Sharded loading on 2 ranks (torchrun, gloo on CPU): the main process alone reads the policy and its KL reference,
the other rank makes them on the meta device, and after the back end prepares them every rank holds the weights and
buffers one process loads (``sharded_loading_worker.py``)."""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path

import pytest
import torch

from mmgrpo.config.schema import LoraConfig, ModelConfig
from mmgrpo.models.freezing import frozen_parts
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.kl_reference import REFERENCE_ADAPTER
from mmgrpo.trainer.setup import add_lora
from tests.e2e.ranks import EXTENSIONS_CACHE
from tests.torchrun import torchrun
from tests.trainer import sharded_loading_worker

pytestmark = pytest.mark.distributed
# bf16: the prepared policy's logits differ from one process's by up to 2e-3 (measured; one bf16 step near 1)
LOGITS_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def test_only_the_main_process_reads_the_weights_and_every_rank_gets_them(tiny_qwen25vl, tmp_path):
    backends = ["zero3", "zero3-bf16", "fsdp2"] if importlib.util.find_spec("deepspeed") else ["fsdp2"]
    results = _run_worker(tiny_qwen25vl, tmp_path / "result.pt", *backends)
    whole, _ = load_model_and_processor(str(tiny_qwen25vl), dtype="float32", device="cpu")
    expected = {torch.float32: _logits(whole), torch.bfloat16: _logits(copy.deepcopy(whole).to(torch.bfloat16))}
    for backend in backends:
        result = results[backend]
        # the policy and the reference: whole on the main process, on the meta device (no weight read) on rank 1
        assert [rank["on_meta"] for rank in result["ranks"]] == [[False, False], [True, True]], backend
        weights, dtype = result["weights"], torch.bfloat16 if backend.endswith("bf16") else torch.float32
        assert weights.keys() == whole.state_dict().keys(), backend
        assert all(torch.equal(weights[name], tensor.to(dtype)) for name, tensor in whole.state_dict().items()), backend
        for rank in result["ranks"]:  # the forward passes are collective: every rank's own buffers count
            policy, reference = rank["logits"]  # the frozen reference keeps the loaded dtype
            torch.testing.assert_close(policy, expected[dtype], rtol=0, atol=LOGITS_TOLERANCE[dtype])
            torch.testing.assert_close(reference, expected[torch.float32], rtol=0, atol=LOGITS_TOLERANCE[torch.float32])


def test_lora_policies_load_sharded_new_or_resumed_with_their_reference_adapter(tiny_qwen25vl, tmp_path):
    """LoRA under FSDP2 and ZeRO-3: rank 1 reads no base weight (the PEFT model is made on the meta device), and every
    rank ends with one process's model: new adapters drawn from the main process's seed, or a checkpoint's adapter
    (also loaded as the KL reference's, as after a LoRA SFT), with the logits one process gives."""
    variants = ["fsdp2-lora", "fsdp2-lora-resumed"]
    variants += ["zero3-lora-resumed"] if importlib.util.find_spec("deepspeed") else []
    whole, _ = load_model_and_processor(str(tiny_qwen25vl), dtype="float32", device="cpu")
    lora = LoraConfig(**sharded_loading_worker.LORA)
    torch.manual_seed(sharded_loading_worker.LORA_SEED)
    fresh = add_lora(copy.deepcopy(whole), lora, frozen_parts(whole, ModelConfig()))
    trained = add_lora(copy.deepcopy(whole), lora, frozen_parts(whole, ModelConfig()))
    with torch.no_grad():
        for name, weight in trained.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5)  # so the adapter changes the logits
    trained.save_pretrained(tmp_path / "adapter")
    trained.load_adapter(str(tmp_path / "adapter"), adapter_name=REFERENCE_ADAPTER, is_trainable=False)
    results = _run_worker(tiny_qwen25vl, tmp_path / "result.pt", *variants, "--lora-checkpoint", str(tmp_path / "adapter"))
    for variant in variants:
        result, expected = results[variant], trained if variant.endswith("resumed") else fresh
        assert [rank["on_meta"] for rank in result["ranks"]] == [[False, False], [True, True]], variant
        state = expected.state_dict()
        assert result["weights"].keys() == state.keys(), variant
        assert all(torch.equal(result["weights"][name], tensor) for name, tensor in state.items()), variant
        policy_logits = _logits(expected)
        reference_logits = policy_logits if variant.endswith("resumed") else _logits(whole)
        assert not torch.equal(_logits(trained), _logits(whole))  # the adapter counts
        for rank in result["ranks"]:
            torch.testing.assert_close(rank["logits"][0], policy_logits, rtol=0, atol=1e-5)
            torch.testing.assert_close(rank["logits"][1], reference_logits, rtol=0, atol=1e-5)


def _run_worker(model_dir: Path, out: Path, *arguments: str) -> dict:
    env = {"DS_ACCELERATOR": "cpu",
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))}
    worker = [sharded_loading_worker.__file__, "--model-dir", str(model_dir), "--out", str(out), *arguments]
    done = torchrun(2, worker, env=env, timeout=600)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return torch.load(out)


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=sharded_loading_worker.TOKENS).logits.float()
