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

from mmgrpo.models.loading import load_model_and_processor
from tests.torchrun import torchrun
from tests.trainer import sharded_loading_worker
from tests.trainer.test_backends_distributed import EXTENSIONS_CACHE

pytestmark = pytest.mark.distributed
# bf16: the prepared policy's logits differ from one process's by up to 2e-3 (measured; one bf16 step near 1)
LOGITS_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def test_only_the_main_process_reads_the_weights_and_every_rank_gets_them(tiny_qwen25vl, tmp_path):
    backends = ["zero3", "zero3-bf16", "fsdp2"] if importlib.util.find_spec("deepspeed") else ["fsdp2"]
    out = tmp_path / "result.pt"
    env = {"DS_ACCELERATOR": "cpu",
           "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))}
    worker = [sharded_loading_worker.__file__, "--model-dir", str(tiny_qwen25vl), "--out", str(out), *backends]
    done = torchrun(2, worker, env=env, timeout=600)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    results = torch.load(out)
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


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=sharded_loading_worker.TOKENS).logits.float()
