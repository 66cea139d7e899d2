"""GRPO step time of TRL's GRPOTrainer on the tiny Qwen2.5-VL (CPU), the peer of ``bench/grpo_step.py``.

Not a test. Same tiny model, same clevr_count prompts (chat messages with the image,
resized to mmgrpo's pixel budget), same P, G, max_new_tokens, temperature 1.0, beta,
lr (constant), fp32, no gradient checkpointing, and the same weighted rewards (the task's
``format`` + ``count_accuracy``, through TRL's reward-callable signature). One optimizer
step per generation batch of P x G completions. Prints the median step time, its split
(rollout = generation + scoring, reference = reference log-probs, update = the rest of
the step), completion tokens/s and the mean completion length.

Needs TRL (``pip install -e ".[bench]"``); exits with a message when it is missing.

    python3 bench/trl_grpo_step.py [--prompts 1] [--generations 8] [--max-new-tokens 32]
        [--beta 0.04] [--steps 5] [--warmup 1] [--threads 1]
"""

from __future__ import annotations

import functools
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from step_setup import BenchInputs, StepRecord, build_inputs, parse_args, print_summary

from mmgrpo.inputs import media_budgets
from mmgrpo.trainer.setup import scoring_rule
from mmgrpo.types import Sample
from processors.image import load_image
from tasks.scoring import score_completions

try:
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer
except ImportError as missing:
    sys.exit(f"bench/trl_grpo_step.py needs TRL ({missing}); install it with: pip install -e '.[bench]'")


def trl_dataset(inputs: BenchInputs) -> Dataset:
    """One row per prompt: TRL's conversational prompt with an image placeholder, the image, the sample index."""
    budget = media_budgets(inputs.config.model, inputs.processor)["image"]
    rows = []
    for index, sample in enumerate(inputs.train_set.samples):
        (message,) = sample.messages  # one user turn: [image, question]
        image_part, text_part = message["content"]
        rows.append({
            "prompt": [{"role": "user", "content": [{"type": "image"}, text_part]}],
            "image": load_image(image_part["image"], budget),
            "sample_index": index,
        })
    return Dataset.from_list(rows)


def trl_reward(name: str, options: dict[str, Any], samples: list[Sample]) -> Callable[..., list[float | None]]:
    """mmgrpo reward ``name`` as a TRL reward function (completions as chat messages, extra columns as lists)."""

    def reward(completions: list[list[dict[str, str]]], sample_index: list[int], **_: Any) -> list[float | None]:
        texts = [completion[0]["content"] for completion in completions]
        breakdown = score_completions(texts, [samples[i] for i in sample_index], {name: 1.0},
                                      reward_options={name: options} if options else None)
        return breakdown.components[name]

    reward.__name__ = name  # TRL names the reward's metrics after it
    return reward


class StepTimer(TrainerCallback):
    """Wall time per phase of each optimizer step (TRL generates inside the step) and its mean completion length."""

    def __init__(self, phase_seconds: dict[str, float]) -> None:
        self.phase_seconds = phase_seconds  # filled by the timed trainer methods during a step
        self.step_seconds: list[dict[str, float]] = []
        self.mean_lengths: list[float] = []
        self.started = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.phase_seconds.clear()
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        total = time.perf_counter() - self.started
        scored, reference = self.phase_seconds["generate_and_score"], self.phase_seconds["reference"]
        self.step_seconds.append(
            {"step": total, "rollout": scored - reference, "reference": reference, "update": total - scored}
        )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "completions/mean_length" in logs:
            self.mean_lengths.append(logs["completions/mean_length"])

    def records(self, completions_per_step: int) -> list[StepRecord]:
        return [
            StepRecord(seconds, completion_tokens=length * completions_per_step, completions=completions_per_step)
            for seconds, length in zip(self.step_seconds, self.mean_lengths, strict=True)
        ]


def time_method(obj: Any, name: str, bucket: str, seconds: dict[str, float], when: Callable[..., bool]) -> None:
    """Wrap ``obj.name`` so calls for which ``when(*args)`` holds add their wall time to ``seconds[bucket]``."""
    method = getattr(obj, name)

    @functools.wraps(method)
    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            if when(*args):
                seconds[bucket] += time.perf_counter() - started

    setattr(obj, name, timed)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renamed-option notices
    if args.no_group_shared:
        sys.exit("--no-group-shared is an mmgrpo option; TRL always encodes each completion's prompt anew")
    if args.video_frames:
        sys.exit("--video-frames is an mmgrpo option: the TRL step here builds image prompts only")
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as work:
        inputs = build_inputs(args, Path(work))
        scoring = scoring_rule(inputs.config, next(iter(inputs.train_set.tasks.values())))
        rollout = inputs.config.rollout
        batch = args.prompts * args.generations
        config = GRPOConfig(
            output_dir=str(Path(work) / "trl"), max_steps=args.warmup + args.steps, seed=0, use_cpu=True,
            per_device_train_batch_size=batch, gradient_accumulation_steps=1, num_generations=args.generations,
            max_completion_length=args.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p,
            top_k=rollout.top_k, beta=args.beta, learning_rate=inputs.config.train.lr, lr_scheduler_type="constant",
            weight_decay=inputs.config.train.weight_decay, max_grad_norm=inputs.config.train.max_grad_norm,
            reward_weights=list(scoring.weights.values()), bf16=False,
            gradient_checkpointing=args.gradient_checkpointing,
            logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
            generation_kwargs={"min_new_tokens": args.max_new_tokens} if args.full_length else None,
        )
        samples = inputs.train_set.samples
        rewards = [trl_reward(name, scoring.reward_options.get(name, {}), samples) for name in scoring.weights]
        phase_seconds: dict[str, float] = defaultdict(float)
        timer = StepTimer(phase_seconds)
        trainer = GRPOTrainer(
            model=inputs.model, reward_funcs=rewards, args=config, train_dataset=trl_dataset(inputs),
            processing_class=inputs.processor, callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # it would print every step's logs
        time_method(trainer, "_generate_and_score_completions", "generate_and_score", phase_seconds, lambda *_: True)
        time_method(trainer, "_get_per_token_logps_and_entropies", "reference", phase_seconds,
                    lambda model, *_: model is trainer.ref_model)
        trainer.train()
    print_summary("TRL GRPOTrainer", args, timer.records(batch)[args.warmup :])


if __name__ == "__main__":
    main()
