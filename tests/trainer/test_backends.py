"""Training back ends in one process: the single back end's step, the DeepSpeed JSON mmgrpo
builds and merges with a user's file, FSDP2's sharding units, and the config checks on the
back-end keys."""

from __future__ import annotations

import copy
import json
import sys
import typing
from dataclasses import dataclass

import pytest
import torch

from mmgrpo.config import ConfigError, load_config
from mmgrpo.config.backend_traits import BACKEND_TRAITS
from mmgrpo.config.schema import TrainConfig
from mmgrpo.distributed import Ranks
from mmgrpo.trainer.backends import BACKENDS, OptimizerSpec, SingleProcessBackend, build_backend
from mmgrpo.trainer.backends.deepspeed_config import implied_settings, merged_config, read_user_config
from mmgrpo.trainer.backends.fsdp2 import sharding_units

from tests.trainer import backend_parity


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))


def _loss(model: torch.nn.Module) -> torch.Tensor:
    return 50.0 * model(torch.arange(6.0).view(2, 3)).square().sum()  # a gradient norm far above 1


SPEC = OptimizerSpec(lr=0.1, weight_decay=0.01, total_steps=4, schedule="linear", max_grad_norm=0.5)


# -- the single back end ---------------------------------------------------------------------
def test_single_step_clips_steps_and_schedules_as_torch_does_by_hand():
    model, by_hand = _model(), _model()
    backend = build_backend(model, SPEC, TrainConfig())
    assert isinstance(backend, SingleProcessBackend) and backend.ranks.is_main_process and backend.ranks.world_size == 1
    backend.backward(_loss(model))
    norm = backend.step()

    optimizer, scheduler = SPEC.build(by_hand)
    _loss(by_hand).backward()
    expected_norm = torch.nn.utils.clip_grad_norm_(by_hand.parameters(), SPEC.max_grad_norm)
    optimizer.step()
    scheduler.step()
    assert norm == pytest.approx(float(expected_norm)) and norm > 10 * SPEC.max_grad_norm
    for ours, theirs in zip(model.parameters(), by_hand.parameters()):
        assert torch.equal(ours, theirs)
        assert ours.grad is None  # zeroed after the step
    assert backend.scheduler.last_epoch == 1
    assert backend.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 3 / 4)


def test_single_full_state_dict_and_all_reduce_are_this_process():
    backend = build_backend(_model(), SPEC, TrainConfig())
    assert backend.full_state_dict().keys() == backend.model.state_dict().keys()
    assert backend.ranks.all_reduce({"loss": 2.5, "tokens": 7.0}, op="mean") == {"loss": 2.5, "tokens": 7.0}


def test_backends_are_registered_by_the_names_the_config_offers():
    offered = typing.get_args(typing.get_type_hints(TrainConfig)["backend"])
    assert BACKENDS.names() == sorted(offered)


def test_deepspeed_missing_is_a_config_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # import deepspeed -> ImportError
    with pytest.raises(ConfigError, match=r"train.backend=deepspeed needs DeepSpeed.*mmgrpo\[deepspeed\]"):
        build_backend(_model(), SPEC, TrainConfig(backend="deepspeed"))


# -- the DeepSpeed JSON ------------------------------------------------------------------------
def _implied(world_size: int = 2, **train: object) -> list:
    spec = OptimizerSpec(lr=1e-5, weight_decay=0.1, total_steps=10, betas=(0.9, 0.95), samples_per_step=64)
    return implied_settings(TrainConfig(micro_batch_size=4, **train), spec, world_size)


def test_implied_config_maps_stage_precision_clipping_and_accumulation():
    config = merged_config(_implied(zero_stage=3, precision="bf16"), {}, "user.json")
    assert config["zero_optimization"] == {"stage": 3, "offload_optimizer": {"device": "none"}}
    assert config["bf16"] == {"enabled": True}
    assert config["gradient_clipping"] == 1.0
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 8  # 64 completions per step / (4 per micro-batch x 2 ranks)
    assert config["managed_gradient_accumulation"] is False  # the trainer marks each step itself
    assert "optimizer" not in config  # mmgrpo's own AdamW, sharded by ZeRO


def test_offload_hands_the_optimizer_settings_to_deepspeeds_cpu_adam():
    config = merged_config(_implied(offload_optimizer=True), {}, "user.json")
    assert config["zero_optimization"]["offload_optimizer"] == {"device": "cpu"}
    assert config["optimizer"] == {
        "type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
    }


def test_parameter_offload_is_zero3s_offload_param():
    config = merged_config(_implied(zero_stage=3, offload_parameters=True), {}, "user.json")
    assert config["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert "offload_param" not in merged_config(_implied(zero_stage=3), {}, "user.json")["zero_optimization"]
    with pytest.raises(ConfigError, match="train.offload_parameters=true needs train.zero_stage=3"):
        load_config(None, ["train.backend=deepspeed", "train.offload_parameters=true"])
    with pytest.raises(ConfigError, match="train.offload_parameters=True is read only by train.backend=deepspeed"):
        load_config(None, ["train.offload_parameters=true"])


def test_user_config_keeps_its_own_keys_and_auto_takes_mmgrpos_value():
    user = {"zero_optimization": {"reduce_bucket_size": 500000, "stage": "auto"}, "gradient_clipping": "auto",
            "communication_data_type": "fp32"}
    untouched = copy.deepcopy(user)
    config = merged_config(_implied(), user, "user.json")
    assert config["zero_optimization"]["reduce_bucket_size"] == 500000
    assert config["zero_optimization"]["stage"] == 2 and config["gradient_clipping"] == 1.0
    assert config["communication_data_type"] == "fp32"
    assert user == untouched


def test_conflicting_user_keys_are_each_reported_with_the_mmgrpo_key():
    user = {"zero_optimization": {"stage": 3}, "gradient_clipping": 0.5, "bf16": {"enabled": False}}
    with pytest.raises(ConfigError) as caught:
        merged_config(_implied(zero_stage=2), user, "ds.json")
    message = str(caught.value)
    assert "zero_optimization.stage=3 in ds.json conflicts with 2 from train.zero_stage" in message
    assert "gradient_clipping=0.5 in ds.json conflicts with 1.0 from train.max_grad_norm" in message
    assert "bf16" not in message  # the same value as implied is no conflict


def test_user_config_file_errors_name_the_file(tmp_path):
    bad, listed = tmp_path / "bad.json", tmp_path / "list.json"
    bad.write_text("{stage: 3")
    listed.write_text(json.dumps([1, 2]))
    with pytest.raises(ConfigError, match=r"bad.json.*not valid JSON"):
        read_user_config(str(bad))
    with pytest.raises(ConfigError, match=r"list.json.*expected a JSON object, got list"):
        read_user_config(str(listed))
    assert read_user_config(None) == {}


# -- FSDP2 sharding units ---------------------------------------------------------------------------
class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(2, 2)


class _Tiny(torch.nn.Module):
    _no_split_modules = ["_Block"]

    def __init__(self, tied: bool = False) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 2)
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])
        self.head = torch.nn.Linear(2, 5, bias=False)
        if tied:
            self.head.weight = self.embed.weight


def test_fsdp2_units_are_blocks_then_each_other_parameter_owner():
    model = _Tiny()
    units = sharding_units(model)
    assert units[:2] == list(model.blocks)  # whole blocks; their inner Linear is not a unit of its own
    assert set(map(id, units[2:])) == {id(model.embed), id(model.head)}
    covered = {id(p) for unit in units for p in unit.parameters()}
    assert covered == {id(p) for p in model.parameters()}


def test_fsdp2_refuses_tied_parameters_by_name():
    with pytest.raises(ConfigError, match=r"tied parameters.*use deepspeed"):
        sharding_units(_Tiny(tied=True))


# -- config checks ----------------------------------------------------------------------------------
def test_each_back_end_declares_its_traits_where_config_validation_reads_them():
    """One entry per registered back end, the same object on the class; the config's choices are the same
    names; every declared key is a ``train`` field; a back end that shards says so as its traits do."""
    assert set(BACKENDS.names()) == set(BACKEND_TRAITS) == set(typing.get_args(typing.get_type_hints(TrainConfig)["backend"]))
    fields = {f"train.{name}" for name in TrainConfig.__dataclass_fields__}
    for name, traits in BACKEND_TRAITS.items():
        assert BACKENDS.get(name).traits is traits
        assert set(traits.keys) <= fields and set(traits.precisions) | set(traits.not_yet) <= {"fp32", "bf16", "fp16"}
    assert not TrainConfig(backend="single").shards_weights and TrainConfig(backend="fsdp2").shards_weights
    assert TrainConfig(backend="deepspeed", zero_stage=3).shards_weights
    assert not TrainConfig(backend="deepspeed", zero_stage=2).shards_weights
    with pytest.raises(ConfigError, match=r"fp16 is not supported with train.backend=fsdp2 yet \(its gradients are "
                                          r"sharded.*use fp32 or bf16, or fp16 with train.backend=single or "
                                          r"train.backend=deepspeed"):
        load_config(None, ["train.backend=fsdp2", "train.precision=fp16"])


def test_back_end_keys_without_their_back_end_are_errors(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["train.zero_stage=3", "train.offload_optimizer=true"])
    assert "train.zero_stage=3 is read only by train.backend=deepspeed (got single)" in str(caught.value)
    assert (
        "train.offload_optimizer=True is read only by train.backend=deepspeed or train.backend=fsdp2"
        in str(caught.value)
    )
    with pytest.raises(ConfigError, match="train.zero_stage=3 is read only by train.backend=deepspeed"):
        load_config(None, ["train.backend=fsdp2", "train.zero_stage=3"])
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=r"train.deepspeed_config=.*nope.json.*no such file"):
        load_config(None, ["train.backend=deepspeed", f"train.deepspeed_config={missing}"])
    assert load_config(None, ["train.backend=deepspeed", "train.zero_stage=3"]).train.zero_stage == 3
    assert load_config(None, ["train.backend=fsdp2", "train.offload_optimizer=true"]).train.offload_optimizer


def test_launched_ranks_need_a_distributed_backend_and_batches_that_split(monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["rollout.prompts_per_step=6", "rollout.num_generations=4", "train.micro_batch_size=8",
                           "train.mini_batch_size=8", "lora.enabled=true"])
    problems = str(caught.value)
    assert "2 ranks were launched (WORLD_SIZE=2) but train.backend=single" in problems
    assert "train.mini_batch_size=8 (completions per optimizer step, all ranks together) does not divide into 2 ranks" in problems
    assert "lora" not in problems  # LoRA trains on every distributed back end
    for backend in (["train.backend=fsdp2"], ["train.backend=deepspeed", "train.zero_stage=3"]):
        assert load_config(None, [*backend, "lora.enabled=true"]).lora.enabled
    with pytest.raises(ConfigError, match=r"sft.batch_size=5 \(examples per SFT step, all ranks together\) does not "
                       "divide across 2 ranks"):  # each rank trains on its share of every SFT batch
        load_config(None, ["train.backend=fsdp2", "sft.enabled=true", "sft.batch_size=5", "sft.micro_batch_size=5"])
    split = load_config(None, ["train.backend=fsdp2", "rollout.prompts_per_step=6", "train.micro_batch_size=8"])
    assert split.rollout.prompts_per_step == 6  # 3 per rank, 48 completions = 2 ranks x 3 micro-batches of 8
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ConfigError, match=r"rollout.prompts_per_step=6 \(prompts per step, all ranks together\) does not divide across 4 ranks"):
        load_config(None, ["train.backend=fsdp2", "rollout.prompts_per_step=6", "train.micro_batch_size=8"])


@dataclass(frozen=True)
class BusierOtherRank(Ranks):
    """One process whose "max" over ranks of the micro-batch count is ``extra_chunks`` higher."""

    extra_chunks: int = 0

    def all_reduce(self, values, op="sum"):  # noqa: ANN001, ANN201
        reduced = dict(values)
        if op == "max" and reduced.get("chunks", 0) > 1:  # micro-batches (the one mini-batch has 1 chunk)
            reduced["chunks"] += self.extra_chunks
        return reduced


class CountingForwards(SingleProcessBackend):
    """One process that counts the language model's forward passes (embedding calls)."""

    forwards = 0
    extra_chunks = 0

    def __init__(self, model, spec, train) -> None:  # noqa: ANN001
        super().__init__(model, spec, train)
        self.ranks = BusierOtherRank(extra_chunks=self.extra_chunks)
        counter = type(self)
        model.get_input_embeddings().register_forward_hook(lambda *_: setattr(counter, "forwards", counter.forwards + 1))


class BehindBusierRanks(CountingForwards):
    """As if another rank had 2 more micro-batches each time (for old log-probs and in each
    mini-batch): 2 repeats to run. (A rank's repeated mini-batch has no fake here: its
    gradients would come from the other rank.)"""

    forwards = 0
    extra_chunks = 2


def test_a_rank_with_fewer_chunks_repeats_one_at_weight_zero_and_its_update_is_unchanged(tiny_qwen25vl) -> None:
    """Ranks must run equally many forward/backward passes (gradients are reduced in backward,
    ZeRO-3 and FSDP2 gather weights in forward); the repeats must not change the update."""
    train = TrainConfig(micro_batch_size=backend_parity.MICRO_BATCH)
    weights, metrics = backend_parity.train_on_fixed_rollouts(tiny_qwen25vl, train, CountingForwards)
    padded_weights, padded_metrics = backend_parity.train_on_fixed_rollouts(tiny_qwen25vl, train, BehindBusierRanks)
    assert BehindBusierRanks.forwards > CountingForwards.forwards > 0  # the repeats ran
    worst = max(float((weights[name] - padded_weights[name]).abs().max()) for name in weights)
    assert worst <= 1e-7
    for name in ("loss", "kl", "entropy", "clip_frac"):
        assert padded_metrics[name] == pytest.approx(metrics[name], rel=1e-6), name


@pytest.mark.parametrize(("recipe", "ranks"), [("clevr70k_qwen2_5_vl_7b", 8), ("clevr70k_qwen2_5_vl_3b", 2)])
def test_the_documented_multi_gpu_commands_are_valid_configs(recipe, ranks, monkeypatch) -> None:
    """The recipes' headers and docs/SCALING.md launch these recipes with ZeRO-3 on this many GPUs."""
    monkeypatch.setenv("WORLD_SIZE", str(ranks))
    config = load_config(recipe, ["train.backend=deepspeed", "train.zero_stage=3"])
    assert config.rollout.prompts_per_step % ranks == 0


# -- the KL reference under sharding ----------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "loaded_on"),
    [([], None), (["train.backend=deepspeed", "train.zero_stage=2"], None),
     (["train.backend=deepspeed", "train.zero_stage=3"], "cpu"), (["train.backend=fsdp2"], "cpu")],
)
def test_a_sharded_backends_reference_loads_on_the_cpu_never_as_a_copy_on_the_device(
    tiny_qwen25vl, monkeypatch, overrides, loaded_on
):
    """Under ZeRO-3/FSDP2 the fresh reference is read from disk onto the CPU (prepare_frozen then
    shards it onto the device); elsewhere it is a copy of the policy, where the device holds it whole anyway."""

    from mmgrpo.models.loading import load_model_and_processor
    from mmgrpo.trainer import kl_reference

    loads = []

    def recording_load(source, **options):
        loads.append(str(options["device"]))
        return load_model_and_processor(source, **options)

    monkeypatch.setattr(kl_reference, "load_model_and_processor", recording_load)
    policy, _ = load_model_and_processor(tiny_qwen25vl)
    config = load_config(None, ["algo.beta=0.04", *overrides])
    reference = kl_reference.make_reference(config, policy, str(tiny_qwen25vl), fresh=True)
    assert loads == ([] if loaded_on is None else [loaded_on])
    assert reference.module is not policy and not reference.module.training
    for (name, frozen), (_, live) in zip(reference.module.named_parameters(), policy.named_parameters()):
        assert torch.equal(frozen, live) and not frozen.requires_grad, name
