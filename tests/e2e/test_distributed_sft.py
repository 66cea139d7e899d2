"""The cold-start SFT of ``mmgrpo train`` on 2 ranks (torchrun, gloo on CPU) through the run's back end: each rank
trains on its share of every batch, the result is one process's SFT, and a run stopped by SIGTERM in an SFT step
resumes to the uninterrupted run's model (under ZeRO-3, whose checkpoint holds each rank's optimizer shard). The
stand-alone ``mmgrpo sft`` trains on ranks the same way (under FSDP2; both call one SFT loop and back end)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file

from mmgrpo.run_files import read_metrics
from tests.e2e.ranks import NEEDS_DEEPSPEED, stopped_after_step_one, succeeded, torchrun_train
from tests.torchrun import torchrun

pytestmark = pytest.mark.distributed
SHARDED_TOLERANCE = 2e-5
"""fp32 on CPU: the ranks' gradients are summed in another order than one process sums its micro-batches'."""
RESUME_TOLERANCE = 1e-6


@NEEDS_DEEPSPEED
def test_sft_on_two_zero3_ranks_is_one_process_sft_and_resumes_exactly(small_config, tiny_qwen25vl, tmp_path):
    backend = ["train.backend=deepspeed", "train.zero_stage=3"]
    config_overrides = ["sft.enabled=true", "sft.steps=3", "sft.batch_size=4", "sft.micro_batch_size=1", "sft.lr=1e-3",
                        "train.steps=1", "eval.before=false", "eval.after=false", *backend]
    config = small_config(*config_overrides)
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    runs = Path(config.log.output_dir)

    succeeded(torchrun_train(str(recipe), "log.run_name=whole"))
    stopped_after_step_one(torchrun_train(str(recipe), "log.run_name=cut", stop_in_sft_step=2),
                           runs / "cut" / "sft" / "checkpoints")
    # the back end's own checkpoint: each rank's optimizer shard
    assert len(list((runs / "cut" / "sft" / "checkpoints" / "step-1" / "zero").rglob("*optim_states.pt"))) == 2
    succeeded(torchrun_train(str(recipe), "log.run_name=cut", "--resume"))
    one_process = small_config(*(override for override in config_overrides
                                 if not override.startswith(("train.backend", "train.zero_stage"))))
    one_process.save_yaml(tmp_path / "one.yaml")
    succeeded(torchrun_train(str(tmp_path / "one.yaml"), "log.run_name=one", ranks=1))

    assert "each rank trains on 2 of the 4 examples of a step" in (runs / "whole" / "train.log").read_text()

    def sft_model(run: str) -> dict:
        return load_file(str(runs / run / "sft" / "model" / "model.safetensors"))

    initial, whole, cut, one = load_file(str(tiny_qwen25vl / "model.safetensors")), *map(sft_model, ("whole", "cut", "one"))
    assert whole.keys() == cut.keys() == one.keys()
    assert max(float((whole[name] - cut[name]).abs().max()) for name in whole) <= RESUME_TOLERANCE
    assert max(float((whole[name] - one[name]).abs().max()) for name in whole) <= SHARDED_TOLERANCE
    assert max(float((whole[name] - initial[name]).abs().max()) for name in initial if name in whole) > 1e-3  # it trained
    losses = {run: [row["sft/loss"] for row in read_metrics(runs / run / "sft" / "metrics.jsonl")]
              for run in ("whole", "cut", "one")}
    assert losses["whole"] == pytest.approx(losses["one"], rel=1e-4) and len(losses["whole"]) == 3
    assert losses["cut"] == pytest.approx(losses["whole"], rel=1e-6)  # step 1 before the stop, 2 and 3 resumed


def test_the_sft_command_on_two_ranks_is_the_one_process_command_and_resumes_exactly(
    small_config, tiny_qwen25vl, tmp_path
):
    """``torchrun ... -m mmgrpo sft`` under FSDP2 saves (from the main process only) what one process saves; stopped
    by SIGTERM in step 2 it leaves step 1's checkpoint (each rank's optimizer shard), and ``--resume`` ends there."""
    config = small_config("sft.steps=3", "sft.batch_size=4", "sft.micro_batch_size=1", "sft.lr=1e-3")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    saved = {}
    for ranks, backend in ((1, []), (2, ["train.backend=fsdp2"])):
        out = tmp_path / f"sft-{ranks}"
        done = torchrun(ranks, ["-m", "mmgrpo", "sft", str(recipe), *backend, "--out", str(out)])
        succeeded(done)
        assert done.stdout.count("SFT: ") == 1, done.stdout  # the main process reports and saves
        saved[ranks] = load_file(str(out / "model.safetensors"))
    assert "3 steps on 2 ranks (train.backend=fsdp2)" in done.stdout  # not two one-process runs
    initial = load_file(str(tiny_qwen25vl / "model.safetensors"))
    assert saved[1].keys() == saved[2].keys()
    assert max(float((saved[1][name] - saved[2][name]).abs().max()) for name in saved[1]) <= SHARDED_TOLERANCE
    assert max(float((saved[1][name] - initial[name]).abs().max()) for name in initial if name in saved[1]) > 1e-3

    cut = tmp_path / "sft-cut"
    command = ["sft", str(recipe), "train.backend=fsdp2", "--out", str(cut)]
    stopped_after_step_one(torchrun_train(*command, stop_in_sft_step=2), cut / "checkpoints")
    succeeded(torchrun_train(*command, "--resume"))
    resumed = load_file(str(cut / "model.safetensors"))
    assert max(float((saved[2][name] - resumed[name]).abs().max()) for name in saved[2]) <= RESUME_TOLERANCE
