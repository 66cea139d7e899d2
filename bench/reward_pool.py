"""Reward scoring time of one step: serial vs the worker pool, on a slow reward and on the built-in ones.

A slow reward (``--sleep`` seconds per call, like an HTTP judge or a sandboxed checker)
scores ``--groups`` groups of ``--generations`` completions, the rewards of all groups
going through one pool of N worker threads (``task.reward_workers``), for each N in
``--workers``. Then the built-in ``format`` + ``count_accuracy`` rewards (fast, pure
Python) with and without the per-call timeout thread, to show its overhead.

    python3 bench/reward_pool.py
    python3 bench/reward_pool.py --sleep 0.1 --groups 32 --workers 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import statistics
import time

from mmgrpo.types import Sample
from tasks import register_reward
from tasks.reward_calls import RewardPolicy
from tasks.scoring import score_batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleep", type=float, default=0.1, help="seconds the slow reward waits per call")
    parser.add_argument("--groups", type=int, default=32, help="groups (prompts) per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per group")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="pool sizes to time")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per setting (median reported)")
    args = parser.parse_args()

    @register_reward("bench_slow")
    def slow(completions: list[str], **_) -> list[float]:
        time.sleep(args.sleep)
        return [1.0] * len(completions)

    batches = [
        ([f"<think>x</think><answer>{i % 5}</answer>"] * args.generations,
         [Sample(id=f"s{i}", task="clevr_count", messages=[], answer=i % 5, extra={"problem": "How many?"})]
         * args.generations)
        for i in range(args.groups)
    ]
    print(f"slow reward: {args.sleep:g} s per call, {args.groups} groups x {args.generations} completions")
    serial = None
    for workers in args.workers:
        seconds = timed(batches, {"bench_slow": 1.0}, RewardPolicy(workers=workers), args.repeats)
        serial = serial or seconds
        print(f"  workers={workers:3d}: {seconds:6.3f} s  (x{serial / seconds:.1f} vs workers={args.workers[0]})")
    builtin = {"format": 0.1, "count_accuracy": 1.0}
    print("built-in format + count_accuracy:")
    for label, policy in [("no timeout, serial", RewardPolicy(timeout=None, workers=1)),
                          ("60 s timeout, serial", RewardPolicy(workers=1)),
                          ("60 s timeout, 4 workers", RewardPolicy(workers=4))]:
        print(f"  {label:24s}: {1000 * timed(batches, builtin, policy, args.repeats):7.1f} ms")


def timed(batches, weights: dict[str, float], policy: RewardPolicy, repeats: int) -> float:  # noqa: ANN001
    """Median seconds of scoring every batch of one step."""
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        score_batches(batches, weights, policy=policy)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


if __name__ == "__main__":
    main()
