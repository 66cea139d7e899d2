"""Non-finite media are skipped in every stage; a NaN loss stops a run with one line naming its rows."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from eval import EvalOptions, evaluate_policy
from mmgrpo.cli import main
from mmgrpo.config import load_config
from mmgrpo.failures import FAILURE_FILE
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.trainer.nonfinite import NonFiniteTrainingError
from mmgrpo.trainer.pipeline import run_training
from mmgrpo.inputs import generate_dataset, media_budgets
from mmgrpo.trainer.setup import build_engine
from mmgrpo.trainer.sft import SFTCheckpoints, reference_examples, run_sft

from tests.training import DENSE_REWARD, build_trainer_inputs
from tests.trainer.test_bad_rows import ledger_rows, with_image, with_question

POISON = " §"  # text only the poisoned example contains (its tokens are made NaN in training mode)


def poison_rows_with(model: torch.nn.Module, token_ids: Sequence[int], armed: Callable[[], bool] = lambda: True) -> None:
    """In training mode (and while ``armed()``), the input embeddings of every row holding one of
    ``token_ids`` become NaN: a forward whose loss is NaN on exactly those rows."""
    poisoned = torch.tensor(list(token_ids))

    def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        if not (module.training and armed()):
            return output
        rows = torch.isin(args[0], poisoned).any(-1)  # [B]
        output = output.clone()
        output[rows] = float("nan")
        return output

    model.get_input_embeddings().register_forward_hook(hook)


def seeded_dataset(config, folder_files: dict[str, Path]) -> dict[tuple[str, str], Path]:
    """The first row of each split of the config's generated dataset gets ``folder_files[split]`` as its image."""
    dataset = generate_dataset(config.data.train[0], Path(config.data.dir), seed=config.data.seed)
    seeded = {}
    for split, source in folder_files.items():
        first = json.loads((dataset / f"{split}.jsonl").read_text().splitlines()[0])
        shutil.copyfile(source, dataset / first["image"])
        seeded[split, first["id"]] = dataset / first["image"]
    return seeded


def test_a_run_skips_nan_images_in_sft_and_eval_naming_each(small_config, nonfinite_media):
    config = small_config(
        "data.shuffle=false", "train.steps=1", "eval.limit=4", "sft.enabled=true", "sft.steps=1",
        "sft.batch_size=32", "sft.micro_batch_size=8",  # one SFT step over every training row
    )
    seeded = seeded_dataset(config, {"train": nonfinite_media["nan_tiff"], "test": nonfinite_media["nan_tiff"]})

    summary = run_training(config)

    rows = ledger_rows(Path(config.log.output_dir) / config.log.run_name)
    assert {(row["split"], row["row_id"]): (row["reason"], row["stage"], row["source"]) for row in rows} == {
        ("train", row_id): ("non-finite media", "sft", str(path.resolve())) for (split, row_id), path in seeded.items()
        if split == "train"
    } | {
        ("test", row_id): ("non-finite media", "eval", str(path.resolve())) for (split, row_id), path in seeded.items()
        if split == "test"
    }
    assert summary["skipped_rows_by_reason"] == {"train/non-finite media": 1, "test/non-finite media": 1}


def test_grpo_and_eval_leave_out_nonfinite_media_and_never_draw_them_again(small_config, tmp_path, nonfinite_media):
    config = small_config("data.shuffle=false", "train.steps=1", DENSE_REWARD)
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    bad = train_set.samples[2] = with_image(train_set.samples[2], nonfinite_media["nan_tiff"])
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)

    metrics = trainer.step()

    assert metrics["groups"] == 3 and metrics["dropped_prompts"] == 1
    assert all(torch.isfinite(value).all() for value in model.parameters())
    (row,) = ledger_rows(run_dir)
    assert (row["row_id"], row["reason"], row["stage"]) == (bad.id, "non-finite media", "grpo")
    assert bad.id not in {sample.id for sample in trainer.drawer.take(2 * len(train_set.samples))}

    items = [bad, train_set.samples[0]]
    options = EvalOptions(samples=1, temperature=0.0, batch_size=2, max_new_tokens=4, progress=False)
    result = evaluate_policy(build_engine(config, model, processor), items, train_set.tasks, options)
    assert [item.sample_id for item in result.items] == [items[1].id]
    assert [(row.row_id, row.reason) for row in result.skipped] == [(bad.id, "non-finite media")]


def test_reject_skips_a_nan_image_row_and_names_it(small_config, tmp_path, nonfinite_media):
    config = small_config("data.train.0.recipe_args={n: 15, test_fraction: 0.2}")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    [(key, path)] = seeded_dataset(load_config(recipe), {"train": nonfinite_media["nan_tiff"]}).items()
    kept = tmp_path / "kept.jsonl"

    assert main(["reject", str(recipe), "--out", str(kept), "--threshold", "0.0"]) == 0

    [skipped] = [json.loads(line) for line in (tmp_path / "kept.skipped_rows.jsonl").read_text().splitlines()]
    assert (skipped["row_id"], skipped["reason"], skipped["stage"]) == (key[1], "non-finite media", "reject")


class ArmAfterFirstStep:
    """A metrics logger that arms the poison once step 1 is logged (so step 2 is the first to see NaN)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def __call__(self) -> bool:
        return bool(self.steps)

    def log(self, step: int, row: dict) -> None:
        self.steps.append(step)


def test_a_nan_loss_in_sft_names_the_micro_batch_rows_and_keeps_the_last_finished_step(small_config, tmp_path):
    config = small_config("sft.steps=3", "sft.batch_size=4", "sft.micro_batch_size=2")
    model, processor, train_set = build_trainer_inputs(config, tmp_path / "run")
    examples = reference_examples(train_set.samples[:4], train_set.tasks)  # every step: all four, two micro-batches
    poisoned = examples[3].sample = with_question(examples[3].sample, "How many objects are there?" + POISON)
    poison_ids = processor.tokenizer(POISON, add_special_tokens=False).input_ids
    arm = ArmAfterFirstStep()
    poison_rows_with(model, poison_ids, arm)
    checkpoints = tmp_path / "sft-checkpoints"

    with pytest.raises(NonFiniteTrainingError) as caught:
        run_sft(
            model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=0,
            progress_bar=False, metrics=arm, checkpoints=SFTCheckpoints(checkpoints),
        )

    error = caught.value
    assert (error.stage, error.step, error.quantity) == ("SFT", 2, "loss")
    assert poisoned.id in error.row_ids and len(error.row_ids) == 2  # its micro-batch, not the other one
    assert error.media[poisoned.id] == [str(Path(poisoned.media("image")[0]))]
    assert str(error).startswith("SFT step 2: the loss became nan on the rows ")
    assert poisoned.id in str(error) and "\n" not in str(error)
    assert [path.name for path in checkpoints.iterdir()] == ["step-1"]  # the last finished step
    assert all(torch.isfinite(value).all() for value in model.parameters())  # never stepped on NaN


def test_a_nan_loss_in_grpo_stops_before_the_update_naming_the_group_and_saves_the_last_step(small_config, tmp_path):
    config = small_config("train.steps=3", "train.micro_batch_size=4", DENSE_REWARD)  # a micro-batch = one group
    run_dir = tmp_path / "run"
    model, processor, train_set = build_trainer_inputs(config, run_dir)
    trainer = GRPOTrainer(config, run_dir, model, processor, train_set)
    arm = ArmAfterFirstStep()
    log = trainer.metrics.log
    trainer.metrics.log = lambda step, row: (arm.log(step, row), log(step, row))
    everything = torch.arange(model.get_input_embeddings().num_embeddings).tolist()
    poison_rows_with(model, everything, arm)  # every training forward of step 2 (rollouts run in eval mode)
    weights_after_step_1: dict[str, torch.Tensor] = {}
    save = trainer.save
    trainer.save = lambda **kw: (weights_after_step_1.update({k: v.clone() for k, v in model.state_dict().items()}),
                                 save(**kw))[1]

    with pytest.raises(NonFiniteTrainingError) as caught:
        trainer.train()

    error = caught.value
    assert (error.stage, error.step, error.quantity) == ("GRPO", 2, "loss")
    assert len(error.row_ids) == 1 and error.row_ids[0] in {sample.id for sample in train_set.samples}
    assert error.media[error.row_ids[0]][0].endswith(".png")
    assert [path.name for path in (run_dir / "checkpoints").iterdir()] == ["step-1"]
    for name, value in model.state_dict().items():  # no update with NaN: the weights of step 1
        assert torch.equal(value, weights_after_step_1[name]), name


def test_train_command_prints_one_line_naming_the_rows_and_keeps_the_traceback_in_the_log(
    small_config, tmp_path, capsys, tiny_qwen25vl
):
    poisoned = tmp_path / "nan-model"
    shutil.copytree(tiny_qwen25vl, poisoned)
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(poisoned)
    with torch.no_grad():
        model.get_input_embeddings().weight.fill_(float("nan"))  # every row's loss is NaN
    model.save_pretrained(poisoned)
    config = small_config(f"model.name_or_path={poisoned}", "sft.enabled=true", "sft.steps=2", "sft.batch_size=4",
                          "sft.micro_batch_size=2", "eval.before=false", "eval.after=false")
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)
    capsys.readouterr()  # the poisoning's own loading and writing bars (shown unless an earlier test hid them)

    code = main(["train", str(recipe)])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 1 and err[0].startswith("mmgrpo train: error: SFT step 1: the loss became nan on the rows ")
    assert "Traceback" not in "\n".join(err)
    run_dir = Path(config.log.output_dir) / config.log.run_name
    assert "Traceback" in (run_dir / "train.log").read_text()
    failure = json.loads((run_dir / FAILURE_FILE).read_text())
    assert failure["stage"] == "SFT" and len(failure["rows"]) == 2
    assert all(row["id"] in err[0] and row["media"][0] in err[0] for row in failure["rows"])
    report = (run_dir / "report.html").read_text()
    assert "stopped:" in report and failure["rows"][0]["id"] in report


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nonfinite_gradient_with_a_finite_loss_is_refused_before_the_optimizer_steps(bad):
    from mmgrpo.trainer.backends import OptimizerSpec, SingleProcessBackend

    model = torch.nn.Linear(3, 2)
    backend = SingleProcessBackend(model, OptimizerSpec(lr=0.1, weight_decay=0.0, total_steps=4))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    backend.backward(model(torch.ones(1, 3)).sum())
    model.weight.grad[0, 0] = bad

    with pytest.raises(NonFiniteTrainingError, match="the gradient norm became"):
        backend.step()

    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    assert backend.scheduler.last_epoch == 0  # no optimizer step counted: the last finished step is intact
