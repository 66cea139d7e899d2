"""The ``gsm8k`` adapter: the public schema (``question``, ``answer`` ending in ``#### N``) -> math rows."""

from __future__ import annotations

import datasets

from data_recipes.loading import load_rows
from tasks import get_task

NATALIA = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}


def test_jsonl_rows_keep_the_final_number_and_skip_bad_answers_with_a_reason(tmp_path, write_jsonl):
    write_jsonl(
        tmp_path / "train.jsonl",
        [
            NATALIA,
            {"question": "How much in total?", "answer": "It is 1,000 + 200 = 1,200.\n#### 1,200"},
            {"question": "What is the change?", "answer": "It drops by 3.\n#### -3"},
            {"question": "How many hours?", "answer": "Half of 5 is 2.5\n#### 2.5"},
            {"question": "No final line?", "answer": "The answer is 7."},
            {"question": "Words?", "answer": "Counting them.\n#### seven"},
            {"question": None, "answer": "#### 4"},
        ],
    )
    loaded = load_rows(tmp_path / "train.jsonl")

    assert loaded.adapter == "gsm8k"
    assert [row["answer"] for row in loaded.rows] == [72, 1200, -3, "2.5"]
    natalia = loaded.rows[0]
    assert natalia["problem"] == NATALIA["question"]
    assert natalia["reasoning"] == (
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May."
    )
    assert "image" not in natalia and "images" not in natalia  # text only
    assert {skip.row_id: skip.reason for skip in loaded.skipped} == {
        "4": "no final answer",
        "5": "non-numeric answer",
        "6": "missing field",
    }
    assert "'seven'" in loaded.skipped[1].detail


def test_parquet_in_the_published_layout_is_detected(tmp_path):
    """openai/gsm8k on the Hub: main/{train,test}-00000-of-00001.parquet."""
    (tmp_path / "main").mkdir()
    test = {"question": [NATALIA["question"]] * 2, "answer": [NATALIA["answer"], "no answer line"]}
    datasets.Dataset.from_dict(test).to_parquet(tmp_path / "main" / "test-00000-of-00001.parquet")
    train = {"question": ["What is 2 + 2?"], "answer": ["2 + 2 = <<2+2=4>>4\n#### 4"]}
    datasets.Dataset.from_dict(train).to_parquet(tmp_path / "main" / "train-00000-of-00001.parquet")

    loaded = load_rows(tmp_path / "main", split="test")

    assert loaded.adapter == "gsm8k" and [row["answer"] for row in loaded.rows] == [72]
    assert [skip.reason for skip in loaded.skipped] == ["no final answer"]


def test_rows_become_text_only_math_samples_whose_sft_target_is_the_worked_solution(tmp_path, write_jsonl):
    write_jsonl(tmp_path / "train.jsonl", [NATALIA])
    row = load_rows(tmp_path / "train.jsonl").rows[0]
    task = get_task("math")

    sample = task.to_sample(row, think=True)

    [user] = [m for m in sample.messages if m["role"] == "user"]
    assert [part["type"] for part in user["content"]] == ["text"]
    target = task.reference_completion(sample)
    assert target.startswith("<think>Natalia sold 48/2 = 24 clips in May.") and target.endswith("<answer>72</answer>")
    assert task.metric(target, sample) == 1.0
    assert task.metric("<think>48 + 24</think><answer>71</answer>", sample) == 0.0
    answer_only = task.to_sample(row, think=False)
    assert task.reference_completion(answer_only) == "<answer>72</answer>"
