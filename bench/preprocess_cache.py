"""What the preprocessing cache saves: the embedded default's SFT stage, and an epoch-2 GRPO step
with 448 x 448 images.

Three settings, one after another in this process, each from the same initial weights:
``off`` (``data.cache=false``), ``cold`` (an empty cache folder: the first run ever) and
``warm`` (the folder the cold run filled: a second run, or a later stage). Reported: wall
time of the whole SFT stage and of its prompt encoding; for GRPO the median step time and
prompt encoding of the second epoch (every prompt seen once, so a cache hit) and the hit rate.

    python3 bench/preprocess_cache.py [--sft-steps 100] [--image-size 448] [--grpo-prompts 64]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mmgrpo.config import load_config
from mmgrpo.models.prompt_cache import open_prompt_cache
from mmgrpo.trainer import sft as sft_module
from mmgrpo.trainer import step_batch as step_batch_module
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.inputs import load_samples, media_budgets, resolve_model_path, task_model_info
from mmgrpo.trainer.setup import load_policy
from mmgrpo.trainer.sft import run_sft, sft_examples

SETTINGS = ("off", "cold", "warm")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft-steps", type=int, default=100, help="SFT steps (the embedded default's)")
    parser.add_argument("--image-size", type=int, default=448, help="side of the GRPO part's images")
    parser.add_argument("--grpo-prompts", type=int, default=64, help="training prompts of the GRPO part")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--output", type=Path, help="where data and caches go (default: a temporary folder)")
    return parser.parse_args()


class Timed:
    """Wraps a function and adds up the seconds spent in it."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function, self.seconds = function, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.function(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started


def overrides_for(setting: str, work: Path, *extra: str) -> list[str]:
    cache = [f"data.cache_dir={work / 'cache'}"] if setting != "off" else ["data.cache=false"]
    return [f"data.dir={work / 'data'}", "log.progress_bar=false", "log.tensorboard=false", *cache, *extra]


def sft_stage(setting: str, work: Path, steps: int) -> dict[str, float]:
    """The embedded default's cold-start SFT: whole-stage seconds and seconds building prompt batches."""
    config = load_config(None, overrides_for(setting, work, f"sft.steps={steps}"))
    model_path = resolve_model_path(config.model, work / "models", config.seed)
    config.model.name_or_path = model_path
    train_set = load_samples(config.data.train, config.task, work / "data", seed=config.data.seed,
                             model=task_model_info(config.model, model_path))
    model, processor = load_policy(config, model_path, torch.device("cpu"))
    examples = sft_examples([spec.path for spec in config.sft.data], train_set)
    encode = Timed(sft_module.build_prompt_batch)
    sft_module.build_prompt_batch = encode
    cache = open_prompt_cache(config)
    started = time.perf_counter()
    try:
        run_sft(model, processor, examples, config.sft, budgets=media_budgets(config.model, processor),
                seed=config.seed, progress_bar=False, max_prompt_len=config.data.max_prompt_tokens, cache=cache)
    finally:
        sft_module.build_prompt_batch = encode.function
    hit_rate = cache.stats.hit_rate() if cache is not None else None
    return {"seconds": time.perf_counter() - started, "encode": encode.seconds, "hit_rate": hit_rate or 0.0}


def grpo_epoch_two(setting: str, work: Path, image_size: int, prompts: int) -> dict[str, float]:
    """Median step and prompt-encoding seconds of the second epoch over ``prompts`` large-image prompts."""
    pixels = image_size * image_size
    steps_per_epoch = prompts // 32
    data = f"{{n: {prompts * 2}, test_fraction: 0.5, image_size: {image_size}}}"
    config = load_config(None, overrides_for(
        setting, work, f"data.train.0.recipe_args={data}", f"data.test.0.recipe_args={data}",
        f"model.tiny_options={{max_pixels: {pixels}}}", f"model.max_pixels={pixels}",
        "sft.enabled=false", "eval.before=false", "eval.after=false", "checkpoint.every_n_steps=0",
        f"train.steps={2 * steps_per_epoch}", f"log.output_dir={work / 'runs'}", f"log.run_name=grpo-{setting}",
    ))
    model_path = resolve_model_path(config.model, work / "models", config.seed)
    config.model.name_or_path = model_path
    train_set = load_samples(config.data.train, config.task, work / "data", seed=config.data.seed,
                             model=task_model_info(config.model, model_path))
    model, processor = load_policy(config, model_path, torch.device("cpu"))
    run_dir = work / "runs" / f"grpo-{setting}"
    run_dir.mkdir(parents=True, exist_ok=True)
    encode = Timed(step_batch_module.build_prompt_batch)
    step_batch_module.build_prompt_batch = encode
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    step_seconds, encode_seconds, hit_rates = [], [], []
    real_step = trainer.step

    def timed_step() -> dict[str, float]:
        before, started = encode.seconds, time.perf_counter()
        metrics = real_step()
        step_seconds.append(time.perf_counter() - started)
        encode_seconds.append(encode.seconds - before)
        hit_rates.append(metrics.get("data/cache_hit_rate", 0.0))
        return metrics

    trainer.step = timed_step
    try:
        trainer.train()
    finally:
        step_batch_module.build_prompt_batch = encode.function
    second = slice(steps_per_epoch, None)
    return {
        "step": statistics.median(step_seconds[second]),
        "encode": statistics.median(encode_seconds[second]),
        "hit_rate": statistics.mean(hit_rates[second]),
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    work = args.output or Path(tempfile.mkdtemp(prefix="mmgrpo-cache-bench-"))
    print(f"| SFT stage ({args.sft_steps} steps) | stage s | prompt building s | hit rate |")
    print("|---|---|---|---|")
    for setting in SETTINGS:
        result = sft_stage(setting, work / "sft", args.sft_steps)
        print(f"| {setting} | {result['seconds']:.1f} | {result['encode']:.1f} | {result['hit_rate']:.2f} |",
              flush=True)
    print(f"\n| GRPO epoch 2, {args.image_size}x{args.image_size} | median step s | prompt building s | hit rate |")
    print("|---|---|---|---|")
    for setting in SETTINGS:
        result = grpo_epoch_two(setting, work / "grpo", args.image_size, args.grpo_prompts)
        print(f"| {setting} | {result['step']:.3f} | {result['encode']:.3f} | {result['hit_rate']:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
