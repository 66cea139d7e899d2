"""Sparse gradients for the token-embedding lookup: the rows of the tokens looked up, not a whole table per forward.

A dense embedding backward allocates zeros the size of the whole table for every forward that looked tokens up
(group-shared encoding runs two per update: the prompts, then the completions), then adds them to each other
and, where the table is tied to the output head, to the head's gradient: at Qwen2.5-VL-3B's 151,936 x 2048 rows
that is 1.2 GB per copy (one update's peak 13.7 -> 12.6 GB at that shape, ``bench/README.md``). Sparse lookups
add their rows into the one dense gradient instead. A table not tied to the head gets its gradient made dense
once, when it is accumulated, so the optimizer, clipping and checkpoints only ever see a plain tensor.
"""

from __future__ import annotations

import torch


def use_sparse_lookup_gradients(model: torch.nn.Module) -> bool:
    """Make ``model``'s trainable token embedding send sparse gradients (densified on accumulation); whether it
    did (not for a frozen table, one that is not a plain ``nn.Embedding``, nor a module that is not a
    transformers model). Only for a back end that keeps the parameters as they are: sharded ones hold their own
    gradient layouts."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not isinstance(embedding, torch.nn.Embedding) or not embedding.weight.requires_grad:
        return False
    if not embedding.sparse:
        embedding.sparse = True
        embedding.weight.register_post_accumulate_grad_hook(_densify)
    return True


def _densify(weight: torch.Tensor) -> None:
    """A table's accumulated gradient, made dense where only sparse lookups contributed (no tied head)."""
    if weight.grad is not None and weight.grad.is_sparse:
        weight.grad = weight.grad.to_dense()
