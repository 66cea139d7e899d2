"""What the non-finite media checks cost beside the decoding they follow.

For a float32 WAV (3 s and 30 s at 16 kHz), a float TIFF and a JPEG at 448 x 448, and the
Qwen2-VL image processor's output for a 448 x 448 image (1024 patches x 1176 values, what
Qwen2.5-VL-7B sees of it): the median time to decode or process (``load_audio`` / ``load_image``,
checks included; the processor call) and the median time of the check alone
(``processors.finite.require_finite`` / ``nonfinite_inputs`` over the same values), over
``--repeats`` runs, on ``--threads`` torch threads.

    python3 bench/finite_checks.py [--repeats 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile
import torch
from PIL import Image
from transformers import Qwen2VLImageProcessor

from mmgrpo.models.media_check import nonfinite_inputs
from processors import AudioBudget, ImageBudget, load_audio, load_image
from processors.finite import require_finite


def median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for seconds in (3, 30):
            path = Path(folder) / f"clip-{seconds}s.wav"
            samples = (0.1 * rng.standard_normal((seconds * 16_000, 1))).astype(np.float32)
            soundfile.write(path, samples, 16_000, subtype="FLOAT")
            budget = AudioBudget(max_seconds=seconds)
            rows.append((f"float WAV, {seconds} s", median_ms(lambda: load_audio(path, budget), args.repeats),
                         median_ms(lambda: require_finite(samples, "bench", "samples"), args.repeats)))
        pixels = rng.uniform(0, 255, (448, 448)).astype(np.float32)
        tiff, jpeg = Path(folder) / "float.tif", Path(folder) / "image.jpg"
        Image.fromarray(pixels, mode="F").save(tiff)
        Image.fromarray(rng.integers(0, 256, (448, 448, 3), dtype=np.uint8)).save(jpeg)
        budget = ImageBudget(min_pixels=448 * 448, max_pixels=448 * 448)
        rows.append(("float TIFF 448x448", median_ms(lambda: load_image(tiff, budget), args.repeats),
                     median_ms(lambda: require_finite(pixels, "bench", "pixels"), args.repeats)))
        rows.append(("JPEG 448x448 (uint8: no check)", median_ms(lambda: load_image(jpeg, budget), args.repeats), 0.0))
        processor = Qwen2VLImageProcessor(min_pixels=448 * 448, max_pixels=448 * 448)
        image = load_image(jpeg, budget)
    encoded = dict(processor(images=[image], return_tensors="pt"))  # pixel_values [1024, 1176]
    rows.append(("Qwen2-VL processor output, 448x448", median_ms(lambda: processor(images=[image], return_tensors="pt"),
                 args.repeats), median_ms(lambda: nonfinite_inputs(encoded), args.repeats)))
    print(f"| media | decode or process ms (median of {args.repeats}) | check ms | check / decode |")
    print("| --- | --- | --- | --- |")
    for name, decode, check in rows:
        print(f"| {name} | {decode:.3f} | {check:.3f} | {check / decode:.1%} |")


if __name__ == "__main__":
    main()
