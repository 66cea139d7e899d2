"""``mmgrpo sft [recipe] [key=value ...] --out DIR``: cold-start supervised fine-tuning, completion-only loss.

Trains on ``--data`` JSON-lines files (``mmgrpo reject`` output: prompt messages + completion),
else on ``sft.data``, else on the task's reference completions of ``data.train``, and saves
the model with ``save_pretrained`` to ``--out``. It checkpoints under ``--out``/checkpoints every
``checkpoint.every_n_steps`` steps and when stopped; ``--resume`` continues from the newest (the checkpoints go
once the model is saved). Under ``torchrun`` it trains on every rank through
``train.backend`` (each rank on its share of every batch, as the cold start of ``mmgrpo train`` does); the main
process saves.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from pathlib import Path

from mmgrpo.commands.config import config_from_args
from mmgrpo.config import DatasetConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", nargs="?", help="YAML file or recipe name (model, data, sft sections are used)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, e.g. sft.steps=200")
    parser.add_argument("--data", action="append", default=[], metavar="FILE", help="SFT JSON-lines file (repeatable)")
    parser.add_argument("--out", required=True, help="folder the fine-tuned model is saved to")
    parser.add_argument("--resume", action="store_true", help="continue the SFT stopped in --out from its checkpoint")


def run(args: argparse.Namespace) -> int:
    config = config_from_args("sft", args.recipe, args.overrides)
    if args.data:  # recorded in the run's config like sft.data, so a resume checks them
        config = dataclasses.replace(config, sft=dataclasses.replace(
            config.sft, data=[DatasetConfig(path=str(Path(file).resolve())) for file in args.data]))
    out = Path(args.out)
    # heavy imports once the config is known good
    from mmgrpo.distributed import Ranks
    from mmgrpo.models.prompt_cache import open_prompt_cache
    from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger
    from mmgrpo.trainer.checkpoint import write_model
    from mmgrpo.trainer.interrupts import exit_code, signal_name
    from mmgrpo.trainer.pipeline import base_model_path, load_run_policy, sft_backend, sft_checkpoints
    from mmgrpo.trainer.resume import CHECKPOINTS, SFT_RUN_CONFIG, plan_sft_resume
    from mmgrpo.inputs import load_samples, media_budgets, task_model_info
    from mmgrpo.trainer.setup import demonstrator
    from mmgrpo.trainer.sft import run_sft, sft_examples

    resume_from = plan_sft_resume(config, out, args.resume)
    ranks = Ranks.join(config.train.collective_timeout_s)  # under torchrun: every rank trains on its share
    main = ranks.is_main_process
    if main and resume_from is None:
        config.save_yaml(out / SFT_RUN_CONFIG)
    model, processor, paths = load_run_policy(config, checkpoint=resume_from)
    files = [spec.path for spec in config.sft.data]
    train_set = None if files else load_samples(
        config.data.train, config.task, paths.data, seed=config.data.seed,
        model=task_model_info(config.model, base_model_path(config, paths)), tools=config.rollout.prompt_tools,
    )
    examples = sft_examples(files, train_set)
    ledger = SkipLedger(out / LEDGER_FILE if main else None)
    ledger.add(train_set.skipped if train_set else [], split="train", stage="load")
    backend = sft_backend(config, model, ranks)
    try:
        history = run_sft(
            model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=config.seed,
            progress_bar=config.log.progress_bar and main, max_prompt_len=config.data.max_prompt_tokens,
            skip_ledger=ledger, checkpoints=sft_checkpoints(config, out / CHECKPOINTS), resume_from=resume_from,
            cache=open_prompt_cache(config), backend=backend, demonstrate=demonstrator(config, model, processor),
        )
    except KeyboardInterrupt as stop:
        print(f"mmgrpo sft: stopped by {signal_name(stop)}; continue with --out {out} --resume", file=sys.stderr)
        return exit_code(stop)
    weights = backend.full_state_dict() if backend is not None and backend.shards_weights else None
    if main:
        write_model(out, model, processor, weights)  # beside the skipped-rows ledger and the run's config
        shutil.rmtree(out / CHECKPOINTS, ignore_errors=True)  # superseded by the model
        final = f", final loss {history[-1]['sft/loss']:.4f}" if history else ""
        skipped = f"; {len(ledger.records)} rows skipped (see {ledger.path})" if ledger.records else ""
        where = f" on {ranks.world_size} ranks (train.backend={config.train.backend})" if backend is not None else ""
        print(f"SFT: {len(examples)} examples, {len(history)} steps{where}{final}; saved to {out}{skipped}")
    ranks.leave()
    return 0
