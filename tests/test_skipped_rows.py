"""The skip ledger: one record per row, split and reason; reopened runs keep and do not repeat records."""

from __future__ import annotations

import json

from mmgrpo.skipped_rows import SkipLedger, SkippedRow, describe_skipped


def test_each_row_is_recorded_once_per_split_and_reopening_keeps_the_records(tmp_path):
    path = tmp_path / "skipped_rows.jsonl"
    ledger = SkipLedger(path)
    corrupt = SkippedRow("r1", "/data/r1.jpg", "corrupt media", "image file is truncated")
    assert ledger.add([corrupt], split="train", stage="sft") == [ledger.records[0]]
    assert ledger.add([corrupt], split="train", stage="grpo") == []  # seen again later: not repeated
    ledger.add([corrupt], split="test", stage="eval")  # the same id in the other split is another row
    ledger.add([SkippedRow("r2", "data.jsonl", "missing media", stage="load")], split="train", stage="eval")

    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(row["split"], row["row_id"], row["stage"]) for row in lines] == [
        ("train", "r1", "sft"), ("test", "r1", "eval"), ("train", "r2", "load"),  # a record's own stage wins
    ]
    assert ledger.counts() == {"train/corrupt media": 1, "test/corrupt media": 1, "train/missing media": 1}
    assert ledger.ids("train") == {"r1", "r2"}

    with open(path, "a") as handle:
        handle.write('{"row_id": "torn')  # power lost mid-line
    reopened = SkipLedger(path)  # a resumed run
    assert reopened.records == ledger.records
    assert reopened.add([corrupt], split="train", stage="grpo") == []
    reopened.add([SkippedRow("r3", "/data/r3.png", "bad media shape")], split="train", stage="grpo")
    assert [row.row_id for row in SkipLedger(path).records] == ["r1", "r1", "r2", "r3"]  # r3 not glued to the torn line


def test_description_names_rows_and_reasons_and_counts_the_rest():
    rows = [SkippedRow(f"r{i}", f"/m/{i}.png", "corrupt media", "truncated") for i in range(7)]
    assert describe_skipped(rows[:1]) == "'r0' (corrupt media: truncated)"
    assert describe_skipped(rows, limit=2).endswith("; and 5 more")
