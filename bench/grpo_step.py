"""GRPO step time of mmgrpo's trainer on the tiny Qwen2.5-VL (CPU), split into rollout / reference / update.

Not a test: numbers depend on the machine and its load. Runs ``GRPOTrainer.step()``
at fixed P prompts x G completions and max_new_tokens on generated clevr_count prompts
and prints the median step time, its split (from the step's ``time/*`` metrics),
completion tokens/s and the mean completion length (a random tiny model stops at a
random EOS, so compare tokens/s, or step times at similar lengths).
``bench/trl_grpo_step.py`` times TRL's GRPOTrainer at the same settings.

    python3 bench/grpo_step.py [--prompts 1] [--generations 8] [--max-new-tokens 32]
        [--beta 0.04] [--steps 5] [--warmup 1] [--threads 1] [--no-group-shared] [--full-length]
        [--gradient-checkpointing] [--image-size 448]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from step_setup import StepRecord, build_inputs, parse_args, print_summary

from mmgrpo.trainer.grpo import GRPOTrainer

PHASES = ("rollout", "reference", "update")


def force_full_length(engine) -> None:  # noqa: ANN001 - the HF engine
    """The engine never samples a stop token, so every completion runs to ``max_new_tokens``."""
    engine.forbidden_token_ids = (*engine.forbidden_token_ids, *engine.eos_token_ids)
    engine.eos_token_ids = ()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory(prefix="mmgrpo-bench-") as work:
        inputs = build_inputs(args, Path(work))
        run_dir = Path(inputs.config.log.output_dir) / "bench"
        run_dir.mkdir(parents=True)
        trainer = GRPOTrainer(inputs.config, run_dir, inputs.model, inputs.processor, inputs.train_set,
                              reference_source=inputs.config.model.name_or_path)  # the KL reference (beta > 0)
        if args.full_length:
            force_full_length(trainer.rollout_source.engine)
        records = []
        for index in range(args.warmup + args.steps):
            metrics = trainer.step()
            trainer.step_index += 1
            if index >= args.warmup:
                records.append(StepRecord(
                    seconds={"step": metrics["time/step"], **{p: metrics[f"time/{p}"] for p in PHASES}},
                    completion_tokens=metrics["length/total"],
                    completions=args.prompts * args.generations,
                ))
    path = "plain per-sample" if args.no_group_shared else "group-shared"
    checkpointing = ", gradient checkpointing" if args.gradient_checkpointing else ""
    print_summary(f"mmgrpo GRPOTrainer ({path}{checkpointing})", args, records)


if __name__ == "__main__":
    main()
