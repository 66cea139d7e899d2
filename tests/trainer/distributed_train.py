"""``mmgrpo train`` as one rank under torchrun, optionally stopped during step K's rollout by a
SIGTERM on every rank (as torchrun passes a scheduler's SIGTERM to each of them)::

    torchrun --standalone --nproc-per-node 2 tests/trainer/distributed_train.py [--stop-in-step K] ARGS...

ARGS are ``mmgrpo train``'s. Launched by ``test_distributed_run.py``.
"""

from __future__ import annotations

import os
import signal
import sys

from mmgrpo.cli import main
from mmgrpo.trainer import grpo


def stop_in_step(step: int) -> None:
    real_collect, calls = grpo.collect_rollouts, []

    def collect_then_stop(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == step:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_collect(*args, **kwargs)

    grpo.collect_rollouts = collect_then_stop


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if arguments[:1] == ["--stop-in-step"]:
        stop_in_step(int(arguments[1]))
        arguments = arguments[2:]
    sys.exit(main(["train", *arguments]))
