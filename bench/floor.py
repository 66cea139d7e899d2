"""How far a GRPO step is from its compute floor, at several batch shapes (issue 16).

For P prompts x G completions of exactly T new tokens, on the tiny Qwen2.5-VL and the counting
prompts of ``grpo_step.py``:

- mmgrpo: ``GRPOTrainer.step()`` with completions forced to full length (EOS forbidden):
  ``grpo_step.py --full-length``, in its own process;
- floor: the model work such a step cannot avoid, timed bare: the P prompts prefilled once,
  each prompt's KV cache repeated G times, then T batched forward passes of one token per
  row (fixed tokens: no sampling, stopping or masks); one forward + backward of the P prompts
  once and the P x G completions continuing their repeated caches (a group's prompt is not
  counted G times, issue 34), the loss on the completion tokens; and with beta > 0 the same
  forward without grad (the reference).

With ``--trl``, TRL's ``GRPOTrainer`` at the same shape too (``trl_grpo_step.py --full-length``,
its own process). Each script's process reports its peak RSS. Settings are interleaved over ``--repeats`` rounds (medians and spread over rounds, each
round the median of ``--steps`` steps after a warm-up).

    python3 bench/floor.py [--shapes 32x8x6 4x8x32 1x8x32 4x8x128 4x8x512] [--beta 0.04] [--repeats 3] [--trl]
                           [--model-shape qwen2_5_vl_3b]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path

import torch
from step_setup import BenchInputs, ScriptResult, build_inputs, run_step_script
from transformers import DynamicCache

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.tiny.families import REAL_SHAPES
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.compat import cache_argument
from mmgrpo.inputs import media_budgets

DEFAULT_SHAPES = ("32x8x6", "4x8x32", "1x8x32", "4x8x128", "4x8x512")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="PxGxT shapes")
    parser.add_argument("--beta", type=float, default=0.04, help="KL weight; 0 skips the reference pass")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model-shape", choices=sorted(REAL_SHAPES), default=None,
                        help="a real checkpoint's widths, vocabulary and image budget at 2 layers (default: tiny)")
    parser.add_argument("--trl", action="store_true",
                        help="also time TRL's GRPOTrainer (bench/trl_grpo_step.py --full-length; needs trl installed)")
    return parser.parse_args()


def shape_args(shape: str, args: Namespace) -> Namespace:
    prompts, generations, tokens = (int(part) for part in shape.split("x"))
    return Namespace(prompts=prompts, generations=generations, max_new_tokens=tokens, beta=args.beta,
                     steps=args.steps, warmup=1, threads=args.threads, no_group_shared=False, full_length=True,
                     shape=args.model_shape, padding_free=False, image_size=None, gradient_checkpointing=False,
                     logprob_chunk_tokens=1024)


def median_seconds(run: Callable[[], object], steps: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def floor_step(inputs: BenchInputs, args: Namespace) -> Callable[[], None]:
    """The bare model work of one step at ``args``' shape."""
    model, config = inputs.model, inputs.config
    family = model.config.model_type
    samples = inputs.train_set.samples[: args.prompts]
    prompts = build_prompt_batch(inputs.processor, samples, media_budgets(config.model, inputs.processor),
                                 family=family)
    adapter = adapter_for(family)
    group = args.generations
    rows = torch.arange(len(samples)).repeat_interleave(group)  # [N] prompt of each completion
    digit = inputs.processor.tokenizer("3")["input_ids"][0]  # an ordinary text token: what is decoded is irrelevant
    completion = torch.full((len(rows), args.max_new_tokens), digit)  # [N, T]

    def decode() -> None:
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            inputs_ = prompts.model_inputs()
            positions, next_position = adapter.prompt_positions(model, inputs_)
            model(**inputs_, position_ids=positions, **cache_argument(cache), use_cache=True, logits_to_keep=1)
            cache.reorder_cache(rows)
            mask = inputs_["attention_mask"][rows]  # [N, Tp]
            mask = torch.cat([mask, mask.new_ones(len(rows), args.max_new_tokens)], 1)  # [N, Tp + T]
            width = inputs_["attention_mask"].shape[1]
            for step in range(args.max_new_tokens - 1):
                model(input_ids=completion[:, step : step + 1], attention_mask=mask[:, : width + step + 1],
                      position_ids=adapter.continuation_positions(next_position[rows] + step, 1),
                      **cache_argument(cache), use_cache=True, logits_to_keep=1)

    def forward() -> torch.Tensor:
        """The P prompts once, their KV cache repeated G times, the completions continuing it (a group's prompt
        work is not counted G times); the loss on the completion tokens."""
        inputs_ = prompts.model_inputs()
        positions, next_position = adapter.prompt_positions(model, inputs_)
        cache = DynamicCache(config=model.config)
        first = model(**inputs_, position_ids=positions, **cache_argument(cache), use_cache=True,
                      logits_to_keep=1).logits[rows]  # [N, 1, V]
        cache.reorder_cache(rows)
        mask = torch.cat([inputs_["attention_mask"][rows], torch.ones_like(completion[:, :-1])], 1)  # [N, Tp + T - 1]
        rest = model(input_ids=completion[:, :-1], attention_mask=mask,
                     position_ids=adapter.continuation_positions(next_position[rows], args.max_new_tokens - 1),
                     **cache_argument(cache), use_cache=True).logits  # [N, T - 1, V]
        logits = torch.cat([first, rest], 1)  # [N, T, V]
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), completion.flatten())

    def step() -> None:
        decode()
        if args.beta > 0:
            with torch.no_grad():
                forward()
        forward().backward()
        model.zero_grad(set_to_none=True)

    return step


def script_step(script: str, args: Namespace) -> ScriptResult:
    """``bench/<script> --full-length`` at ``args``' shape, in its own process (so RSS is its own)."""
    return run_step_script(script, [
        "--full-length", "--prompts", str(args.prompts), "--generations", str(args.generations),
        "--max-new-tokens", str(args.max_new_tokens), "--beta", str(args.beta), "--steps", str(args.steps),
        "--threads", str(args.threads), *(["--shape", args.shape] if args.shape else []),
    ])


def main() -> None:
    args = parse_args()
    scripts = {"mmgrpo": "grpo_step.py", **({"trl": "trl_grpo_step.py"} if args.trl else {})}
    trainers = ["mmgrpo", "floor", *(["trl"] if args.trl else [])]
    results = {shape: {name: [] for name in trainers} for shape in args.shapes}
    peak_rss = {shape: {name: [] for name in scripts} for shape in args.shapes}
    with tempfile.TemporaryDirectory(prefix="mmgrpo-floor-") as work:
        for repeat in range(args.repeats):
            for shape in args.shapes:
                settings = shape_args(shape, args)
                for name, script in scripts.items():
                    result = script_step(script, settings)
                    results[shape][name].append(result.seconds)
                    peak_rss[shape][name].append(result.peak_rss_mib)
                inputs = build_inputs(settings, Path(work) / shape)
                results[shape]["floor"].append(median_seconds(floor_step(inputs, settings), args.steps))
                timings = ", ".join(f"{name} {times[-1]:.3f} s" for name, times in results[shape].items())
                print(f"round {repeat + 1}: {shape}: {timings}", flush=True)
    print(f"\n| P x G x T (beta {args.beta}) | " + " | ".join(trainers) + " | mmgrpo / floor |"
          + (" TRL / floor | mmgrpo / TRL |" if args.trl else ""))
    print("|---|" + "---|" * (len(trainers) + (3 if args.trl else 1)))
    for shape, times in results.items():
        median = {name: statistics.median(values) for name, values in times.items()}
        cells = [f"{median[name]:.3f} s ({min(times[name]):.3f}-{max(times[name]):.3f})" for name in trainers]
        ratios = [median["mmgrpo"] / median["floor"]]
        if args.trl:
            ratios += [median["trl"] / median["floor"], median["mmgrpo"] / median["trl"]]
        print(f"| {shape} | " + " | ".join(cells) + " | " + " | ".join(f"{r:.2f}x" for r in ratios) + " |")
    print("\npeak RSS (MiB, median over rounds): " + "; ".join(
        f"{shape} " + ", ".join(f"{name} {statistics.median(values):.0f}" for name, values in rows.items())
        for shape, rows in peak_rss.items()))


if __name__ == "__main__":
    main()
