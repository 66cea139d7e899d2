"""Dataset keys that nothing reads are refused at validation, not accepted and ignored."""

from __future__ import annotations

import re

import pytest

from mmgrpo.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sft.data=[{path: sft.jsonl, limit: 5}]", "sft.data[0].limit=5 is not used (SFT reads every row of each path)"),
        ("sft.data=[{path: sft.jsonl, weight: 2}]", "sft.data[0].weight=2.0 is not used"),
        ("sft.data=[{path: sft.jsonl, split: test}]", "sft.data[0].split='test' is not used"),
        ("data.test.0.weight=3", "data.test[0].weight=3.0 is not used (eval reports each test dataset separately)"),
    ],
)
def test_unread_dataset_fields_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_fields_that_are_read_stay_accepted() -> None:
    config = load_config(None, ["sft.data=[{path: sft.jsonl}]", "data.test.0.limit=5", "data.train.0.weight=2"])
    assert config.sft.data[0].path == "sft.jsonl" and config.data.test[0].limit == 5
