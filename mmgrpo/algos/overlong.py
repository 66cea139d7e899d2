"""DAPO soft overlong punishment (arXiv 2503.14476, eq. 13).

A completion longer than ``max_len - buffer_len`` tokens loses reward linearly over the
buffer, reaching ``-penalty`` at ``max_len`` and staying there beyond it; shorter ones are
untouched. Added to the task reward, it discourages rambling without the noise of a hard
cut (DAPO: max 20480 tokens, buffer 4096).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def overlong_penalty(
    lengths: Tensor | Sequence[int], max_len: int, buffer_len: int, penalty: float = 1.0
) -> Tensor:
    """Reward adjustment for completion lengths.

    Args:
        lengths: ``[N]`` completion lengths in tokens.
        max_len: the generation budget ``L_max``.
        buffer_len: the soft zone ``L_cache`` before ``max_len``, ``0 < buffer_len <= max_len``.
        penalty: magnitude of the punishment at and beyond ``max_len``.

    Returns:
        ``[N]`` float32 values in ``[-penalty, 0]``:
        0 if ``L <= max_len - buffer_len``;
        ``-penalty * (L - (max_len - buffer_len)) / buffer_len`` inside the buffer;
        ``-penalty`` if ``L > max_len``.
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(
            "overlong_penalty: need 0 < buffer_len <= max_len, "
            f"got buffer_len={buffer_len}, max_len={max_len}"
        )
    if penalty < 0:
        raise ValueError(f"overlong_penalty: penalty is a magnitude and must be >= 0, got {penalty}")
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    overshoot = (lengths - (max_len - buffer_len)).clamp(min=0)  # [N] tokens into the buffer
    return -penalty * (overshoot / buffer_len).clamp(max=1)
