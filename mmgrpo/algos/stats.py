"""Masked reductions and per-token entropy over padded token tensors.

Token-level tensors are ``[B, T]`` with a 0/1 (or bool) mask that is 1 on completion
tokens. Masked-out positions are selected away with ``torch.where`` rather than
multiplied by 0, so an ``inf`` or ``NaN`` sitting in padding never leaks into a result
or a gradient (``0 * inf`` is ``NaN``).
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_ENTROPY_CHUNK = 512  # tokens per chunk: 512 x 152k vocab x 4 B ~ 0.3 GB


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is set (over ``dim``, or everything)."""
    kept = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return kept.sum() if dim is None else kept.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over masked-in positions; 0 (not NaN) where nothing is masked in."""
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``x`` over all masked-in positions (Bessel-corrected when ``unbiased``).

    Fewer than two masked-in values give variance 0, not NaN.
    """
    count = mask.bool().sum()
    centred = x - masked_mean(x, mask)
    sum_sq = masked_sum(centred * centred, mask)
    denom = (count - 1).clamp(min=1) if unbiased else count.clamp(min=1)
    return sum_sq / denom


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Standardise ``x`` with the mean and unbiased variance of its masked-in values.

    ``(x - mean) / sqrt(var + eps)``; with ``shift_mean=False`` the mean is added back,
    so only the scale changes (as PPO implementations do for advantages). Masked-out
    positions are returned as 0.
    """
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        whitened = whitened + mean
    return torch.where(mask.bool(), whitened, torch.zeros((), dtype=whitened.dtype, device=x.device))


def _entropy_rows(logits: Tensor) -> Tensor:
    """Entropy of each row of ``logits`` ``[N, V]`` -> ``[N]``, in float32.

    H = logsumexp(z) - sum_v softmax(z)_v * z_v, which never takes log(0).
    """
    z = logits.float()  # [N, V]: the only float32 copy, one chunk at a time
    log_norm = torch.logsumexp(z, dim=-1)  # [N]
    return log_norm - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def entropy_from_logits(
    logits: Tensor, mask: Tensor | None = None, chunk_size: int = DEFAULT_ENTROPY_CHUNK
) -> Tensor:
    """Per-token entropy of the categorical distributions in ``logits``.

    Args:
        logits: ``[B, T, V]`` in any float dtype (bf16 logits stay bf16 in memory).
        mask: optional ``[B, T]``; masked-out positions get entropy 0.
        chunk_size: tokens converted to float32 at a time, so at most a
            ``[chunk_size, V]`` float32 copy exists instead of a full ``[B, T, V]`` one.

    Returns:
        ``[B, T]`` float32 entropies in nats. Differentiable (for an entropy bonus).
    """
    if logits.dim() != 3:
        raise ValueError(f"entropy_from_logits: logits must be [B, T, V], got shape {tuple(logits.shape)}")
    if chunk_size < 1:
        raise ValueError(f"entropy_from_logits: chunk_size must be >= 1, got {chunk_size}")
    batch, seq_len, vocab = logits.shape
    rows = logits.reshape(batch * seq_len, vocab)  # [B*T, V], a view when contiguous
    entropy = torch.cat([_entropy_rows(chunk) for chunk in rows.split(chunk_size)])  # [B*T]
    entropy = entropy.view(batch, seq_len)  # [B, T]
    if mask is None:
        return entropy
    return torch.where(mask.bool(), entropy, torch.zeros((), device=entropy.device))
