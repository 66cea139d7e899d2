"""Sharded loading on 2 ranks, as ``mmgrpo train`` loads: the policy and its KL reference, read by the main process
and made on the meta device elsewhere, prepared by a back end that shards the weights. Launched by
``test_sharded_loading.py`` (rank 0 saves the result to ``--out``)::

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tests/trainer/sharded_loading_worker.py \\
        --model-dir D --out result.pt [--lora-checkpoint A] zero3 zero3-bf16 fsdp2 fsdp2-lora ...
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import Config
from mmgrpo.distributed import init_process_group, release_process_groups
from mmgrpo.trainer.backends import OptimizerSpec, build_backend
from mmgrpo.trainer.kl_reference import make_reference
from mmgrpo.trainer.setup import load_policy, loading_device

BACKENDS = {"zero3": {"backend": "deepspeed", "zero_stage": 3}, "fsdp2": {"backend": "fsdp2"},
            # the policy's partitions are made in bf16 (as DeepSpeed casts a policy it partitions itself)
            "zero3-bf16": {"backend": "deepspeed", "zero_stage": 3, "precision": "bf16"}}
# With LoRA: new adapters, or (resumed) the adapter of --lora-checkpoint, which is also the KL reference's (a run
# that started from a LoRA SFT)
LORA_VARIANTS = {"fsdp2-lora": ("fsdp2", False), "zero3-lora-resumed": ("zero3", True),
                 "fsdp2-lora-resumed": ("fsdp2", True)}
LORA = {"enabled": True, "r": 4, "dropout": 0.0}
LORA_SEED = 0  # the new adapters' initial A, drawn by the main process alone
TOKENS = torch.tensor([[5, 17, 42, 7, 99, 3]])  # [1, T]: a text-only forward


def prepared(model_dir: Path, train: dict[str, Any], lora: dict[str, Any], adapter: Path | None) -> dict[str, Any]:
    """Every rank's view: whether it made the policy and the reference on the meta device, and both prepared modules'
    logits on ``TOKENS`` (the rotary frequencies, a non-persistent buffer, received too); the policy's whole weights
    (rank 0's entry). With ``lora`` the policy is a PEFT model (resumed from ``adapter`` when given, which is then
    the reference's adapter too) and the reference the policy in its reference context."""
    config = Config.from_dict({"model": {"name_or_path": str(model_dir), "dtype": "float32"}, "train": train,
                               "algo": {"beta": 0.04}, "lora": lora})
    torch.manual_seed(LORA_SEED)
    model, _ = load_policy(config, str(model_dir), loading_device(config, torch.device("cpu")), checkpoint=adapter)
    reference = make_reference(config, model, str(adapter or model_dir), fresh=adapter is None)
    on_meta = [all(parameter.is_meta for name, parameter in part.named_parameters() if ".lora_" not in name)
               for part in (model, reference.module)]  # no base weight read (an adapter file is small)
    backend = build_backend(model, OptimizerSpec(lr=1e-5, weight_decay=0.0, total_steps=1), config.train)
    tokens = TOKENS.to(backend.device)
    with torch.no_grad():
        policy = backend.model(input_ids=tokens).logits.float().cpu()
        if lora:
            with reference.context():
                frozen = backend.model(input_ids=tokens).logits.float().cpu()
        else:
            frozen = backend.prepare_frozen(reference.module)(input_ids=tokens).logits.float().cpu()
    return {"on_meta": on_meta, "logits": [policy, frozen], "weights": backend.full_state_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lora-checkpoint", type=Path, help="a LoRA adapter folder the -resumed variants load")
    parser.add_argument("backends", nargs="+", choices=sorted(BACKENDS.keys() | LORA_VARIANTS.keys()))
    args = parser.parse_args()
    torch.set_num_threads(1)
    init_process_group(600)
    result = {}
    for name in args.backends:
        backend, resumed = LORA_VARIANTS.get(name, (name, False))
        lora = LORA if name in LORA_VARIANTS else {}
        mine = prepared(args.model_dir, BACKENDS[backend], lora, args.lora_checkpoint if resumed else None)
        ranks = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(ranks, {key: mine[key] for key in ("on_meta", "logits")})
        result[name] = {"ranks": ranks, "weights": mine["weights"]}
    if torch.distributed.get_rank() == 0:
        torch.save(result, args.out)
    torch.distributed.barrier()
    release_process_groups()


if __name__ == "__main__":
    main()
