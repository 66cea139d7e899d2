"""The sample gallery and the evaluation changes: what a report shows of individual prompts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GalleryGroup:
    """One logged prompt of one step and its completions (as ``completions.jsonl`` records them)."""

    step: int
    sample_id: str
    prompt: str
    answer: Any
    media: dict[str, list[str]]
    completions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> int:
        """Index of the completion with the highest reward."""
        return max(range(len(self.completions)), key=lambda i: self.completions[i]["reward"])

    @property
    def worst(self) -> int:
        return min(range(len(self.completions)), key=lambda i: self.completions[i]["reward"])

    @property
    def rewards_vary(self) -> bool:
        """False when every completion got the same reward (no best or worst to mark)."""
        return len({c["reward"] for c in self.completions}) > 1

    @property
    def any_correct(self) -> bool:
        return any(c.get("correct") for c in self.completions)


def gallery_groups(records: Sequence[dict[str, Any]], steps_shown: int) -> list[GalleryGroup]:
    """The logged completions grouped by (step, prompt), of ``steps_shown`` logged steps spread over
    the run (always the first and the last), in step order."""
    steps = sorted({int(record["step"]) for record in records})
    if len(steps) > steps_shown:
        picks = {round(i * (len(steps) - 1) / max(1, steps_shown - 1)) for i in range(steps_shown)}
        steps = [steps[i] for i in sorted(picks)]
    chosen = set(steps)
    groups: dict[tuple[int, str], GalleryGroup] = {}
    for record in records:
        step = int(record["step"])
        if step not in chosen:
            continue
        key = (step, str(record["sample_id"]))
        if key not in groups:
            groups[key] = GalleryGroup(step, key[1], record.get("prompt", ""), record.get("answer"), record.get("media", {}))
        groups[key].completions.append(record)
    return sorted(groups.values(), key=lambda group: group.step)


@dataclass(frozen=True)
class ChangedAnswer:
    """A held-out prompt whose first completion's correctness differs between two evaluations."""

    sample_id: str
    task: str
    answer: Any
    media: list[str]
    before: str
    after: str
    now_correct: bool
    prompt: str = ""  # the user's text (evaluations written before it was recorded have none)


def changed_answers(before: dict[str, Any], after: dict[str, Any], threshold: float = 0.5) -> list[ChangedAnswer]:
    """Items of two ``EvalResult.to_dict()`` evaluations (same prompts) whose first completion went from
    wrong to right or right to wrong, fixed ones first."""
    earlier = {item["sample_id"]: item for item in before.get("items", []) if item["completions"]}
    changed = []
    for item in after.get("items", []):
        old = earlier.get(item["sample_id"])
        if old is None or not item["completions"]:
            continue
        was, now = old["completions"][0]["metric"] >= threshold, item["completions"][0]["metric"] >= threshold
        if was != now:
            changed.append(ChangedAnswer(
                item["sample_id"], item["task"], item["answer"], item["media"],
                old["completions"][0]["text"], item["completions"][0]["text"], now, item.get("prompt", ""),
            ))
    return sorted(changed, key=lambda change: not change.now_correct)
