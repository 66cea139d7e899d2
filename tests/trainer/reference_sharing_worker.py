"""The KL reference of a policy whose vision tower is frozen, under ZeRO-2 on 2 ranks (each rank holds the whole
weights): after the back end prepared the policy and the reference, the reference's frozen parameters are the
policy's own, in the dtype the policy trains in. Launched by ``test_freezing_training.py``::

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tests/trainer/reference_sharing_worker.py --model-dir D --out R.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mmgrpo.config import Config
from mmgrpo.distributed import init_process_group, release_process_groups
from mmgrpo.trainer.backends import OptimizerSpec, build_backend
from mmgrpo.trainer.kl_reference import make_reference
from mmgrpo.trainer.setup import load_policy


def shared_parameters(model_dir: Path, precision: str) -> dict[str, object]:
    """Which of the prepared reference's parameters are the prepared policy's, which the policy freezes, and the
    reference's dtypes."""
    config = Config.from_dict({"model": {"name_or_path": str(model_dir), "freeze_vision_tower": True},
                               "train": {"backend": "deepspeed", "zero_stage": 2, "precision": precision},
                               "algo": {"beta": 0.04}})
    model, _ = load_policy(config, str(model_dir), torch.device("cpu"))
    reference = make_reference(config, model, str(model_dir), fresh=True)
    backend = build_backend(model, OptimizerSpec(lr=1e-5, weight_decay=0.0, total_steps=1), config.train)
    frozen = backend.prepare_frozen(reference.module)
    policy = dict(backend.model.named_parameters())
    return {"shared": sorted(name for name, parameter in frozen.named_parameters() if parameter is policy[name]),
            "frozen": sorted(name for name, parameter in policy.items() if not parameter.requires_grad),
            "dtypes": sorted({str(parameter.dtype) for parameter in frozen.parameters()})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    init_process_group(600)
    result = {precision: shared_parameters(args.model_dir, precision) for precision in ("fp32", "bf16")}
    if torch.distributed.get_rank() == 0:
        args.out.write_text(json.dumps(result))
    torch.distributed.barrier()
    release_process_groups()


if __name__ == "__main__":
    main()
