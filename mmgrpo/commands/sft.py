"""``mmgrpo sft [recipe] [key=value ...] --out DIR``: cold-start supervised fine-tuning, completion-only loss.

Trains on ``--data`` JSON-lines files (``mmgrpo reject`` output: prompt messages + completion),
or on the task's reference completions of ``data.train`` when none is given, and saves the
model with ``save_pretrained`` to ``--out``.
"""

from __future__ import annotations

import argparse
import sys

from mmgrpo.commands.config import split_recipe


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name (model, data, sft sections are used)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. sft.steps=200")
    parser.add_argument("--data", action="append", default=[], metavar="FILE", help="SFT JSON-lines file (repeatable)")
    parser.add_argument("--out", required=True, help="folder the fine-tuned model is saved to")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from mmgrpo.config import ConfigError, load_config
    from mmgrpo.trainer.pipeline import RunPaths, seed_everything
    from mmgrpo.trainer.setup import load_policy, load_samples, media_budgets, pick_device, resolve_model_path
    from mmgrpo.trainer.sft import load_sft_file, reference_examples, run_sft

    recipe, overrides = split_recipe(args.recipe, args.overrides)
    try:
        config = load_config(recipe, overrides)
    except ConfigError as error:
        print(f"mmgrpo sft: {error}", file=sys.stderr)
        return 2
    seed_everything(config.seed)
    paths = RunPaths.for_config(config)
    model, processor = load_policy(
        config, resolve_model_path(config.model, paths.shared / "models", config.seed), pick_device(config.train.device)
    )
    data_files = args.data or [spec.path for spec in config.sft.data]
    if data_files:
        examples = [example for path in data_files for example in load_sft_file(path)]
    else:
        data_dir = Path(config.data.dir) if config.data.dir else paths.shared / "data"
        train_set = load_samples(config.data.train, config.task, data_dir, seed=config.data.seed)
        examples = reference_examples(train_set.samples, train_set.tasks)
    history = run_sft(
        model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=config.seed,
        progress_bar=config.log.progress_bar,
    )
    model.save_pretrained(args.out)
    processor.save_pretrained(args.out)
    print(f"SFT: {len(examples)} examples, {len(history)} steps, final loss {history[-1]['sft/loss']:.4f}; saved to {args.out}")
    return 0
