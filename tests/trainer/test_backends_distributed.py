"""DeepSpeed ZeRO-2/3 and FSDP2 on 2 processes (gloo on CPU) train exactly as one process does.

``backend_parity.py`` applies the same k GRPO updates to the tiny Qwen2.5-VL on fixed
rollouts; under ``torchrun`` each rank holds half of the groups (with different token
counts, so the loss normaliser must be summed over ranks). The weights after k steps
must equal the one-process run's within fp32 summation-order noise, far below what the
steps change.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mmgrpo.config.schema import TrainConfig
from mmgrpo.models.loading import load_model_and_processor
from tests.e2e.ranks import EXTENSIONS_CACHE, NEEDS_DEEPSPEED
from tests.torchrun import torchrun
from tests.training import built_once
from tests.trainer import backend_parity

pytestmark = pytest.mark.distributed

WORKER = Path(backend_parity.__file__)
MICRO_BATCH = backend_parity.MICRO_BATCH
# fp32, 3 Adam steps at lr 1e-3: measured max |difference| 1.2e-6 (ZeRO-2, FSDP2) and 1.8e-6 (ZeRO-3)
# where the steps move weights by ~3e-3; summation order differs (gradients reduced across ranks).
WEIGHT_TOLERANCE = 2e-5
MOVED_AT_LEAST = 1e-3  # the largest change the k steps make, so the comparison is not vacuous
TOKEN_BUDGET = 100  # about two of the fixed batch's groups (~45 tokens each: prompt once + 4 completions)


@pytest.fixture(scope="module")
def one_process(tiny_qwen25vl: Path) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    return backend_parity.train_on_fixed_rollouts(tiny_qwen25vl, TrainConfig(micro_batch_size=MICRO_BATCH))


LAUNCHES: dict[str, tuple[str, ...]] = {  # one launch per back end (CI time), the runs named after it in turn
    "zero2": ("--backend", "deepspeed", "--zero-stage", "2", "--uneven", *backend_parity.UNEVEN_BATCHES),
    "zero3": ("--backend", "deepspeed", "--zero-stage", "3", "--uneven", *backend_parity.UNEVEN_BATCHES),
    # DeepSpeed's CPU Adam steps the offloaded optimizer state; weight shards live in CPU memory
    "zero3-offload": ("--backend", "deepspeed", "--zero-stage", "3", "--offload"),
    "fsdp2": ("--backend", "fsdp2", "--also-frozen-tower", "--uneven", *backend_parity.UNEVEN_BATCHES),
}


@pytest.fixture(scope="module")
def launched(tiny_qwen25vl: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict]:
    """What rank 0 saved from the launch of ``LAUNCHES[name]``, made once per module (the tests of a back end share
    its launch; a failed launch fails them all without being run again)."""
    @built_once
    def result(name: str) -> dict:
        out = tmp_path_factory.mktemp(name) / "weights.pt"
        return _run_two_ranks("--model-dir", str(tiny_qwen25vl), *LAUNCHES[name], out=out)

    return result


def test_the_ranks_make_different_numbers_of_head_calls(tiny_qwen25vl):
    """The launches below make the ranks' output-head calls differ (``HEAD_CHUNK_TOKENS``): a rank making fewer
    than another under ZeRO-3 or FSDP2 leaves the other waiting in the head's gather (measured: FSDP2 hung)."""
    _, processor = load_model_and_processor(str(tiny_qwen25vl), dtype="float32", device="cpu")
    batch = backend_parity.fixed_batch(processor, "qwen2_5_vl")
    calls = [[math.ceil(sum(map(len, share.completions[start:start + MICRO_BATCH])) / backend_parity.HEAD_CHUNK_TOKENS)
              for start in range(0, len(share.completions), MICRO_BATCH)]
             for share in (backend_parity.rank_share(batch, rank, 2) for rank in range(2))]
    assert calls[0] != calls[1], calls


def _run_two_ranks(*arguments: str, out: Path) -> dict:
    """``backend_parity.py`` on 2 ranks with ``arguments``; what rank 0 saved to ``out``."""
    env = {"DS_ACCELERATOR": "cpu", "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR", str(EXTENSIONS_CACHE))}
    done = torchrun(2, [str(WORKER), *arguments, "--out", str(out)], env=env, timeout=600)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return torch.load(out)


@pytest.mark.parametrize("name", [pytest.param("zero2", marks=NEEDS_DEEPSPEED),
                                  pytest.param("zero3", marks=NEEDS_DEEPSPEED),
                                  pytest.param("zero3-offload", marks=NEEDS_DEEPSPEED), "fsdp2"])
def test_two_ranks_match_one_process(name, one_process, tiny_qwen25vl, launched):
    reference_weights, reference_metrics = one_process
    result = launched(name)
    weights, metrics = result["weights"], result["metrics"]
    initial = backend_parity.initial_weights(tiny_qwen25vl)
    assert weights.keys() == reference_weights.keys()
    moved = max(float((reference_weights[n] - initial[n]).abs().max()) for n in initial)
    assert moved > MOVED_AT_LEAST
    worst = max(((float((weights[n] - reference_weights[n]).abs().max()), n) for n in weights))
    assert worst[0] <= WEIGHT_TOLERANCE, f"{name}: {worst[1]} differs by {worst[0]:.3g}"
    for metric in ("loss", "kl", "entropy", "clip_frac", "grad_norm"):  # reduced over ranks, as one process sees them
        assert metrics[metric] == pytest.approx(reference_metrics[metric], rel=1e-5), metric
    # the frozen KL reference is sharded like the policy's weights (ZeRO-2 keeps weights whole)
    sharded = name != "zero2"
    assert metrics["reference_local_share"] < 0.6 if sharded else metrics["reference_local_share"] == 1.0


@pytest.mark.parametrize("name", [pytest.param("zero2", marks=NEEDS_DEEPSPEED),
                                  pytest.param("zero3", marks=NEEDS_DEEPSPEED), "fsdp2"])
def test_ranks_whose_forwards_differ_in_shape_train_as_one_process(name, one_process, tiny_qwen25vl, launched):
    """A tool's image inside rank 0's completions only (the vision tower then runs in every rank's forwards alike:
    without, FSDP2 hung in the first backward), or rank 1's completions all one token (its group-shared forwards
    continue on a pad as rank 0's continue: without, FSDP2 hung)."""
    uneven = launched(name)["uneven"]
    for batch in backend_parity.UNEVEN_BATCHES:
        reference_weights, _ = backend_parity.train_on_fixed_rollouts(
            tiny_qwen25vl, TrainConfig(micro_batch_size=MICRO_BATCH), **backend_parity.uneven_batch(batch))
        apart = max(float((reference_weights[n] - one_process[0][n]).abs().max()) for n in reference_weights)
        assert apart > WEIGHT_TOLERANCE, f"{batch} trains as the plain batch: the comparison would not test it"
        worst = max(((float((uneven[batch][n] - reference_weights[n]).abs().max()), n) for n in reference_weights))
        assert worst[0] <= WEIGHT_TOLERANCE, f"{name}, {batch}: {worst[1]} differs by {worst[0]:.3g}"


def test_token_budget_packed_micro_batches_on_two_ranks_match_one_process(one_process, tiny_qwen25vl, tmp_path):
    """Micro-batches by token budget (whole groups balanced by tokens; each rank's count agreed with the other's)
    over packed rows, on FSDP2: the update of one process that splits by count and pads."""
    reference_weights, reference_metrics = one_process
    result = _run_two_ranks("--model-dir", str(tiny_qwen25vl), "--backend", "fsdp2", "--padding-free",
                            "--max-tokens", str(TOKEN_BUDGET), out=tmp_path / "weights.pt")
    weights, metrics = result["weights"], result["metrics"]
    worst = max(((float((weights[n] - reference_weights[n]).abs().max()), n) for n in weights))
    assert worst[0] <= WEIGHT_TOLERANCE, f"{worst[1]} differs by {worst[0]:.3g}"
    for name in ("loss", "kl", "entropy", "clip_frac", "grad_norm"):
        assert metrics[name] == pytest.approx(reference_metrics[name], rel=1e-5), name


def test_lora_on_two_ranks_matches_one_process(tiny_qwen25vl, tmp_path):
    """LoRA under FSDP2 and ZeRO-3, in one launch (ZeRO-2 shards less and runs the same way): only the
    adapters train and hold optimizer state; the adapters, the merged weights handed to rollout engines and
    the KL reference's log-probs (the policy with adapters off: no second model) are one process's."""
    backends = ["fsdp2", "zero3"] if importlib.util.find_spec("deepspeed") else ["fsdp2"]
    results = _run_two_ranks("--model-dir", str(tiny_qwen25vl), "--lora", *backends, out=tmp_path / "lora.pt")
    expected = backend_parity.train_lora_on_fixed_rollouts(tiny_qwen25vl, TrainConfig(micro_batch_size=MICRO_BATCH))
    initial = backend_parity.initial_weights(tiny_qwen25vl)
    assert max(float((expected["merged"][name] - initial[name]).abs().max()) for name in initial) > MOVED_AT_LEAST
    assert (expected["reference_logp"] - expected["policy_logp"]).abs().max() > MOVED_AT_LEAST
    for backend in backends:
        result = results[backend]
        metrics = result["metrics"]
        adapters = expected["metrics"]["adapter_elements"]
        assert metrics["optimizer_state_elements"] == metrics["adapter_elements"] == adapters
        base = {name.removeprefix("base_model.model.").replace(".base_layer.", "."): tensor
                for name, tensor in result["state"].items() if ".lora_" not in name}
        assert base.keys() == initial.keys() and all(torch.equal(base[name], initial[name]) for name in initial)
        for part in ("state", "merged"):
            assert result[part].keys() == expected[part].keys()
            worst = max((float((result[part][n] - expected[part][n]).abs().max()), n) for n in expected[part])
            assert worst[0] <= WEIGHT_TOLERANCE, f"{backend} {part}: {worst[1]} differs by {worst[0]:.3g}"
        for part in ("reference_logp", "policy_logp"):
            torch.testing.assert_close(result[part], expected[part], rtol=0, atol=1e-5)
        assert metrics["loss"] == pytest.approx(expected["metrics"]["loss"], rel=1e-5)


def test_fsdp2_with_a_frozen_tower_keeps_it_and_holds_no_optimizer_state_for_it(launched, tiny_qwen25vl):
    """FSDP2 units mixing frozen and trainable parameters are supported (frozen ones skip the reduce-scatter);
    here every tower unit is frozen whole, and no rank's optimizer holds state for a frozen shard."""
    result = launched("fsdp2")["frozen"]
    weights, metrics = result["weights"], result["metrics"]
    initial = backend_parity.initial_weights(tiny_qwen25vl)
    tower = [n for n in initial if n.startswith("model.visual.") and not n.startswith("model.visual.merger.")]
    assert tower and all(torch.equal(weights[name], initial[name]) for name in tower)
    assert any(not torch.equal(weights[n], initial[n]) for n in initial if n.startswith("model.language_model."))
    assert metrics["frozen_optimizer_states"] == 0 and metrics["optimizer_states"] > 0
