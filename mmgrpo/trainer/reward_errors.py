"""Record the reward failures of a step: ``reward_errors.jsonl`` in the run folder, plus one warning per reward.

Under ``task.reward_errors: skip`` a failed reward scores ``None`` for the completions it
failed on and the run goes on; this is where a user finds which reward failed, on which
sample and completion, and why. The step metrics count them as ``reward/<name>/errors``.
Each line carries its step, so a resumed run drops the lines of the steps it redoes
(:class:`~mmgrpo.trainer.metrics.MetricsLogger`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

from mmgrpo.run_files import REWARD_ERRORS_FILE, read_metrics
from tasks.reward_calls import RewardError

logger = logging.getLogger(__name__)


def record_reward_errors(run_dir: Path, step: int, errors: Sequence[RewardError]) -> None:
    """Append ``errors`` of ``step`` to ``run_dir/reward_errors.jsonl`` and warn once per failing reward."""
    if not errors:
        return
    path = run_dir / REWARD_ERRORS_FILE
    with open(path, "a", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"step": step, **error.to_dict()}) + "\n" for error in errors)
    by_reward: dict[str, list[RewardError]] = defaultdict(list)
    for error in errors:
        by_reward[error.reward].append(error)
    for reward, failed in by_reward.items():
        logger.warning(
            "step %d: reward %r failed on %d completion(s), scored None there; first: %s (all in %s)",
            step, reward, len(failed), failed[0].describe(), path,
        )


def reward_error_summary(run_dir: Path) -> dict[str, int | dict[str, int]]:
    """Failed reward scorings of the run (``reward_errors.jsonl``), in all and per reward, for ``summary.json``."""
    counts = Counter(row["reward"] for row in read_metrics(run_dir / REWARD_ERRORS_FILE))
    return {"reward_errors": sum(counts.values()), "reward_errors_by_reward": dict(counts.most_common())}
