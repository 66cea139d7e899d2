"""Each public-format adapter on a small fixture written in that format; bad rows skipped and counted."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import datasets
import pytest
from PIL import Image

from data_recipes.adapters import ADAPTERS, Adapter, detect_adapter
from data_recipes.loading import load_rows
from mmgrpo.registry import RegistryError


def reasons(loaded) -> dict[str, str]:
    return {skip.row_id: skip.reason for skip in loaded.skipped}


def test_clevr70k_parquet_with_embedded_image_bytes(tmp_path, caplog, png_bytes):
    features = datasets.Features({"image": datasets.Image(), "problem": datasets.Value("string"), "solution": datasets.Value("string")})
    table = {
        "image": [{"bytes": png_bytes(), "path": None}, {"bytes": b"not a png", "path": None}, {"bytes": png_bytes(), "path": None}],
        "problem": ["How many items are there in the image?"] * 3,
        "solution": ["<answer> 3 </answer>", "<answer> 1 </answer>", None],
    }
    (tmp_path / "data").mkdir()
    datasets.Dataset.from_dict(table, features=features).to_parquet(tmp_path / "data" / "train-00000-of-00001.parquet")

    with caplog.at_level(logging.WARNING, logger="data_recipes.loading"):
        loaded = load_rows(tmp_path)
    assert loaded.adapter == "clevr70k"
    [row] = loaded.rows
    assert row["id"] == "0" and row["answer"] == 3 and row["problem"].startswith("How many")
    assert Image.open(io.BytesIO(row["image"])).size == (24, 24)  # kept as bytes
    assert reasons(loaded) == {"1": "corrupt media", "2": "missing field"}
    assert "skipped 2" in caplog.text and "corrupt media" in caplog.text and "missing field" in caplog.text

    cached = load_rows(tmp_path, media_cache=str(tmp_path / "cache"))
    assert Path(cached.rows[0]["image"]).parent == tmp_path / "cache"
    assert Image.open(cached.rows[0]["image"]).size == (24, 24)


def test_r1v_jsonl_resolves_relative_paths_and_counts_bad_files(tmp_path, images, write_jsonl):
    good = {"image_path": "./images/good.png", "question": "How many cubes?", "ground_truth": 2}
    write_jsonl(
        tmp_path / "superclevr_test200_counting_problems.jsonl",
        [
            good,
            {**good, "image_path": "./images/missing.png"},
            {**good, "image_path": "./images/truncated.png"},
            {**good, "image_path": "./images/garbage.png"},
            {**good, "question": None},
        ],
    )
    loaded = load_rows(tmp_path)
    assert loaded.adapter == "r1v_jsonl"
    assert loaded.rows == [{"id": "0", "problem": "How many cubes?", "answer": 2, "image": str(images["good"])}]
    assert reasons(loaded) == {"1": "missing media", "2": "corrupt media", "3": "corrupt media", "4": "missing field"}
    assert "missing.png" in loaded.skipped[0].detail and "question" in loaded.skipped[3].detail


def test_geometry3k_image_list_and_placeholders(tmp_path, png_bytes):
    features = datasets.Features(
        {
            "images": datasets.Sequence(datasets.Image()),
            "problem": datasets.Value("string"),
            "choices": datasets.Sequence(datasets.Value("string")),
            "answer": datasets.Value("string"),
        }
    )
    table = {
        "images": [[{"bytes": png_bytes(), "path": None}], []],
        "problem": ["<image>Find x.", "<image>Find y."],
        "choices": [["3", "4"], ["1", "2"]],
        "answer": ["B", "A"],
    }
    datasets.Dataset.from_dict(table, features=features).to_parquet(tmp_path / "train.parquet")
    loaded = load_rows(tmp_path / "train.parquet", media_cache=str(tmp_path / "media"))
    assert loaded.adapter == "geometry3k"
    [row] = loaded.rows
    assert (row["problem"], row["choices"], row["answer"]) == ("Find x.", ["3", "4"], "B")
    assert len(row["images"]) == 1 and Path(row["images"][0]).is_file()
    assert reasons(loaded) == {"1": "missing media"}  # an empty image list


def test_vlm_r1_conversations_with_image_root(tmp_path, images, write_jsonl):
    def conversation(question: str, reply: str) -> list[dict]:
        return [{"from": "human", "value": f"<image>{question}"}, {"from": "gpt", "value": reply}]

    write_jsonl(
        tmp_path / "annotations" / "rec_train.jsonl",
        [
            {"id": 7, "image": "good.png", "conversations": conversation("How many balls?", "0")},
            {"id": 8, "image": ["good.png", "other.png"], "conversations": conversation("Which is larger?", "B")},
            {"id": 9, "image": "nowhere.png", "conversations": conversation("How many?", "1")},
            {"id": 10, "image": "good.png", "conversations": [{"from": "gpt", "value": "1"}]},
        ],
    )
    loaded = load_rows(tmp_path / "annotations", media_root=str(images["good"].parent))
    assert loaded.adapter == "vlm_r1"
    first, second = loaded.rows
    assert first == {"id": "7", "problem": "How many balls?", "answer": 0, "image": str(images["good"])}
    assert second["problem"] == "Which is larger?" and second["answer"] == "B"
    assert second["images"] == [str(images["good"]), str(images["other"])]
    assert reasons(loaded) == {"9": "missing media", "10": "missing field"}


def test_trl_prompt_messages_and_answer_column(tmp_path, images, write_jsonl):
    prompt = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many dots?"}]},
    ]
    write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"prompt": prompt, "image": str(images["good"]), "solution": "<answer>5</answer>"},
            {"prompt": prompt, "image": str(images["good"]), "solution": None},
        ],
    )
    loaded = load_rows(tmp_path / "train.jsonl")
    assert loaded.adapter == "trl"
    assert loaded.rows == [{"id": "0", "problem": "How many dots?", "answer": 5, "image": str(images["good"])}]
    assert reasons(loaded) == {"1": "missing field"}


def test_swift_messages_images_and_solution(tmp_path, images, write_jsonl):
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "<image>How many stars?"},
        {"role": "assistant", "content": "4"},
    ]
    write_jsonl(
        tmp_path / "swift.jsonl",
        [
            {"messages": messages, "images": ["images/good.png"], "solution": "6"},
            {"messages": messages, "images": ["images/other.png"], "solution": None},
            {"messages": messages, "images": ["images/garbage.png"], "solution": "1"},
        ],
    )
    loaded = load_rows(tmp_path / "swift.jsonl")
    assert loaded.adapter == "swift"
    assert [(r["problem"], r["answer"]) for r in loaded.rows] == [("How many stars?", 6), ("How many stars?", 4)]
    assert loaded.rows[1]["images"] == [str(images["other"])]
    assert reasons(loaded) == {"2": "corrupt media"}


def test_canonical_save_to_disk_folder(tmp_path, images):
    rows = [{"id": "a", "problem": "How many?", "answer": 1, "image": str(images["good"])}]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(tmp_path / "saved")
    loaded = load_rows(tmp_path / "saved", split="test")
    assert loaded.adapter == "canonical" and loaded.rows == rows
    with pytest.raises(ValueError, match="no split 'train'; splits: test"):
        load_rows(tmp_path / "saved")


def test_adapter_detection_is_explicit_about_ambiguity_and_misses(monkeypatch):
    assert detect_adapter(["id", "images", "problem", "answer"]).name == "geometry3k"  # most specific wins
    monkeypatch.setitem(ADAPTERS._items, "gsm8k_copy", Adapter("gsm8k_copy", frozenset({"question", "answer"}), dict))
    with pytest.raises(ValueError, match="several adapters \\(gsm8k, gsm8k_copy\\)"):
        detect_adapter(["question", "answer"])
    with pytest.raises(ValueError, match="no dataset adapter matches columns \\['foo'\\].*clevr70k"):
        detect_adapter(["foo"])
    with pytest.raises(RegistryError, match="unknown dataset adapter 'clevr'.*clevr70k"):
        ADAPTERS.get("clevr")


def test_limit_counts_good_rows_and_an_all_bad_dataset_is_an_error(tmp_path, images, write_jsonl):
    good = {"image_path": str(images["good"]), "question": "How many?", "ground_truth": 1}
    write_jsonl(tmp_path / "a.jsonl", [{**good, "image_path": "gone.png"}, good, good, good])
    limited = load_rows(tmp_path / "a.jsonl", limit=2)
    assert len(limited.rows) == 2 and len(limited.skipped) == 1
    write_jsonl(tmp_path / "bad.jsonl", [{**good, "image_path": "gone.png"}])
    with pytest.raises(ValueError, match="no usable rows.*1 missing media"):
        load_rows(tmp_path / "bad.jsonl")


def test_missing_dataset_and_missing_split_are_clear_errors(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "test.jsonl", [{"problem": "p", "answer": 1}])
    with pytest.raises(FileNotFoundError, match="no data files for split 'train'.*test.jsonl"):
        load_rows(tmp_path)
    assert load_rows(tmp_path, split="test").rows == [{"id": "0", "problem": "p", "answer": 1}]
    with pytest.raises(FileNotFoundError, match="not found"):
        load_rows(tmp_path / "nope")


MATHVISTA_COLUMNS = ["pid", "question", "image", "decoded_image", "choices", "unit", "precision", "answer",
                     "question_type", "answer_type", "metadata", "query"]


def test_an_adapter_claims_only_tables_of_exactly_its_format():
    assert detect_adapter(["question", "answer"]).name == "gsm8k"
    assert detect_adapter(["id", "question", "answer"]).name == "gsm8k"
    for columns in (MATHVISTA_COLUMNS, ["prompt", "messages"]):  # more columns: another format
        with pytest.raises(ValueError) as error:
            detect_adapter(columns)
        message = str(error.value)
        assert "\n" not in message and str(sorted(columns)) in message
        assert all(f"{name}:" in message for name in ADAPTERS)


def test_a_custom_table_maps_its_columns(tmp_path, images, write_jsonl):
    write_jsonl(tmp_path / "custom.jsonl", [{"q": "How many?", "label": 3, "img": str(images["good"]), "extra": 1}])
    with pytest.raises(ValueError, match="no dataset adapter matches columns \\['extra', 'img', 'label', 'q'\\]"):
        load_rows(tmp_path / "custom.jsonl")
    loaded = load_rows(tmp_path / "custom.jsonl", adapter_args={"columns": {"problem": "q", "answer": "label",
                                                                           "image": "img"}})
    assert loaded.adapter == "canonical"
    assert [(row["problem"], row["answer"], row["image"]) for row in loaded.rows] == [("How many?", 3, str(images["good"]))]
    with pytest.raises(ValueError, match="adapter_args.columns names columns the table lacks: \\['question'\\]"):
        load_rows(tmp_path / "custom.jsonl", adapter_args={"columns": {"problem": "question"}})


def test_every_generated_dataset_is_detected_as_canonical(tmp_path):
    from data_recipes.generators import GENERATORS
    from data_recipes.make import make_dataset

    for recipe in GENERATORS.names():
        make_dataset(recipe, 2, tmp_path / recipe, seed=0, test_fraction=0.5)
        columns = json.loads((tmp_path / recipe / "test.jsonl").read_text().splitlines()[0])
        assert detect_adapter(columns).name == "canonical", recipe
