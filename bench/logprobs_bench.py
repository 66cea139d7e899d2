"""Log-prob throughput of the tiny model: plain per-sample path vs group-shared prompt encoding.

Prints completion tokens/s of a GRPO-shaped batch (P prompts x G completions, one image
per prompt) for both paths, without gradients (old/reference log-probs) and with a
backward pass (policy update). Not a test: numbers depend on the machine and its load.

    python3 bench/logprobs_bench.py --prompts 8 --group-size 8 --completion-len 6
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.train_batch import build_train_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.logprobs import LogProbs, sequence_logprobs
from mmgrpo.models.shared_prefix import grouped_logprobs
from mmgrpo.models.tiny import make_tiny
from mmgrpo.types import Sample


def counting_samples(out_dir: Path, count: int, image_size: int) -> list[Sample]:
    """``count`` one-image counting prompts with random images saved under ``out_dir``."""
    rng = np.random.default_rng(0)
    samples = []
    for index in range(count):
        path = out_dir / f"image_{index}.png"
        Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)).save(path)
        content = [{"type": "image", "image": str(path)}, {"type": "text", "text": "How many cubes are there?"}]
        samples.append(Sample(id=f"bench-{index}", task="bench", messages=[{"role": "user", "content": content}]))
    return samples


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def with_backward(compute: Callable[[], LogProbs], model: torch.nn.Module) -> Callable[[], None]:
    def run() -> None:
        model.zero_grad(set_to_none=True)
        logp, _ = compute()
        logp.sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--completion-len", type=int, default=6)
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        model, processor = load_model_and_processor(make_tiny("qwen2_5_vl", Path(tmp) / "model"))
        samples = counting_samples(Path(tmp), args.prompts, args.image_size)
        family = model.config.model_type
        group_sizes = [args.group_size] * args.prompts
        total = args.prompts * args.group_size
        completions = torch.randint(0, 256, (total, args.completion_len)).tolist()
        micro = total  # one forward per path: compare the encodings, not the batching

        prompts = build_prompt_batch(processor, samples, family=family)
        train = build_train_batch(
            processor, [s for s in samples for _ in range(args.group_size)], completions, family=family
        )
        paths = {
            "plain": lambda: sequence_logprobs(model, train, micro_batch_size=micro),
            "group-shared": lambda: grouped_logprobs(model, prompts, completions, group_sizes, micro_batch_size=micro),
        }
        print(f"P={args.prompts} G={args.group_size} completion={args.completion_len} tokens, "
              f"prompt={prompts.input_ids.shape[1]} tokens ({args.image_size}px image), {args.threads} threads")
        tokens = total * args.completion_len
        for mode in ("no grad", "forward+backward"):
            seconds = {}
            for name, compute in paths.items():
                if mode == "no grad":
                    with torch.no_grad():
                        seconds[name] = median_seconds(compute, args.repeats)
                else:
                    seconds[name] = median_seconds(with_backward(compute, model), args.repeats)
                print(f"  {mode:17s} {name:13s} {seconds[name] * 1e3:8.1f} ms  {tokens / seconds[name]:9.0f} tokens/s")
            print(f"  {mode:17s} speed-up      {seconds['plain'] / seconds['group-shared']:.1f}x")


if __name__ == "__main__":
    main()
