"""Rollout throughput: group-shared prefill vs plain ``model.generate``, tiny Qwen2.5-VL on CPU.

Not a test. Prints generated tokens/s of both HF engine modes for P prompts x G samples,
each prompt one random image, sampling at temperature 1 up to a fixed number of new tokens.

    python3 bench/rollout_bench.py [--prompts 8] [--group 8] [--image-size 112] [--new-tokens 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
from PIL import Image

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import make_tiny
from mmgrpo.rollout import HFEngine, SamplingParams
from mmgrpo.types import Sample


def image_prompts(count: int, image_size: int) -> list[Sample]:
    """``count`` prompts, each one random square image and a counting question."""
    rng = np.random.default_rng(0)
    samples = []
    for i in range(count):
        image = Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))
        content = [{"type": "image", "image": image}, {"type": "text", "text": "How many objects are there?"}]
        samples.append(Sample(id=str(i), task="bench", messages=[{"role": "user", "content": content}]))
    return samples


def tokens_per_second(engine: HFEngine, samples: list[Sample], params: SamplingParams) -> float:
    """Generated tokens per wall-clock second of one ``generate`` call."""
    start = time.perf_counter()
    groups = engine.generate(samples, params)
    elapsed = time.perf_counter() - start
    return sum(len(c.token_ids) for group in groups for c in group) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed runs per mode, interleaved, after a warm-up"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as checkpoint:
        model, processor = load_model_and_processor(make_tiny("qwen2_5_vl", checkpoint))
    samples = image_prompts(args.prompts, args.image_size)
    params = SamplingParams(n=args.group, max_new_tokens=args.new_tokens, seed=0)
    print(
        f"tiny qwen2_5_vl, P={args.prompts} G={args.group} {args.image_size}px images, "
        f"{args.new_tokens} new tokens, {torch.get_num_threads()} threads"
    )
    engines = {
        "group-shared": HFEngine(model, processor, group_shared=True),
        "plain generate": HFEngine(model, processor, group_shared=False),
    }
    rates: dict[str, list[float]] = {mode: [] for mode in engines}
    for engine in engines.values():
        engine.generate(samples, params)  # warm-up
    for _ in range(args.repeats):  # interleaved, so a load change on a shared machine hits both modes
        for mode, engine in engines.items():
            rates[mode].append(tokens_per_second(engine, samples, params))
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    for mode, median in medians.items():
        print(f"{mode:>15}: {median:8.0f} tokens/s (median of {args.repeats})")
    print(f"{'speed-up':>15}: {medians['group-shared'] / medians['plain generate']:8.2f}x")


if __name__ == "__main__":
    main()
