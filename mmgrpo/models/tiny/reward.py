"""Tiny reward models, built offline for tests and demos.

``make_tiny_reward_model``: text models on the tiny Qwen tokenizer. ``classifier`` is a
``Qwen2ForSequenceClassification`` with one score logit (a trained reward model's shape);
``judge`` a ``Qwen2ForCausalLM``, a generative judge asked a rubric question. Each is saved like
a real checkpoint, loadable with ``AutoModelForSequenceClassification`` / ``AutoModelForCausalLM``
and ``AutoTokenizer``. (A tiny VLM of any family is a VLM judge as it is.)

``make_tiny_vlm_reward_model``: a tiny VLM of a supported family plus ``value_head.safetensors``,
the layout of published VLM reward models (:mod:`mmgrpo.models.value_head`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

from mmgrpo.models.tiny.factory import make_tiny
from mmgrpo.models.tiny.families import TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.qwen import qwen_tokenizer
from mmgrpo.models.value_head import VALUE_HEAD_FILE

REWARD_MODEL_KINDS = ("classifier", "judge")


def make_tiny_reward_model(kind: str, out_dir: str | Path, *, seed: int = 0) -> Path:
    """Build a random tiny ``kind`` reward model with ``seed`` and save it with its tokenizer to ``out_dir``."""
    if kind not in REWARD_MODEL_KINDS:
        raise ValueError(f"unknown reward model kind {kind!r}; known: {', '.join(REWARD_MODEL_KINDS)}")
    spec = TinySpec()
    tokenizer = qwen_tokenizer(spec, default_system=None)
    config = Qwen2Config(**decoder_config(spec, tokenizer, head_dim=spec.hidden_size // spec.num_heads), num_labels=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForSequenceClassification(config) if kind == "classifier" else Qwen2ForCausalLM(config)
    if kind == "judge":
        model.generation_config = generation_config(tokenizer, ["<|im_end|>", "<|endoftext|>"])
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_tiny_vlm_reward_model(family: str, out_dir: str | Path, *, seed: int = 0, **overrides: object) -> Path:
    """A tiny ``family`` VLM (``make_tiny``) with a random one-score value head in TRL's key layout."""
    out = make_tiny(family, out_dir, seed=seed, **overrides)
    hidden_size = AutoConfig.from_pretrained(out).get_text_config().hidden_size
    generator = torch.Generator().manual_seed(seed)
    head = {
        "v_head.summary.weight": torch.randn(1, hidden_size, generator=generator) / hidden_size**0.5,
        "v_head.summary.bias": torch.zeros(1),
    }
    save_file(head, str(out / VALUE_HEAD_FILE))
    return out
