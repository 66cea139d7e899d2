"""Text-only prompts (no image, video or audio) through the same VLM path: batch, log-probs, rollout, SFT, GRPO."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.pipeline import RunPaths, run_training
from mmgrpo.types import Sample

COMPLETIONS = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]  # the text row's group of 3


def user_sample(sample_id: str, text: str, image: Path | None = None) -> Sample:
    parts = [{"type": "image", "image": str(image)}] if image else []
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]
    return Sample(id=sample_id, task="math", messages=messages, answer="5", extra={})


@pytest.mark.parametrize(
    "family",
    ["qwen2_5_vl", "qwen2_vl", "qwen3_5", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision",
     "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"],
)
@pytest.mark.parametrize("shared", [True, False], ids=["group-shared", "plain"])
def test_a_text_row_scores_the_same_alone_and_beside_an_image_row(family, shared, tiny_model_dir, tmp_path):
    """A text row gets no media inputs, and a mixed batch (a data mixture) gives it the same log-probs:
    fails if text rows take positions or placeholders meant for media rows."""
    model, processor = load_model_and_processor(tiny_model_dir(family), dtype="float32")
    image = tmp_path / "scene.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (112, 112, 3), dtype=np.uint8)).save(image)
    text_row = user_sample("text", "Ann has 3 apples. Ann gets 2 more. How many apples does Ann have?")
    image_row = user_sample("image", "How many objects are there?", image)

    alone = build_prompt_batch(processor, [text_row], family=family)
    mixed = build_prompt_batch(processor, [image_row, text_row], family=family)

    assert alone.media_inputs == {} and alone.media_counts == [{}]
    assert "pixel_values" in mixed.media_inputs and mixed.media_counts == [{"image": 1}, {}]
    with torch.no_grad():
        logp_alone, _ = completion_logprobs(
            model, alone, COMPLETIONS, (3,), group_shared_encoding=shared, micro_batch_size=3
        )
        logp_mixed, _ = completion_logprobs(
            model, mixed, [[4], *COMPLETIONS], (1, 3), group_shared_encoding=shared, micro_batch_size=4
        )
    width = logp_alone.shape[1]
    torch.testing.assert_close(logp_mixed[1:, :width], logp_alone, atol=1e-5, rtol=0)


def test_sft_and_grpo_run_on_text_only_word_problems(small_config, tmp_path):
    """The arithmetic recipe's rows reach rollout, rewards, SFT and GRPO updates with no media anywhere."""
    config = small_config(
        "data.train=[{recipe: arithmetic, recipe_args: {n: 40, test_fraction: 0.2}}]",
        "data.test=[{recipe: arithmetic, recipe_args: {n: 40, test_fraction: 0.2}, split: test}]",
        "task.name=math",
        # the math task's own rewards, plus the fixture's dense one so that a random policy's groups differ
        "task.rewards={format: 0.1, math_accuracy: 1.0, share_of_threes: 1.0}",
        "sft.enabled=true", "sft.steps=3", "sft.batch_size=8", "sft.micro_batch_size=8",
        "train.steps=3", "eval.limit=8", "log.log_completions_every=1",
    )
    summary = run_training(config)
    root = RunPaths.for_config(config).root

    assert summary["n_train"] == 32 and summary["n_eval"] == 8 and summary["skipped_rows"] == 0
    assert summary["grpo_steps"] == 3
    rows = read_metrics(root / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:
        assert row["dropped_prompts"] == 0 and row["groups"] == 4 and math.isfinite(row["loss"])
        assert {"reward/format", "reward/math_accuracy"} <= set(row) and row["reward/math_accuracy/errors"] == 0
    assert any(row["grad_norm"] > 0 for row in rows)  # some group's rewards differed: the policy was updated
    sft_losses = [row["sft/loss"] for row in read_metrics(root / "sft" / "metrics.jsonl")]
    assert len(sft_losses) == 3 and sft_losses[-1] < sft_losses[0]
    logged = [json.loads(line) for line in (root / "completions.jsonl").read_text().splitlines()]
    assert logged and all(entry["sample_id"].startswith("arithmetic-") for entry in logged)


def test_word_problems_tokenize_into_words_and_numbers(tiny_qwen25vl):
    """The tiny tokenizer's corpus holds the arithmetic phrasing: a problem costs about one token per word."""
    tokenizer = load_model_and_processor(tiny_qwen25vl, dtype="float32")[1].tokenizer
    problem = "Mia has 7 coins. Mia gives away 2. Mia gets 5 more. How many coins does Mia have?"
    pieces = [tokenizer.decode([i]) for i in tokenizer(problem)["input_ids"]]
    for word in (" gives", " away", " gets", " more", " does", " have"):
        assert word in pieces, (word, pieces)
    assert len(pieces) <= 35  # 20 words and digits, 4 full stops; letter by letter it is ~70
    answer = [tokenizer.decode([i]) for i in tokenizer("<answer>12</answer>")["input_ids"]]
    assert answer == ["<answer>", "1", "2", "</answer>"]


def test_a_tokenizer_corpus_change_changes_the_tiny_model_cache_key(monkeypatch):
    from mmgrpo.models.tiny import tiny_identity, tokenizer

    before = tiny_identity("qwen2_5_vl")
    monkeypatch.setattr(tokenizer, "tiny_corpus", lambda: ["another corpus"])
    assert tiny_identity("qwen2_5_vl") != before
