"""``mmgrpo train [recipe.yaml] [dotted.key=value ...] [--resume | --resume-from CHECKPOINT]``: the GRPO job.

Without arguments it runs the embedded default. A run stopped by Ctrl-C or SIGTERM saves
its last finished step and exits with 130 / 143 (128 + the signal), so ``mmgrpo train && next``
does not go on; ``--resume`` continues it. ``--nproc N`` starts N ranks on this machine
through torchrun (the same as ``torchrun --standalone --nproc-per-node N -m mmgrpo train ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from mmgrpo.commands.config import config_from_args


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name in recipes/ (default: the embedded default)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. algo.beta=0.04")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument(
        "--resume", action="store_true",
        help="continue the run named by log.run_name where it stopped (its newest checkpoint)",
    )
    resume.add_argument(
        "--resume-from", metavar="CHECKPOINT", help="continue from this checkpoint folder (a checkpoints/step-N)"
    )
    parser.add_argument(
        "--nproc", type=int, metavar="N",
        help="train on N ranks on this machine (torchrun; needs train.backend=deepspeed or fsdp2)",
    )


def run(args: argparse.Namespace) -> int:
    resume = args.resume_from or ("latest" if args.resume else None)
    overrides = [*args.overrides, *([f"checkpoint.resume={resume}"] if resume else [])]
    if args.nproc:  # the config is checked as the N ranks will read it, before anything starts
        os.environ["WORLD_SIZE"] = str(args.nproc)
    try:
        config = config_from_args("train", args.recipe, overrides)
    finally:
        if args.nproc:
            del os.environ["WORLD_SIZE"]
    if args.nproc:
        return _launch(args.nproc, [*([args.recipe] if args.recipe else []), *overrides])
    from mmgrpo.trainer.interrupts import exit_code, signal_name  # heavy imports once the config is known good
    from mmgrpo.trainer.pipeline import run_training

    try:
        summary = run_training(config)
    except Exception as failure:
        _name_the_rank(failure)
        raise
    except KeyboardInterrupt as stop:
        print(
            f"mmgrpo train: stopped by {signal_name(stop)}; continue the run with "
            f"log.run_name={config.log.run_name} --resume",
            file=sys.stderr,
        )
        return exit_code(stop)
    print(json.dumps(summary, indent=2))
    return 0


def _name_the_rank(failure: Exception) -> None:
    """Under a launcher, say which rank failed and how (e.g. a collective timed out: another rank
    crashed or hangs), before the traceback."""
    from mmgrpo.config.validation import launched_world_size

    world_size = launched_world_size()
    if world_size > 1:
        print(f"mmgrpo train: rank {os.environ.get('RANK')} of {world_size} failed: {type(failure).__name__}: "
              f"{failure}", file=sys.stderr, flush=True)


def _launch(nproc: int, train_args: list[str]) -> int:
    """``mmgrpo train train_args`` on ``nproc`` local ranks under torchrun; its exit code."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
        "-m", "mmgrpo", "train", *train_args,
    ]
    return subprocess.run(command, check=False).returncode
