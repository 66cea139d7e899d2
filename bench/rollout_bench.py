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
    rng = np.random.default_rng(0)
    return [
        Sample(
            id=str(i),
            task="bench",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))},
                        {"type": "text", "text": "How many objects are there?"},
                    ],
                }
            ],
        )
        for i in range(count)
    ]


def tokens_per_second(engine: HFEngine, samples: list[Sample], params: SamplingParams, repeats: int) -> float:
    """Median generated tokens per wall-clock second over ``repeats`` runs (after one warm-up)."""
    engine.generate(samples, params)
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        groups = engine.generate(samples, params)
        elapsed = time.perf_counter() - start
        rates.append(sum(len(c.token_ids) for group in groups for c in group) / elapsed)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as checkpoint:
        model, processor = load_model_and_processor(make_tiny("qwen2_5_vl", checkpoint))
    samples = image_prompts(args.prompts, args.image_size)
    params = SamplingParams(n=args.group, max_new_tokens=args.new_tokens, seed=0)
    print(f"tiny qwen2_5_vl, P={args.prompts} G={args.group} {args.image_size}px images, "
          f"{args.new_tokens} new tokens, {torch.get_num_threads()} threads")
    rates = {}
    for mode, shared in (("group-shared", True), ("plain generate", False)):
        rates[mode] = tokens_per_second(HFEngine(model, processor, group_shared=shared), samples, params, args.repeats)
        print(f"{mode:>15}: {rates[mode]:8.0f} tokens/s")
    print(f"{'speed-up':>15}: {rates['group-shared'] / rates['plain generate']:8.2f}x")


if __name__ == "__main__":
    main()
