"""``mmgrpo reject [recipe] [key=value ...] --out FILE``: rejection sampling into an SFT dataset.

Samples ``rollout.num_generations`` completions of every ``data.train`` prompt with the
model of ``model.name_or_path``, keeps the best ``--keep`` distinct ones whose total reward
reaches ``--threshold``, and writes them as JSON lines for ``mmgrpo sft --data``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mmgrpo.commands.config import config_from_args


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name (model, data, task, rollout are used)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")
    parser.add_argument("--out", required=True, help="JSON-lines file to write")
    parser.add_argument("--threshold", type=float, default=1.0, help="minimum total reward of a kept completion")
    parser.add_argument("--keep", type=int, default=1, help="distinct completions kept per prompt at most")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per generate call")


def run(args: argparse.Namespace) -> int:
    config = config_from_args("reject", args.recipe, args.overrides)
    # heavy imports once the config is known good
    from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger, describe_skipped
    from mmgrpo.trainer.pipeline import load_run_policy
    from mmgrpo.trainer.reject import RejectionRule, rejection_sample, write_jsonl
    from mmgrpo.trainer.pipeline import base_model_path
    from mmgrpo.inputs import load_samples, task_model_info
    from mmgrpo.trainer.setup import build_engine, sampling_params, scoring_rule

    model, processor, paths = load_run_policy(config)
    policy_info = task_model_info(config.model, base_model_path(config, paths))
    train_set = load_samples(config.data.train, config.task, paths.data, seed=config.data.seed, model=policy_info,
                             tools=config.rollout.prompt_tools)
    scoring = {name: scoring_rule(config, task) for name, task in train_set.tasks.items()}
    rows, skipped = rejection_sample(
        build_engine(config, model, processor), train_set.samples, scoring, sampling_params(config, config.seed),
        RejectionRule(args.threshold, args.keep), batch_size=args.batch_size, progress_bar=config.log.progress_bar,
    )
    write_jsonl(rows, args.out)
    accepted = len({row["id"] for row in rows})
    print(f"kept {len(rows)} completions for {accepted}/{len(train_set.samples)} prompts -> {args.out}")
    ledger_path = Path(args.out).with_name(Path(args.out).stem + "." + LEDGER_FILE)
    ledger_path.unlink(missing_ok=True)  # this command's skips only, not a previous run's
    ledger = SkipLedger(ledger_path)
    ledger.add(train_set.skipped, split="train", stage="load")
    ledger.add(skipped, split="train", stage="reject")
    if ledger.records:
        print(f"skipped {len(ledger.records)} rows ({describe_skipped(ledger.records)}) -> {ledger_path}")
    return 0
