"""k GRPO updates of the tiny Qwen2.5-VL on FIXED rollouts through a training back end.

The same prompts (seeded images), completion tokens, advantages and reference log-probs
on every path, nothing sampled, so a distributed back end can be compared with one
process: each rank trains on its share of the groups. Imported by
``test_backends_distributed.py`` for the one-process run, and launched as a script under
``torchrun`` for the distributed one (rank 0 saves the gathered weights to ``--out``)::

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 tests/trainer/backend_parity.py \\
        --model-dir D --backend deepspeed --zero-stage 3 --out weights.pt   # or --backend fsdp2

``--padding-free`` and ``--max-tokens N`` pack rows and form micro-batches by token budget.
``--also-frozen-tower`` trains a second time, in the same launch, with the tower frozen first, as
``model.freeze_vision_tower`` does. ``--lora fsdp2 zero3``
trains LoRA adapters instead, on each back end named in turn (one launch). ``--uneven tool-image one-token``
then trains on batches whose forwards differ in shape between the ranks, each named in turn (same launch):
``tool-image`` gives rank 0's first completion a tool's image inside it (rank 1's none); ``one-token`` makes rank
1's completions one token each (its forwards have nothing to continue). Audio
families get a clip of noise where image families get an image.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.distributed.tensor import DTensor

from mmgrpo.config.schema import LoraConfig, ModelConfig, TrainConfig
from mmgrpo.distributed import release_process_groups
from mmgrpo.models.adapters import adapter_for, unwrap_model
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.dummy_media import install_dummy_media_pass
from mmgrpo.models.freezing import freeze, frozen_parts
from mmgrpo.models.inline_media import encode_inline, joined
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.backends import OptimizerSpec, TrainingBackend, build_backend
from mmgrpo.trainer.kl_reference import lora_reference
from mmgrpo.trainer.setup import add_lora
from mmgrpo.inputs import media_budgets
from mmgrpo.trainer.update import (
    LossSettings, StepBatch, UpdateSettings, batch_logprobs, build_loss_mask, policy_update,
)
from mmgrpo.types import Completion, Sample
from tests.rollout.test_families import AUDIO_FAMILIES, media_part

PROMPTS, GROUP_SIZE = 4, 4  # 16 completions, split by whole groups across ranks
MICRO_BATCH = GROUP_SIZE  # one group per forward/backward
STEPS = 3  # optimizer steps: mu = 3 iterations over the batch (ratios move off 1 after the first)
LR = 1e-3
HEAD_CHUNK_TOKENS = 13  # the ranks' groups of 13-15 completion tokens take 1 or 2 head calls: ranks differ
COLLECTIVE_TIMEOUT_S = 120  # ranks out of step fail in minutes, not gloo's default half hour
Weights = dict[str, torch.Tensor]
LOSS = LossSettings(beta=0.04, max_len=6)  # token-mean with a k3 KL term against fixed reference log-probs
SETTINGS = UpdateSettings(num_iterations=STEPS, micro_batch_size=MICRO_BATCH)
LORA = LoraConfig(enabled=True, r=4, dropout=0.0)  # no dropout: ranks would draw other masks than one process
TOOL_IMAGE_TEXT = "<|vision_start|><|image_pad|><|vision_end|>"  # the Qwen-VL families' image placeholder
UNEVEN_BATCHES = ["tool-image", "one-token"]  # see --uneven
LORA_BACKENDS = {"fsdp2": {"backend": "fsdp2"}, "zero2": {"backend": "deepspeed", "zero_stage": 2},
                 "zero3": {"backend": "deepspeed", "zero_stage": 3}}


def fixed_batch(processor, family: str, tool_image: bool = False, one_token: bool = False) -> StepBatch:
    """Seeded images and completions of unequal lengths (ranks hold different token counts); ``tool_image``: the
    first completion (rank 0's share of 2) sees a tool's image mid-way, as a zoom's crop, its tokens the tool's;
    ``one_token``: the second half's completions (rank 1's share) are one token each."""
    rng = np.random.default_rng(0)
    samples = [
        Sample(
            id=f"p{i}", task="fixed",
            messages=[{"role": "user", "content": [
                media_part("audio", 56, i) if family in AUDIO_FAMILIES
                else {"type": "image", "image": Image.fromarray(rng.integers(0, 256, (56, 56, 3), dtype=np.uint8))},
                {"type": "text", "text": f"How many objects? {i}"},
            ]}],
        )
        for i in range(PROMPTS)
    ]
    prompts = build_prompt_batch(processor, samples, media_budgets(ModelConfig(), processor), family=family)
    total = PROMPTS * GROUP_SIZE
    completions = [Completion('', rng.integers(10, 200, int(rng.integers(1, 7))).tolist()) for _ in range(total)]
    if tool_image:
        completions[0] = with_tool_image(completions[0], processor, family)
    if one_token:
        completions[total // 2:] = [Completion('', completion.token_ids[:1]) for completion in completions[total // 2:]]
    loss_mask = build_loss_mask(completions, [True] * total, prompts.pad_token_id)
    return StepBatch(
        prompts=prompts,
        completions=[completion.token_ids for completion in completions],
        media=[completion.media for completion in completions] if tool_image else None,
        group_sizes=[GROUP_SIZE] * PROMPTS,
        advantages=torch.from_numpy(rng.standard_normal(total)).float(),  # [N]
        loss_mask=loss_mask,
        ref_logp=-torch.from_numpy(rng.uniform(0.5, 8.0, tuple(loss_mask.shape))).float(),  # [N, Tc]
    )


def with_tool_image(completion: Completion, processor, family: str) -> Completion:
    """``completion``, then a tool turn holding one seeded image, then ``completion`` again."""
    crop = Image.fromarray(np.random.default_rng(1).integers(0, 256, (28, 28, 3), dtype=np.uint8))
    budgets = media_budgets(ModelConfig(), processor)
    image_ids, media = encode_inline(processor, family, TOOL_IMAGE_TEXT, [crop], budgets)
    start = len(completion.token_ids)
    return Completion('', [*completion.token_ids, *image_ids, *completion.token_ids],
                      observation_spans=[(start, start + len(image_ids))],
                      media=joined(adapter_for(family), None, media, start))


def uneven_batch(name: str) -> dict[str, bool]:
    """The :func:`train_on_fixed_rollouts` option of one of ``UNEVEN_BATCHES``."""
    return {name.replace("-", "_"): True}


def rank_share(batch: StepBatch, rank: int, world_size: int) -> StepBatch:
    """The whole groups rank ``rank`` trains on: a contiguous block of prompts."""
    per_rank = PROMPTS // world_size
    rows = list(range(rank * per_rank, (rank + 1) * per_rank))
    return batch.select(rows, slice(rows[0] * GROUP_SIZE, (rows[-1] + 1) * GROUP_SIZE))


def local_share(module: torch.nn.Module) -> float:
    """The share of ``module``'s parameter elements this rank holds (1.0: all of them)."""
    held = total = 0
    for param in module.parameters():
        if hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3: this rank's partition
            held, total = held + param.ds_tensor.numel(), total + param.ds_numel
        elif isinstance(param, DTensor):  # FSDP2: this rank's shard
            held, total = held + param.to_local().numel(), total + param.numel()
        else:
            held, total = held + param.numel(), total + param.numel()
    return held / total


def initial_weights(model_dir: Path) -> Weights:
    model, _ = load_model_and_processor(str(model_dir), dtype="float32", device="cpu")
    return dict(model.state_dict())


def train_on_fixed_rollouts(
    model_dir: Path, train: TrainConfig, backend_class: type | None = None, options: ModelConfig | None = None,
    tool_image: bool = False, one_token: bool = False,
) -> tuple[Weights, dict[str, float]]:
    """Weights after ``STEPS`` updates through ``train.backend`` (or ``backend_class``; full on
    rank 0, ``{}`` elsewhere) and the update's metrics (reduced over ranks), with the parts
    ``options`` freezes frozen; ``optimizer_states`` / ``frozen_optimizer_states`` count this
    rank's parameters with optimizer state, all and frozen ones. ``tool_image``, ``one_token``: see
    :func:`fixed_batch` (with a tool's image the policy gets the dummy media pass, as a run with tools does)."""
    model, processor = load_model_and_processor(str(model_dir), dtype="float32", device="cpu")
    freeze(model, frozen_parts(model, options or ModelConfig()))
    if tool_image:
        install_dummy_media_pass(model)
    backend, _, metrics = _updated(model, processor, train, backend_class, tool_image, one_token)
    states = [param for param in backend.optimizer.state if backend.optimizer.state[param]]
    metrics["optimizer_states"] = len(states)
    metrics["frozen_optimizer_states"] = sum(not param.requires_grad for param in states)
    reference, _ = load_model_and_processor(str(model_dir), dtype="float32", device="cpu")
    metrics["reference_local_share"] = local_share(backend.prepare_frozen(reference))
    return _whole(backend.full_state_dict().items()), metrics


def train_lora_on_fixed_rollouts(model_dir: Path, train: TrainConfig) -> dict[str, Any]:
    """LoRA adapters (``LORA``, seeded) through ``STEPS`` updates of ``train.backend``. On rank 0 (``{}``
    elsewhere): ``state`` the PEFT model's state (base weights under ``base_layer``, adapters), ``merged``
    the weights ``whole_weights`` hands rollout engines, ``reference_logp`` ``[N, Tc]`` the whole batch's
    log-probs under the KL reference (the policy with adapters off, every rank's rows in order),
    ``policy_logp`` the same with adapters on, and ``metrics``, with ``adapter_elements`` (the adapters'
    size) and ``optimizer_state_elements`` (Adam's first moment, all ranks' shards together)."""
    model, processor = load_model_and_processor(str(model_dir), dtype="float32", device="cpu")
    torch.manual_seed(0)  # the adapters' initial A
    model = add_lora(model, LORA, frozen_parts(model, ModelConfig()))
    adapter_elements = sum(param.numel() for param in model.parameters() if param.requires_grad)
    backend, batch, metrics = _updated(model, processor, train)
    reference = lora_reference(backend.model, None)
    logp = {"reference_logp": batch_logprobs(reference.module, backend, batch, SETTINGS, 1.0, reference.context)[0],
            "policy_logp": batch_logprobs(backend.model, backend, batch, SETTINGS, 1.0)[0]}  # [n, Tc] each
    state_elements = sum(_local(state["exp_avg"]).numel() for state in backend.optimizer.state.values() if state)
    metrics |= {"adapter_elements": adapter_elements,
                "optimizer_state_elements": backend.ranks.all_reduce({"n": state_elements})["n"]}
    merged = _whole(backend.whole_weights())
    state, every_rank = _whole(backend.full_state_dict().items()), backend.ranks.gather(_whole(logp.items()))
    if not backend.ranks.is_main_process:
        return {}
    return {"state": state, "merged": merged, "metrics": metrics,
            **{key: torch.cat([rank[key] for rank in every_rank]) for key in logp}}


def _updated(
    model: torch.nn.Module, processor: Any, train: TrainConfig, backend_class: type | None = None,
    tool_image: bool = False, one_token: bool = False,
) -> tuple[TrainingBackend, StepBatch, dict[str, float]]:
    """The back end around ``model`` after ``STEPS`` updates on this rank's share of the batch, the share, and
    the update's metrics."""
    spec = OptimizerSpec(
        lr=LR, weight_decay=0.01, total_steps=STEPS, max_grad_norm=train.max_grad_norm,
        samples_per_step=PROMPTS * GROUP_SIZE,
    )
    backend = backend_class(model, spec, train) if backend_class else build_backend(model, spec, train)
    family = unwrap_model(model).config.model_type
    ranks = backend.ranks
    batch = rank_share(fixed_batch(processor, family, tool_image, one_token), ranks.rank, ranks.world_size)
    backend.model.train()
    settings = replace(SETTINGS, padding_free=train.padding_free, logprob_chunk_tokens=train.logprob_chunk_tokens,
                       max_tokens_per_micro_batch=train.max_tokens_per_micro_batch)
    return backend, batch, policy_update(backend, batch, LOSS, settings)


def _whole(weights: Iterable[tuple[str, torch.Tensor]]) -> Weights:
    """Float32 CPU copies, each made as it is drawn (a whole_weights tensor may be freed once the next is)."""
    return {name: tensor.detach().float().cpu().clone() for name, tensor in weights}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--backend", choices=["deepspeed", "fsdp2"], default="deepspeed")
    parser.add_argument("--zero-stage", type=int, choices=[2, 3], default=2)
    parser.add_argument("--offload", action="store_true", help="ZeRO-3: optimizer state and weight shards in CPU memory")
    parser.add_argument("--also-frozen-tower", action="store_true",
                        help="then again with model.freeze_vision_tower=true (its result under 'frozen')")
    parser.add_argument("--lora", nargs="+", choices=sorted(LORA_BACKENDS), default=[],
                        help="instead: LoRA on each of these back ends in turn, one result each in --out")
    parser.add_argument("--padding-free", action="store_true", help="sequences packed into rows without padding")
    parser.add_argument("--max-tokens", type=int, help="micro-batches by this token budget")
    parser.add_argument("--uneven", nargs="+", choices=UNEVEN_BATCHES, default=[],
                        help="then each of these batches whose forwards differ in shape between ranks in turn "
                        "(tool-image: rank 0's first completion sees a tool's image; one-token: rank 1's completions "
                        "are one token each), their weights under 'uneven'")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train = TrainConfig(
        backend=args.backend, zero_stage=args.zero_stage, micro_batch_size=MICRO_BATCH,
        offload_optimizer=args.offload, offload_parameters=args.offload,
        padding_free=args.padding_free, max_tokens_per_micro_batch=args.max_tokens,
        logprob_chunk_tokens=HEAD_CHUNK_TOKENS, collective_timeout_s=COLLECTIVE_TIMEOUT_S,
    )
    if args.lora:
        trains = {name: TrainConfig(micro_batch_size=MICRO_BATCH, logprob_chunk_tokens=HEAD_CHUNK_TOKENS,
                                    collective_timeout_s=COLLECTIVE_TIMEOUT_S, **LORA_BACKENDS[name])
                  for name in args.lora}
        result = {name: train_lora_on_fixed_rollouts(args.model_dir, lora_train) for name, lora_train in trains.items()}
        result = result if all(result.values()) else {}  # rank 0 saves
    else:
        weights, metrics = train_on_fixed_rollouts(args.model_dir, train)
        result = {"weights": weights, "metrics": metrics} if weights else {}
        if args.also_frozen_tower:
            frozen = train_on_fixed_rollouts(args.model_dir, train, options=ModelConfig(freeze_vision_tower=True))
            result = result and result | {"frozen": dict(zip(("weights", "metrics"), frozen))}
        if args.uneven:
            uneven = {batch: train_on_fixed_rollouts(args.model_dir, train, **uneven_batch(batch))[0]
                      for batch in args.uneven}
            result = result and result | {"uneven": uneven}
    if result:
        torch.save(result, args.out)
    torch.distributed.barrier()
    release_process_groups()


if __name__ == "__main__":
    main()
