"""What both GRPO step benchmarks share: flags, the tiny model and counting prompts, timing summaries.

``grpo_step.py`` (mmgrpo) and ``trl_grpo_step.py`` (TRL) build the same tiny Qwen2.5-VL
and the same generated ``clevr_count`` prompts from one mmgrpo config, so their step
times compare like for like.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import Config, load_config
from mmgrpo.models.tiny import make_tiny
from mmgrpo.models.tiny.families import REAL_SHAPES
from mmgrpo.inputs import SampleSet, load_samples, task_model_info
from mmgrpo.trainer.setup import load_policy

MODEL_FAMILY = "qwen2_5_vl"
DATASET_SIZE = 64  # generated clevr_count examples; prompts are drawn from the train split
LEARNING_RATE = 5e-4


def parse_args(description: str) -> argparse.Namespace:
    """The flags both benchmarks take (same names, same defaults)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--prompts", type=int, default=1, help="P: prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="G: completions per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--beta", type=float, default=0.04, help="KL weight; 0 skips the reference model")
    parser.add_argument("--steps", type=int, default=5, help="timed steps")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before the timed ones")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (the trainer defaults to 1: more do not help tiny models)")
    parser.add_argument("--full-length", action="store_true",
                        help="every completion runs to --max-new-tokens (EOS never sampled): equal work in both trainers")
    parser.add_argument("--no-group-shared", action="store_true",
                        help="mmgrpo only: the plain per-sample path instead of group-shared prompt encoding")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute the decoder and vision layers' activations in backward")
    parser.add_argument("--shape", choices=sorted(REAL_SHAPES), default=None,
                        help="a real checkpoint's widths, vocabulary and image budget at 2 layers (default: tiny)")
    parser.add_argument("--padding-free", action="store_true",
                        help="mmgrpo only: training forwards on packed rows (train.padding_free)")
    parser.add_argument("--logprob-chunk-tokens", type=int, default=1024,
                        help="mmgrpo only: tokens through the output head at a time (train.logprob_chunk_tokens)")
    parser.add_argument("--freeze-vision-tower", action="store_true",
                        help="model.freeze_vision_tower: no tower gradients or optimizer state in either trainer "
                             "(mmgrpo's KL reference also shares the frozen tower)")
    parser.add_argument("--video-frames", type=int, default=None,
                        help="mmgrpo only: prompts are one-second video_count clips of this many frames (as large as "
                             "the images would be) instead of clevr_count images")
    parser.add_argument("--image-size", type=int, default=None,
                        help="side of the prompts' images, also the tiny model's pixel budget (default: the "
                             "generated set's 112, the tiny model's budget)")
    return parser.parse_args()


def bench_config(args: argparse.Namespace, work_dir: Path) -> Config:
    """The mmgrpo config of the benchmark: tiny model, small counting set, fixed P/G/lengths, no logging."""
    images, tiny_options = [], dict(REAL_SHAPES[args.shape]) if args.shape else {}
    if args.image_size is not None:
        pixels = args.image_size**2
        images = [f"data.train.0.recipe_args.image_size={args.image_size}", f"model.max_pixels={pixels}"]
        tiny_options["max_pixels"] = pixels
    elif args.shape:
        images = [f"model.max_pixels={tiny_options['max_pixels']}"]
    side = math.isqrt(tiny_options["max_pixels"]) if "max_pixels" in tiny_options else None  # of images and frames
    return load_config(None, [
        *images,
        *(_video_overrides(args.video_frames, side) if args.video_frames else []),
        "model.tiny_options={" + ", ".join(f"{key}: {value}" for key, value in tiny_options.items()) + "}",
        f"train.padding_free={args.padding_free}",
        f"train.logprob_chunk_tokens={args.logprob_chunk_tokens}",
        f"model.freeze_vision_tower={args.freeze_vision_tower}",
        f"model.name_or_path={work_dir / 'model'}",
        f"data.dir={work_dir / 'data'}",
        f"data.train.0.recipe_args.n={DATASET_SIZE}",
        f"task.name={'video_count' if args.video_frames else 'clevr_count'}",
        f"rollout.prompts_per_step={args.prompts}",
        f"rollout.num_generations={args.generations}",
        f"rollout.max_new_tokens={args.max_new_tokens}",
        "rollout.temperature=1.0",
        f"algo.beta={args.beta}",
        f"train.steps={args.warmup + args.steps}",
        f"train.lr={LEARNING_RATE}",
        "train.lr_schedule=constant",
        f"train.micro_batch_size={args.prompts * args.generations}",
        f"train.group_shared_encoding={not args.no_group_shared}",
        f"train.gradient_checkpointing={args.gradient_checkpointing}",
        "train.device=cpu",
        "sft.enabled=false",
        f"log.output_dir={work_dir / 'runs'}",
        "log.run_name=bench",
        "log.tensorboard=false",
        "log.progress_bar=false",
        "log.log_completions_every=0",
        "checkpoint.every_n_steps=0",
    ])


def _video_overrides(frames: int, side: int | None) -> list[str]:
    """One-second ``video_count`` clips of ``frames`` frames, ``side`` pixels square (None: the recipe's), all of
    them sampled (``model.fps`` = ``frames``)."""
    size = f", frame_size: {side}" if side else ""
    return ["data.train.0.recipe=video_count", f"model.fps={frames}",
            f"model.max_frames={frames}",
            f"data.train.0.recipe_args={{n: {DATASET_SIZE}, num_frames: {frames}, fps: {frames}{size}}}"]


@dataclass
class BenchInputs:
    config: Config
    model: torch.nn.Module
    processor: Any
    train_set: SampleSet


def build_inputs(args: argparse.Namespace, work_dir: Path) -> BenchInputs:
    """Seeded tiny model (built into ``work_dir``), its processor and the generated prompts."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = bench_config(args, work_dir)
    make_tiny(MODEL_FAMILY, config.model.name_or_path, seed=0, **config.model.tiny_options)
    model, processor = load_policy(config, config.model.name_or_path, torch.device("cpu"))  # fp32, as the trainer
    train_set = load_samples(config.data.train, config.task, Path(config.data.dir), seed=config.data.seed,
                             model=task_model_info(config.model, config.model.name_or_path))
    return BenchInputs(config, model, processor, train_set)


@dataclass
class StepRecord:
    """One timed step: seconds per phase (``step`` is the total) and completion tokens."""

    seconds: dict[str, float]
    completion_tokens: float
    completions: int


def print_summary(title: str, args: argparse.Namespace, records: list[StepRecord]) -> None:
    """Median step time, its split, tokens/s and mean completion length over ``records``."""
    print(f"\n{title}: P={args.prompts} G={args.generations} max_new_tokens={args.max_new_tokens} "
          f"beta={args.beta} threads={args.threads}, median of {len(records)} steps after {args.warmup} warm-up")
    phases = [phase for phase in records[0].seconds if phase != "step"]
    for phase in ["step", *phases]:
        print(f"  {phase:<14} {statistics.median(r.seconds[phase] for r in records):8.3f} s")
    print(f"  {'tokens/s':<14} {statistics.median(r.completion_tokens / r.seconds['step'] for r in records):8.1f}")
    mean_length = sum(r.completion_tokens for r in records) / sum(r.completions for r in records)
    print(f"  {'mean length':<14} {mean_length:8.1f} tokens (max {args.max_new_tokens})")
    steps = " ".join(f"{r.seconds['step']:.3f}" for r in records)
    print(f"  step times     {steps}")
    print(f"  {'peak RSS':<14} {peak_rss_mib():8.0f} MiB")


@dataclass(frozen=True)
class ScriptResult:
    """What a step benchmark script printed: its median step, the step's update phase, its process's peak RSS."""

    seconds: float
    update_seconds: float
    peak_rss_mib: float


def run_step_script(script: str, flags: list[str]) -> ScriptResult:
    """``bench/<script> FLAGS`` in its own process (so the peak RSS is its own); what its summary printed."""
    command = [sys.executable, str(Path(__file__).with_name(script)), *flags]
    lines = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()

    def value(label: str) -> float:
        return float(next(line.split()[-2] for line in lines if line.strip().startswith(label)))

    return ScriptResult(seconds=value("step "), update_seconds=value("update "), peak_rss_mib=value("peak RSS"))


def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: unlike ``ru_maxrss``, not inherited from the
    process that started it)."""
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024
