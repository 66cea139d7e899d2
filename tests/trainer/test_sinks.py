"""Per-step logs of a tiny GRPO run: TensorBoard events, W&B (offline) history, completions.jsonl."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mmgrpo.run_files import read_metrics

from tests.trainer.test_grpo_trainer import train

# A reward that is not 0 for a random model's text, so a record's reward can be checked against its completion.
LENGTH_REWARD_PLUGIN = '''
from tasks import register_reward

@register_reward("length_in_hundreds")
def length_in_hundreds(completions, **_):
    return [len(text) / 100 for text in completions]
'''

# Keys every trained step logs (the sinks must carry at least these, with the jsonl's values).
STEP_KEYS = ("reward/total", "loss", "grad_norm", "length/mean", "groups")


@pytest.fixture(scope="session")
def length_reward_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plugin = tmp_path_factory.mktemp("plugins") / "length_reward.py"
    plugin.write_text(LENGTH_REWARD_PLUGIN)
    return plugin


def _logged_steps(run_dir: Path) -> dict[int, dict[str, Any]]:
    return {row["step"]: row for row in read_metrics(run_dir / "metrics.jsonl")}


def test_tensorboard_events_mirror_metrics_jsonl(small_config, tmp_path):
    run_dir = tmp_path / "run"
    train(small_config("log.tensorboard=true", "train.steps=3", "log.log_completions_every=3"), run_dir)
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0, "images": 0})
    events.Reload()
    rows = _logged_steps(run_dir)
    assert sorted(rows) == [1, 2, 3]
    tags = set(events.Tags()["scalars"])
    numeric = {key for row in rows.values() for key, value in row.items() if key != "step" and isinstance(value, float)}
    assert numeric <= tags, f"scalars missing from TensorBoard: {sorted(numeric - tags)}"
    for key in STEP_KEYS:
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [1, 2, 3], key
        assert [s.value for s in scalars] == pytest.approx([rows[s.step][key] for s in scalars], rel=1e-6), key
    records = read_metrics(run_dir / "completions.jsonl")
    texts = events.Tensors("completions/text_summary")
    assert [text.step for text in texts] == [1, 3]  # the first step's samples, then every 3rd step's
    for text in texts:
        table = text.tensor_proto.string_val[0].decode()
        logged = [record for record in records if record["step"] == text.step]
        assert logged and all(record["completion"].replace("|", "\\|").replace("\n", " ") in table for record in logged)
    image_tags = [tag for tag in events.Tags()["images"] if tag.startswith("completions/")]
    assert sorted(image_tags) == sorted({f"completions/{record['sample_id']}" for record in records})
    assert events.Images(image_tags[0])[0].width > 0


def _wandb_records(path: Path) -> Iterator[Any]:
    """The protobuf records of a ``.wandb`` file (a LevelDB-style log: 32 KiB blocks of
    chunks, each ``crc32 u32 | length u16 | type u8`` then the bytes; type 1 = whole record,
    2/3/4 = first/middle/last piece), after the 7-byte ``:W&B`` header."""
    from wandb.proto import wandb_internal_pb2

    block, chunk_header = 32 * 1024, 7
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    position, pieces = chunk_header, b""
    while position + chunk_header <= len(data):
        room = block - position % block
        if room < chunk_header:  # a block's tail too short for a header is padding
            position += room
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + chunk_header])
        pieces += data[position + chunk_header : position + chunk_header + length]
        position += chunk_header + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            pieces = b""
            yield record


def _item_key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def _train_with_wandb_offline(config, run_dir: Path, monkeypatch) -> None:
    """Train with W&B in offline mode, then wait until its service has written the run files."""
    wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed (pip install 'mmgrpo[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    train(config, run_dir)
    wandb.teardown()  # the W&B service writes the run file in the background; wait for it


def test_wandb_offline_run_has_every_step(small_config, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    config = small_config("log.wandb=true", "log.wandb_project=mmgrpo-test", "train.steps=2", "algo.beta=0.04")
    _train_with_wandb_offline(config, run_dir, monkeypatch)

    [run_file] = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")  # inside the run folder
    records = list(_wandb_records(run_file))
    [run] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.project == "mmgrpo-test" and run.display_name == run_dir.name
    assert run.run_id == (run_dir / "wandb_run_id").read_text().strip()  # what a resume continues
    config = {_item_key(item): json.loads(item.value_json) for item in run.config.update}
    assert config["algo"]["beta"] == 0.04 and config["train"]["steps"] == 2
    history = [
        {_item_key(item): json.loads(item.value_json) for item in r.history.item}
        for r in records if r.WhichOneof("record_type") == "history"
    ]
    rows = _logged_steps(run_dir)
    assert [h["_step"] for h in history] == sorted(rows) == [1, 2]
    for logged in history:
        for key in (*STEP_KEYS, "kl"):
            assert logged[key] == pytest.approx(rows[logged["_step"]][key], rel=1e-9), key
    assert any(r.WhichOneof("record_type") == "exit" for r in records), "the W&B run was not finished"


def test_wandb_offline_run_gets_a_completions_table_with_the_prompt_images(small_config, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    config = small_config("log.wandb=true", "log.tensorboard=false", "train.steps=1", "log.log_completions_every=2")
    _train_with_wandb_offline(config, run_dir, monkeypatch)

    [files] = (run_dir / "wandb").glob("offline-run-*/files")
    [table_file] = files.glob("media/table/completions_*.table.json")
    table = json.loads(table_file.read_text())
    records = read_metrics(run_dir / "completions.jsonl")
    assert table["columns"] == ["image", "step", "sample_id", "prompt", "answer", "completion", "reward", "advantage",
                                "correct"]
    assert [row[5] for row in table["data"]] == [record["completion"] for record in records]
    # W&B keeps a run table's images in the table's artifact: one PNG per row with an image
    [run_file] = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    [artifact] = [r.artifact for r in _wandb_records(run_file)
                  if r.WhichOneof("record_type") == "artifact" and r.artifact.type == "run_table"]
    paths = [entry.path for entry in artifact.manifest.contents]
    assert "completions.table.json" in paths
    assert len([path for path in paths if path.startswith("media/images/")]) == len({r["sample_id"] for r in records})


def test_completions_jsonl_every_n_steps(small_config, length_reward_plugin, tmp_path):
    run_dir = tmp_path / "run"
    config = small_config(
        "train.steps=4", "log.log_completions_every=2", "log.completions_per_log=6",
        f"task.reward_plugins=[{length_reward_plugin}]", "task.rewards={length_in_hundreds: 1.0}",
    )
    trainer = train(config, run_dir)
    records = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1] * 6 + [2] * 6 + [4] * 6  # step 1 always: short runs show samples
    samples = {sample.id: sample for sample in trainer.drawer.samples}
    for record in records:
        assert set(record) == {"step", "sample_id", "task", "answer", "prompt", "media", "completion", "reward",
                               "rewards", "advantage", "correct", "truncated"}
        assert record["rewards"] == {"length_in_hundreds": pytest.approx(record["reward"])}
        assert record["answer"] == samples[record["sample_id"]].answer
        text = record["completion"]
        assert record["reward"] == pytest.approx(len(text) / 100)
        assert isinstance(record["truncated"], bool)
    assert len({r["completion"] for r in records}) > 1 and any(r["reward"] > 0 for r in records)
