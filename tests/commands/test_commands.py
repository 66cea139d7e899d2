"""``mmgrpo sft``, ``mmgrpo reject`` and the ``mmgrpo train`` pipeline end to end on the tiny Qwen2.5-VL."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from mmgrpo.cli import main
from mmgrpo.config import Config, load_config
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.train_batch import pad_completions
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.trainer.pipeline import run_training
from mmgrpo.inputs import generate_dataset, load_samples, media_budgets, task_model_info
from mmgrpo.trainer.sft import SFTExample, completion_token_ids, load_sft_file, reference_examples

# A reward that about half of a random model's completions earn, decided by the text alone,
# so a test can check every kept row independently of the command that kept it.
ODD_LENGTH_PLUGIN = '''
from tasks import register_reward

@register_reward("odd_length")
def odd_length(completions, **_):
    return [float(len(text) % 2) for text in completions]
'''

SFT_OPTIONS = ("sft.steps=6", "sft.batch_size=8", "sft.micro_batch_size=8", "sft.lr=0.003")


@pytest.fixture(scope="session")
def odd_length_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plugin = tmp_path_factory.mktemp("plugins") / "odd_length_reward.py"
    plugin.write_text(ODD_LENGTH_PLUGIN)
    return plugin


@pytest.fixture()
def recipe_file(small_config, tmp_path: Path):
    """``recipe_file(*overrides) -> Path``: the small test config written as a recipe the CLI reads."""

    def write(*overrides: str) -> Path:
        path = tmp_path / "recipe.yaml"
        small_config("data.train.0.recipe_args={n: 15, test_fraction: 0.2}", *overrides).save_yaml(path)
        return path

    return write


@torch.no_grad()
def completion_nll(model_dir: str | Path, examples: Sequence[SFTExample], config: Config) -> float:
    """Mean negative log-likelihood per target token (completion + end of turn) of ``examples`` under a saved model."""
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    targets = completion_token_ids(processor, model, [example.completion for example in examples])
    prompts = build_prompt_batch(
        processor, [example.sample for example in examples], media_budgets(config.model, processor),
        family=model.config.model_type,
    )
    logp, _ = completion_logprobs(model, prompts, targets, [1] * len(targets), micro_batch_size=len(targets))  # [N, Tc]
    _, mask = pad_completions(targets, pad_token_id=0)  # [N, Tc]
    return float(-(logp * mask).sum() / mask.sum())


def test_sft_command_trains_and_saves_a_loadable_model(recipe_file, tiny_qwen25vl: Path, tmp_path: Path):
    recipe = recipe_file(*SFT_OPTIONS)
    out = tmp_path / "sft-model"
    assert main(["sft", str(recipe), "--out", str(out)]) == 0

    config = load_config(recipe)
    train_set = load_samples(config.data.train, config.task, Path(config.data.dir), seed=config.data.seed,
                             model=task_model_info(config.model, config.model.name_or_path))
    examples = reference_examples(train_set.samples, train_set.tasks)
    assert len(examples) == 12
    before, after = completion_nll(tiny_qwen25vl, examples, config), completion_nll(out, examples, config)
    assert after < 0.8 * before, f"SFT did not lower the loss on its data: {before:.3f} -> {after:.3f}"


def test_reject_keeps_only_rewarded_completions_and_sft_trains_on_them(
    recipe_file, odd_length_plugin: Path, tiny_qwen25vl: Path, tmp_path: Path
):
    recipe = recipe_file(
        f"task.reward_plugins=[{odd_length_plugin}]", "task.rewards={odd_length: 1.0}", "rollout.max_new_tokens=8",
        *SFT_OPTIONS,
    )
    kept_file = tmp_path / "kept.jsonl"
    assert main(["reject", str(recipe), "--out", str(kept_file), "--threshold", "1.0", "--keep", "4"]) == 0

    rows = [json.loads(line) for line in kept_file.read_text().splitlines()]
    assert len(rows) >= 6, f"too few kept rows to train on: {len(rows)}"
    for row in rows:
        assert row["reward"] >= 1.0 and row["rewards"]["odd_length"] == 1.0 and row["tools"] == []
        assert len(row["completion"]) % 2 == 1, row["completion"]
    per_prompt = Counter(row["id"] for row in rows)
    assert max(per_prompt.values()) <= 4
    assert len({(row["id"], row["completion"]) for row in rows}) == len(rows)  # distinct within a prompt

    out = tmp_path / "sft-on-kept"
    assert main(["sft", str(recipe), "--data", str(kept_file), "--out", str(out)]) == 0
    examples, config = load_sft_file(kept_file), load_config(recipe)
    before, after = completion_nll(tiny_qwen25vl, examples, config), completion_nll(out, examples, config)
    assert after < 0.8 * before, f"SFT on the kept rows did not lower their loss: {before:.3f} -> {after:.3f}"

    from_config = tmp_path / "sft-on-kept-from-config"  # the same file named by sft.data instead of --data
    assert main(["sft", str(recipe), f"sft.data=[{{path: {kept_file}}}]", "--out", str(from_config)]) == 0
    trained, again = (AutoModelForImageTextToText.from_pretrained(p).state_dict() for p in (out, from_config))
    assert all(torch.equal(trained[name], again[name]) for name in trained)


def test_run_training_writes_every_run_output(small_config):
    config = small_config(
        "train.steps=2", "eval.limit=8", "sft.enabled=true", "sft.steps=2", "sft.batch_size=8",
        "sft.micro_batch_size=8",
    )
    summary = run_training(config)
    run_dir = Path(config.log.output_dir) / config.log.run_name

    assert load_config(run_dir / "config.yaml") == config
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert {"accuracy_before_grpo", "accuracy_after_grpo", "n_eval", "wall_seconds"} <= set(summary)
    assert summary["n_eval"] == 8 and summary["grpo_steps"] == 2 and summary["wall_seconds"] > 0
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in metrics] == [1, 2]
    assert (run_dir / "sft" / "metrics.jsonl").is_file()

    for tag, key in (("before", "accuracy_before_grpo"), ("after", "accuracy_after_grpo")):
        results = json.loads((run_dir / "eval" / tag / "results.json").read_text())
        assert results["models"][tag]["summary"]["accuracy"] == summary[key]
        assert (run_dir / "eval" / tag / "samples.jsonl").is_file()

    report = (run_dir / "report.md").read_text()
    plots = re.findall(r"\]\((plots/[^)]+\.png)\)", report)
    assert "plots/reward_total.png" in plots
    assert all((run_dir / plot).is_file() for plot in plots)
    assert "before GRPO" in report and "after GRPO" in report


def test_reject_names_the_rows_it_could_not_sample(recipe_file, odd_length_plugin: Path, tmp_path: Path, bad_images):
    recipe = recipe_file(f"task.reward_plugins=[{odd_length_plugin}]", "task.rewards={odd_length: 1.0}")
    config = load_config(recipe)
    dataset = generate_dataset(config.data.train[0], Path(config.data.dir), seed=config.data.seed)
    rows = [json.loads(line) for line in (dataset / "train.jsonl").read_text().splitlines()]
    shutil.copyfile(bad_images["truncated_jpeg"], dataset / rows[0]["image"])  # passes the header check
    kept_file = tmp_path / "kept.jsonl"
    assert main(["reject", str(recipe), "--out", str(kept_file), "--threshold", "0.0"]) == 0

    [skipped] = [json.loads(line) for line in (tmp_path / "kept.skipped_rows.jsonl").read_text().splitlines()]
    assert (skipped["row_id"], skipped["reason"], skipped["stage"]) == (rows[0]["id"], "corrupt media", "reject")
    assert rows[0]["id"] not in {json.loads(line)["id"] for line in kept_file.read_text().splitlines()}


def test_a_generated_dataset_is_made_again_when_a_default_or_the_generator_code_changes(tmp_path, monkeypatch):
    """Its folder is named by every recipe option (defaults included) and the generation code,
    not only by the options the config sets: a stale folder would silently train on old data."""
    import dataclasses

    from data_recipes import make
    from data_recipes.generators import GENERATORS
    from data_recipes.generators.arithmetic import Arithmetic
    from mmgrpo.config.schema import DatasetConfig

    spec = DatasetConfig(recipe="arithmetic", recipe_args={"n": 10})
    first = generate_dataset(spec, tmp_path, seed=0)
    assert generate_dataset(spec, tmp_path, seed=0) == first  # reused

    @dataclasses.dataclass(frozen=True)
    class WiderArithmetic(Arithmetic):
        max_answer: int = 30

    monkeypatch.setitem(GENERATORS._items, "arithmetic", WiderArithmetic)
    wider = generate_dataset(spec, tmp_path, seed=0)
    assert wider != first and (wider / "dataset_info.json").is_file()
    monkeypatch.undo()

    real_digest = make.generation_identity("arithmetic")["code"]
    # as if the generation code had changed: one more module's source in the digest
    monkeypatch.setattr(make, "_SHARED_GENERATION_MODULES", (*make._SHARED_GENERATION_MODULES, "json"))
    assert make.generation_identity("arithmetic")["code"] != real_digest
    assert generate_dataset(spec, tmp_path, seed=0) not in (first, wider)
