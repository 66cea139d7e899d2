"""Issue 9's acceptance run: ``mmgrpo train`` over a dataset seeded with every kind of bad row,
with rewards that raise, return NaN and hang, finishes with exit 0 and names every fault.

Each bad row replaces a good row of the generated counting dataset in both splits; the
faulty rewards fail on completions chosen by their text, so every step meets some of them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmgrpo.cli import main
from mmgrpo.inputs import generate_dataset

FAULTY_REWARDS_PLUGIN = '''
import threading, time
from tasks import register_reward

_first_call = threading.Event()

@register_reward("raises_on_some")
def raises_on_some(completions, **_):
    if any(len(text) % 3 == 0 for text in completions):
        raise RuntimeError("deliberate failure")
    return [1.0 for _ in completions]

@register_reward("nan_on_some")
def nan_on_some(completions, **_):
    return [float("nan") if len(text) % 3 == 1 else 0.5 for text in completions]

@register_reward("hangs_once")
def hangs_once(completions, **_):
    if not _first_call.is_set():
        _first_call.set()
        time.sleep(3.0)
    return [0.0 for _ in completions]
'''

# bad file in the conftest ``bad_images`` / ``nonfinite_media`` fixtures -> the ledger reason its row must carry
BAD_FILES = {"truncated_jpeg": "corrupt media", "corrupt_png": "corrupt media", "tall": "bad media shape",
             "wide": "bad media shape", "nan_tiff": "non-finite media"}
# bad audio file in ``nonfinite_media`` -> the ledger reason
BAD_AUDIO = {"nan_wav": "non-finite media", "inf_wav": "non-finite media", "loud_wav": "non-finite media"}


def _seed_bad_rows(dataset: Path, bad_images: dict[str, Path]) -> dict[tuple[str, str], str]:
    """Overwrite good rows of both splits with bad ones; returns (split, row id) -> what is wrong."""
    seeded = {}
    for split in ("train", "test"):
        path = dataset / f"{split}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        victims = iter(rows)
        for name, reason in BAD_FILES.items():
            row = next(victims)
            row["image"] = f"media/bad-{split}-{name}{bad_images[name].suffix}"
            shutil.copyfile(bad_images[name], dataset / row["image"])
            seeded[split, row["id"]] = reason
        missing = next(victims)
        missing["image"] = "media/does-not-exist.png"
        seeded[split, missing["id"]] = "missing media"
        overlong = next(victims)
        overlong["problem"] = "How many objects are there? " * 400
        seeded[split, overlong["id"]] = "prompt too long"
        ambiguous = next(victims)
        ambiguous["answer"] = "<answer>3</answer><answer>4</answer>"
        seeded[split, ambiguous["id"]] = "answer"
        sixteen_bit = next(victims)  # a good row: 16-bit images are scaled, not skipped
        sixteen_bit["image"] = f"media/gray16-{split}.png"
        shutil.copyfile(bad_images["gray16"], dataset / sixteen_bit["image"])
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return seeded


@pytest.mark.slow
def test_a_run_over_bad_rows_and_faulty_rewards_finishes_and_names_every_fault(
    small_config, tmp_path: Path, bad_images: dict[str, Path], nonfinite_media: dict[str, Path],
    digit_reward_plugin: Path,
) -> None:
    plugin = tmp_path / "faulty_rewards.py"
    plugin.write_text(FAULTY_REWARDS_PLUGIN)
    config = small_config(
        f"task.reward_plugins=[{digit_reward_plugin}, {plugin}]",
        "task.rewards={share_of_threes: 1.0, raises_on_some: 0.1, nan_on_some: 0.1, hangs_once: 0.1}",
        "task.reward_timeout=1.0", "train.steps=20", "data.max_prompt_tokens=512",
        "sft.enabled=true", "sft.steps=2", "sft.batch_size=32", "sft.micro_batch_size=8",
        "eval.limit=40", "eval.batch_size=8", "checkpoint.every_n_steps=10",
        "data.train.0.recipe_args={n: 50, test_fraction: 0.2}",  # 10 test rows: 9 bad ones and a 16-bit one
        "data.test.0.recipe_args={n: 50, test_fraction: 0.2}",
    )
    dataset = generate_dataset(config.data.train[0], Path(config.data.dir), seed=config.data.seed)
    seeded = _seed_bad_rows(dataset, bad_images | nonfinite_media)
    recipe = tmp_path / "recipe.yaml"
    config.save_yaml(recipe)

    assert main(["train", str(recipe)]) == 0

    run_dir = Path(config.log.output_dir) / config.log.run_name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["grpo_steps"] == 20
    ledger = [json.loads(line) for line in (run_dir / "skipped_rows.jsonl").read_text().splitlines()]
    named = {(row["split"], row["row_id"]): row for row in ledger}
    assert set(seeded) <= set(named), f"not named: {sorted(set(seeded) - set(named))}"
    for key, reason in seeded.items():
        assert reason in json.dumps(named[key]), (key, named[key])
    failures = [json.loads(line) for line in (run_dir / "reward_errors.jsonl").read_text().splitlines()]
    kinds = {(row["reward"], row["kind"]) for row in failures}
    assert {("raises_on_some", "raised"), ("nan_on_some", "non-finite"), ("hangs_once", "timeout")} <= kinds
    assert all(row["sample_id"] for row in failures)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in metrics] == list(range(1, 21))
    assert sum(row.get("reward/nan_on_some/errors", 0) for row in metrics) > 0


def test_an_audio_run_over_nonfinite_clips_finishes_and_names_each(tmp_path: Path, nonfinite_media, capsys):
    """Float WAVs with NaN or infinite samples, and one whose finite samples the feature extractor
    turns into NaN, among generated audio rows: SFT, GRPO and eval go on without them."""
    data = tmp_path / "audio"
    assert main(["data", "make", "--recipe", "audio_count", "--n", "24", "--out", str(data)]) == 0
    seeded = {}
    for split in ("train", "test"):
        path = data / f"{split}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row, (name, reason) in zip(rows, BAD_AUDIO.items()):
            shutil.copyfile(nonfinite_media[name], data / row["audio"])
            seeded[split, row["id"]] = reason
    overrides = [
        f"data.train=[{{path: {data}, split: train}}]", f"data.test=[{{path: {data}, split: test}}]",
        f"log.output_dir={tmp_path / 'runs'}", "log.progress_bar=false", "log.tensorboard=false",
        f"data.dir={tmp_path / 'generated'}", "sft.steps=3", "sft.batch_size=32", "train.steps=2",
        "sft.micro_batch_size=8", "rollout.prompts_per_step=4", "rollout.num_generations=2",
        "train.micro_batch_size=8", "eval.limit=8",
    ]

    assert main(["train", "recipes/audio_count.yaml", *overrides]) == 0

    ledger = [json.loads(line) for line in (tmp_path / "runs" / "audio-count" / "skipped_rows.jsonl").read_text().splitlines()]
    assert {(row["split"], row["row_id"]): row["reason"] for row in ledger} == seeded
    assert {row["stage"] for row in ledger} == {"sft", "eval"}


def test_two_processes_generating_one_dataset_at_once_both_get_it(small_config, tmp_path, monkeypatch):
    """Sweep trials in parallel generate the same dataset: while this process generates, another one
    finishes first; this one keeps the other's folder and drops its own copy."""
    from mmgrpo import inputs

    config = small_config()
    spec, data_dir = config.data.train[0], tmp_path / "data"
    real_make = inputs.make_dataset

    def make_while_another_finishes_first(recipe, n, out, **kwargs):  # noqa: ANN001, ANN003, ANN202
        monkeypatch.setattr(inputs, "make_dataset", real_make)
        other = inputs.generate_dataset(spec, data_dir, seed=config.data.seed)  # the other process, done first
        real_make(recipe, n, out, **kwargs)
        return other

    monkeypatch.setattr(inputs, "make_dataset", make_while_another_finishes_first)
    out = inputs.generate_dataset(spec, data_dir, seed=config.data.seed)
    assert (out / "dataset_info.json").is_file()
    assert [path.name for path in data_dir.iterdir()] == [out.name]  # no staging folder left behind
