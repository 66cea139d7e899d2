"""Gemma 3's prompt format and the checkpoints it refuses (the family tests run it with the others)."""

from __future__ import annotations

import json
import shutil

import pytest

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import ModelLoadError, load_model_and_processor


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


def test_a_checkpoint_with_a_final_logit_soft_cap_is_refused(tiny_model_dir, tmp_path):
    folder = tmp_path / "capped"
    shutil.copytree(tiny_model_dir("gemma3"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["final_logit_softcapping"] = 30.0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="final_logit_softcapping=30.0 is refused"):
        load_model_and_processor(folder, dtype="float32")
