"""Tiny text reward models on the tiny Qwen tokenizer, built offline for tests and demos.

``classifier``: ``Qwen2ForSequenceClassification`` with one score logit (a trained reward
model's shape); ``judge``: ``Qwen2ForCausalLM``, a generative judge asked a rubric question.
Not VLM families (they are not in ``TINY_FAMILIES``): ``make_tiny_reward_model`` saves one
like a real checkpoint, loadable with ``AutoModelForSequenceClassification`` /
``AutoModelForCausalLM`` and ``AutoTokenizer``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

from mmgrpo.models.tiny.families import TinySpec, decoder_config, generation_config
from mmgrpo.models.tiny.qwen import qwen_tokenizer

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
