"""Weights are saved under the names the family's Hub checkpoints use, which vLLM loads: transformers 5.25 drops a
SigLIP tower's ``vision_model.`` prefix on load and does not put it back on save (Gemma 3), so mmgrpo does; the
names the trainer pushes to vLLM are the saved ones."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors import safe_open

from mmgrpo.models.compat import read_names_in_files, save_pretrained
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.policy_weights import streamed_plain_weights
from mmgrpo.models.tiny import TINY_FAMILIES, TinySpec
from mmgrpo.rollout.vllm import checkpoint_named


def saved_keys(folder: Path) -> set[str]:
    keys: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as weights:
            keys.update(weights.keys())
    return keys


def test_a_siglip_tower_is_saved_under_vision_model_and_reloads_equal(tmp_path):
    """A model built in memory (as ``make-tiny`` builds one, or a run that did not load from files)."""
    built = TINY_FAMILIES.get("gemma3")(TinySpec())
    save_pretrained(built.model, tmp_path)
    built.processor.save_pretrained(tmp_path)
    tower = {key for key in saved_keys(tmp_path) if key.startswith("vision_tower.")}
    assert tower and all(key.startswith("vision_tower.vision_model.") for key in tower), sorted(tower)[:3]
    again, _ = load_model_and_processor(tmp_path, dtype="float32")
    before, after = built.model.state_dict(), again.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)


@pytest.mark.parametrize("family", ["gemma3", "llava_onevision"])
def test_the_pushed_names_are_the_saved_ones(family, tiny_model_dir):
    model, _ = load_model_and_processor(tiny_model_dir(family), dtype="float32")
    pushed = {name for name, _ in checkpoint_named(model, model.named_parameters())}
    assert pushed <= saved_keys(Path(tiny_model_dir(family))), sorted(pushed - saved_keys(tiny_model_dir(family)))
    assert any(name.startswith("vision_tower.vision_model.") for name in pushed)


@pytest.mark.parametrize("family", ["smolvlm", "gemma3", "llava_onevision"])
def test_under_lora_every_weight_finds_its_saved_name(family, tiny_model_dir):
    """LoRA names a wrapped weight ``...base_layer.weight`` in memory; the push sends it merged under its plain
    name, which must find its saved key itself (not fall to the renaming of the leftovers at the end, which holds
    them all at once). SmolVLM's tower is ``model.vision_model.`` in memory too: its prefix is not stripped."""
    model, _ = load_model_and_processor(tiny_model_dir(family), dtype="float32")
    model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    plain = {name for name, _ in streamed_plain_weights(model)}
    to_file = read_names_in_files(model.get_base_model())
    assert plain <= to_file.keys(), sorted(plain - to_file.keys())[:3]
    assert set(to_file.values()) <= saved_keys(Path(tiny_model_dir(family)))
