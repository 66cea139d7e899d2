"""``mmgrpo reject [recipe] [key=value ...] --out FILE``: rejection sampling into an SFT dataset.

Samples ``rollout.num_generations`` completions of every ``data.train`` prompt with the
model of ``model.name_or_path``, keeps the best ``--keep`` distinct ones whose total reward
reaches ``--threshold``, and writes them as JSON lines for ``mmgrpo sft --data``.
"""

from __future__ import annotations

import argparse
import sys

from mmgrpo.commands.config import split_recipe


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name (model, data, task, rollout are used)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides")
    parser.add_argument("--out", required=True, help="JSON-lines file to write")
    parser.add_argument("--threshold", type=float, default=1.0, help="minimum total reward of a kept completion")
    parser.add_argument("--keep", type=int, default=1, help="distinct completions kept per prompt at most")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts per generate call")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mmgrpo.config import ConfigError, load_config
    from mmgrpo.rollout.base import ENGINES, SamplingParams
    from mmgrpo.trainer.pipeline import RunPaths, seed_everything
    from mmgrpo.trainer.reject import RejectionRule, rejection_sample, write_jsonl
    from mmgrpo.trainer.setup import (
        load_policy, load_samples, media_budgets, pick_device, resolve_model_path, scoring_rule,
    )

    recipe, overrides = split_recipe(args.recipe, args.overrides)
    try:
        config = load_config(recipe, overrides)
    except ConfigError as error:
        print(f"mmgrpo reject: {error}", file=sys.stderr)
        return 2
    seed_everything(config.seed)
    paths = RunPaths.for_config(config)
    model, processor = load_policy(
        config, resolve_model_path(config.model, paths.shared / "models", config.seed), pick_device(config.train.device)
    )
    data_dir = Path(config.data.dir) if config.data.dir else paths.shared / "data"
    train_set = load_samples(config.data.train, config.task, data_dir, seed=config.data.seed)
    engine = ENGINES.get(config.rollout.engine)(
        model, processor, group_shared=config.train.group_shared_encoding,
        budgets=media_budgets(config.model, processor), max_prompt_len=config.data.max_prompt_tokens,
    )
    rollout = config.rollout
    params = SamplingParams(
        n=rollout.num_generations, temperature=rollout.temperature, top_p=rollout.top_p, top_k=rollout.top_k,
        max_new_tokens=rollout.max_new_tokens, seed=config.seed,
    )
    scoring = {name: scoring_rule(config, task) for name, task in train_set.tasks.items()}
    rows = rejection_sample(
        engine, train_set.samples, scoring, params, RejectionRule(args.threshold, args.keep),
        batch_size=args.batch_size, progress_bar=config.log.progress_bar,
    )
    write_jsonl(rows, args.out)
    accepted = len({row["id"] for row in rows})
    print(f"kept {len(rows)} completions for {accepted}/{len(train_set.samples)} prompts -> {args.out}")
    return 0
