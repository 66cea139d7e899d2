"""``mmgrpo train`` (or ``mmgrpo sft``: ARGS starting with ``sft``) as one rank under torchrun, optionally stopped during step K's rollout by a
SIGTERM on every rank (as torchrun passes a scheduler's SIGTERM to each of them), or in SFT step K
(``--stop-in-sft-step K``), or with the last rank hanging there (``--hang-in-step K``)::

    torchrun --standalone --nproc-per-node 2 tests/e2e/distributed_train.py [--stop-in-step K] ARGS...

ARGS are ``mmgrpo train``'s, or ``sft`` and ``mmgrpo sft``'s. Launched by the 2-rank tests (``tests/e2e/ranks.py``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable

from mmgrpo.cli import main
from mmgrpo.trainer import grpo, sft


HANG_SECONDS = 600


def on_call(module: object, name: str, step: int, action: Callable[[], None]) -> None:
    """Run ``action`` at the ``step``-th call of ``module.name``, just before it."""
    real, calls = getattr(module, name), []

    def call_after_action(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == step:
            action()
        return real(*args, **kwargs)

    setattr(module, name, call_after_action)


def in_step(step: int, action: Callable[[], None]) -> None:
    """Run ``action`` when step ``step`` starts collecting rollouts."""
    on_call(grpo, "collect_rollouts", step, action)


def in_sft_step(step: int, action: Callable[[], None]) -> None:
    """Run ``action`` when SFT step ``step`` starts (as it reads its batch's completions)."""
    on_call(sft, "completion_token_ids", step, action)


def last_rank_hangs() -> None:
    if int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
        time.sleep(HANG_SECONDS)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    stop = lambda: os.kill(os.getpid(), signal.SIGTERM)  # noqa: E731
    faults = {"--stop-in-step": (in_step, stop), "--hang-in-step": (in_step, last_rank_hangs),
              "--stop-in-sft-step": (in_sft_step, stop)}
    if arguments[:1] and arguments[0] in faults:
        when, action = faults[arguments[0]]
        when(int(arguments[1]), action)
        arguments = arguments[2:]
    sys.exit(main(arguments if arguments[:1] == ["sft"] else ["train", *arguments]))
