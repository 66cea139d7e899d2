"""Bad media and overlong prompts never crash SFT, GRPO or eval: each row is skipped, counted and named."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import torch

from eval import EvalOptions, evaluate_policy
from mmgrpo.skipped_rows import LEDGER_FILE, SkipLedger
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.pipeline import run_training
from mmgrpo.inputs import generate_dataset, load_samples, media_budgets, task_model_info
from mmgrpo.trainer.setup import build_engine
from mmgrpo.trainer.sft import SFTExample, reference_examples, run_sft
from mmgrpo.types import Sample

from tests.training import DENSE_REWARD, build_trainer_inputs

LONG_QUESTION = "How many objects are there? " * 1800  # ~50k characters


def with_image(sample: Sample, path: Path) -> Sample:
    """``sample`` with every image reference replaced by ``path``."""
    messages = [
        {**message, "content": [
            {**part, "image": str(path)} if part.get("type") == "image" else part for part in message["content"]
        ]}
        for message in sample.messages
    ]
    return dataclasses.replace(sample, messages=messages)


def with_question(sample: Sample, text: str) -> Sample:
    """``sample`` with its text parts replaced by ``text``."""
    messages = [
        {**message, "content": [
            {**part, "text": text} if part.get("type") == "text" else part for part in message["content"]
        ]}
        for message in sample.messages
    ]
    return dataclasses.replace(sample, messages=messages)


def ledger_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / LEDGER_FILE).read_text().splitlines()]


def test_grpo_step_goes_on_without_a_bad_file_names_it_and_never_draws_it_again(small_config, tmp_path, bad_images):
    config = small_config("data.shuffle=false", "train.steps=1", DENSE_REWARD)  # the first step draws prompts 0..3
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    bad = train_set.samples[1] = with_image(train_set.samples[1], bad_images["truncated_jpeg"])
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    before = {name: value.clone() for name, value in model.named_parameters()}

    metrics = trainer.step()

    assert metrics["groups"] == 3 and metrics["dropped_prompts"] == 1
    assert any(not torch.equal(before[name], value) for name, value in model.named_parameters())  # it trained
    (row,) = ledger_rows(run_dir)
    assert row == {
        "row_id": bad.id, "source": str(bad_images["truncated_jpeg"]), "reason": "corrupt media",
        "detail": row["detail"], "split": "train", "stage": "grpo",
    }
    assert "truncated" in row["detail"]
    drawn = trainer.drawer.take(2 * len(train_set.samples))  # two epochs: every other prompt, never the bad one
    assert bad.id not in {sample.id for sample in drawn}
    assert {sample.id for sample in drawn} == {sample.id for sample in train_set.samples} - {bad.id}
    restored = GRPOTrainer(  # a resumed run knows the skipped prompt from the checkpoint alone
        config, run_dir, model, processor, train_set, resume_from=trainer.save(), skip_ledger=SkipLedger()
    )
    assert restored.drawer.skipped_ids == {bad.id}


def test_grpo_steps_whose_single_prompt_is_too_long_are_skipped_with_a_warning(small_config, tmp_path, caplog):
    config = small_config(
        "rollout.prompts_per_step=1", "train.micro_batch_size=4", "data.max_prompt_tokens=8", "train.steps=2"
    )
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    before = {name: value.clone() for name, value in model.named_parameters()}

    trainer.train()

    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(row["step"], row["groups"], row["dropped_prompts"]) for row in metrics] == [(1, 0.0, 1.0), (2, 0.0, 1.0)]
    assert all(torch.equal(before[name], value) for name, value in model.named_parameters())  # nothing to train on
    rows = ledger_rows(run_dir)
    assert [(row["reason"], row["stage"]) for row in rows] == [("prompt too long", "grpo")] * 2
    assert all("> max_prompt_len=8" in row["detail"] for row in rows)
    assert "skipped 1 prompt(s)" in caplog.text


def test_sft_skips_an_overlong_and_a_corrupt_example_and_trains_on_the_rest(small_config, tmp_path, bad_images):
    config = small_config("sft.steps=3", "sft.batch_size=4", "sft.micro_batch_size=2", "data.max_prompt_tokens=256")
    model, processor, train_set = build_trainer_inputs(config, tmp_path / "run")
    examples = reference_examples(train_set.samples[:6], train_set.tasks)
    corrupt, overlong = examples[0].sample, examples[1].sample
    examples[0] = SFTExample(with_image(corrupt, bad_images["corrupt_png"]), examples[0].completion)
    examples[1] = SFTExample(with_question(overlong, LONG_QUESTION), examples[1].completion)
    ledger = SkipLedger(tmp_path / LEDGER_FILE)

    history = run_sft(
        model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=0,
        progress_bar=False, max_prompt_len=config.data.max_prompt_tokens, skip_ledger=ledger,
    )

    assert len(history) == 3 and all(math.isfinite(row["sft/loss"]) for row in history)
    assert {(row.row_id, row.reason, row.stage) for row in ledger.records} == {
        (corrupt.id, "corrupt media", "sft"), (overlong.id, "prompt too long", "sft"),
    }
    assert len(ledger_rows(tmp_path)) == 2  # drawn again in later steps, recorded once


def test_eval_skips_a_corrupt_item_and_a_batch_of_overlong_prompts(small_config, tmp_path, bad_images):
    config = small_config()
    model, processor, _ = build_trainer_inputs(config, tmp_path / "run")
    test_set = load_samples(
        config.data.test, config.task, Path(config.data.dir), seed=config.data.seed,
        model=task_model_info(config.model, config.model.name_or_path),
    )
    items = test_set.samples[:3]
    items[1] = with_image(items[1], bad_images["truncated_jpeg"])
    options = EvalOptions(samples=1, temperature=0.0, batch_size=3, max_new_tokens=4, progress=False)

    result = evaluate_policy(build_engine(config, model, processor), items, test_set.tasks, options)

    assert [item.sample_id for item in result.items] == [items[0].id, items[2].id]
    assert [(row.row_id, row.reason, row.source) for row in result.skipped] == [
        (items[1].id, "corrupt media", str(bad_images["truncated_jpeg"]))
    ]

    one_by_one = dataclasses.replace(options, batch_size=1)
    short_limit = build_engine(small_config("data.max_prompt_tokens=8"), model, processor)
    result = evaluate_policy(short_limit, items[:2], test_set.tasks, one_by_one)
    assert result.items == []
    assert [(row.row_id, row.reason) for row in result.skipped] == [
        (items[0].id, "prompt too long"), (items[1].id, "corrupt media")
    ]


def test_run_writes_every_skipped_row_of_both_splits_to_the_ledger_summary_and_report(small_config, bad_images):
    config = small_config(
        "data.shuffle=false", "train.steps=1", "eval.limit=4", "sft.enabled=true", "sft.steps=1",
        "sft.batch_size=32", "sft.micro_batch_size=8",  # one SFT step over every training row
    )
    dataset = generate_dataset(config.data.train[0], Path(config.data.dir), seed=config.data.seed)
    seeded = {}  # (split, row id) -> reason
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (dataset / f"{split}.jsonl").read_text().splitlines()]
        for row, (name, reason) in zip(rows, [("truncated_jpeg", "corrupt media"), ("tall", "bad media shape")]):
            shutil.copyfile(bad_images[name], dataset / row["image"])
            seeded[split, row["id"]] = reason

    summary = run_training(config)

    run_dir = Path(config.log.output_dir) / config.log.run_name
    rows = ledger_rows(run_dir)
    assert {(row["split"], row["row_id"]): row["reason"] for row in rows} == seeded
    assert {(row["split"], row["reason"]): row["stage"] for row in rows} == {
        ("train", "bad media shape"): "load", ("test", "bad media shape"): "load",
        ("train", "corrupt media"): "sft", ("test", "corrupt media"): "eval",
    }
    assert summary["skipped_rows"] == 4
    assert summary["skipped_rows_by_reason"] == {
        "train/bad media shape": 1, "test/bad media shape": 1, "train/corrupt media": 1, "test/corrupt media": 1,
    }
    report = (run_dir / "report.md").read_text()
    assert "## Skipped rows" in report and all(row_id in report for _, row_id in seeded)

