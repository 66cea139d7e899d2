"""Gemma 3's prompt format and the checkpoints it refuses (the family tests run it with the others)."""

from __future__ import annotations

import json
import shutil

import pytest

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.logprobs import sequence_logprobs
from mmgrpo.models.train_batch import build_train_batch


def test_a_prompt_opens_with_one_bos_and_no_system_turn(load_tiny, media_samples):
    """The template writes ``<bos>`` and the tokenizer adds one too (as Gemma's does): encoded once. The system
    text opens the first user turn (Gemma has no system role)."""
    _, processor = load_tiny("gemma3")
    system = {"role": "system", "content": "Answer with a number."}
    samples = [sample.__class__(id=sample.id, task=sample.task, messages=[system, *sample.messages])
               for sample in media_samples("gemma3")]
    batch = build_prompt_batch(processor, samples, family="gemma3")
    bos = processor.tokenizer.bos_token_id
    for row, mask in zip(batch.input_ids, batch.attention_mask):
        tokens = row[mask.bool()].tolist()
        assert tokens[0] == bos and tokens.count(bos) == 1
    text = processor.apply_chat_template(samples[0].messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<bos><start_of_turn>user\nAnswer with a number.\n\n") and "system" not in text
    assert text.endswith("<end_of_turn>\n<start_of_turn>model\n")


def test_log_probs_of_a_model_with_a_final_logit_soft_cap_are_refused(tiny_model_dir, tmp_path, media_samples):
    """Generation (evaluations, judges) runs the model's own forward, cap included; log-probs are computed from
    the output head in chunks, which would miss it."""
    folder = tmp_path / "capped"
    shutil.copytree(tiny_model_dir("gemma3"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["final_logit_softcapping"] = 30.0
    (folder / "config.json").write_text(json.dumps(config))
    model, processor = load_model_and_processor(folder, dtype="float32")
    batch = build_train_batch(processor, media_samples("gemma3")[:1], [[5, 6]], family="gemma3")
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0 is not supported"):
        sequence_logprobs(model, batch, micro_batch_size=1)
