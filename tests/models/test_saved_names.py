"""Weights are saved under the names the family's Hub checkpoints use, which vLLM loads: transformers 5.25 drops a
SigLIP tower's ``vision_model.`` prefix on load and does not put it back on save (Gemma 3), so mmgrpo does; the
names the trainer pushes to vLLM are the saved ones."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open

from mmgrpo.models.compat import save_pretrained
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.rollout.vllm import checkpoint_named


def saved_keys(folder: Path) -> set[str]:
    keys: set[str] = set()
    for file in folder.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as weights:
            keys.update(weights.keys())
    return keys


def test_a_siglip_tower_is_saved_under_vision_model_and_reloads_equal(tiny_model_dir, tmp_path):
    model, processor = load_model_and_processor(tiny_model_dir("gemma3"), dtype="float32")
    save_pretrained(model, tmp_path)
    processor.save_pretrained(tmp_path)
    tower = {key for key in saved_keys(tmp_path) if key.startswith("vision_tower.")}
    assert tower and all(key.startswith("vision_tower.vision_model.") for key in tower), sorted(tower)[:3]
    again, _ = load_model_and_processor(tmp_path, dtype="float32")
    before, after = model.state_dict(), again.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_the_pushed_names_are_the_saved_ones(tiny_model_dir):
    model, _ = load_model_and_processor(tiny_model_dir("gemma3"), dtype="float32")
    pushed = {name for name, _ in checkpoint_named(model, model.named_parameters())}
    assert pushed <= saved_keys(Path(tiny_model_dir("gemma3"))), sorted(pushed - saved_keys(tiny_model_dir("gemma3")))
    assert any(name.startswith("vision_tower.vision_model.") for name in pushed)
