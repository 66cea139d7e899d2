"""Sessions over a back end that takes all of a run's calls at once (a sandbox service's one-shot stdin).

A live session (:mod:`tasks.sandbox_local`) asks each call as the tests make it. A service cannot be asked a call
after a run has started, so a :class:`ReplaySession` runs the program again with every call the tests have made so
far, plus the rest of the calls they will make (the plan, :mod:`tasks.sandbox_plan`: the tests run here on the answers
known, stand-ins for the others, and again on more answers when a call was off the plan): tests whose calls are
planned take one run, not one per call. A call is answered only from a run whose earlier calls were exactly the ones
the tests made (calls compared as canonical JSON: ``1``, ``1.0`` and ``True`` are different calls), so a program
with state answers each call as a live session would have.

Bounds: the counted runs share one wall clock. A replayed call whose answer an earlier run gave is made again for
the state it leaves, its answer not written (``silent``) nor read, so the trainer decodes each needed answer about
once and at most ``answer_values`` values in all, and a service that keeps only the first part of a run's output
(SandboxFusion: 1 MiB) gets the answers past the cut in a later run. A run that went wrong after planned calls is
dropped before any of its answers is taken (neither its verdict, its answers nor its seconds count) and the
planned call it failed on leaves the plan (after
:data:`MAX_PLAN_MISSES` such runs, or a second wall clock spent on them, the whole plan does): a program may thus
take up to two wall clocks (the result's ``seconds`` shows both), never more.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field, replace
from typing import Callable

from tasks.sandbox import Evaluation, Events, SandboxLimits
from tasks.sandbox_grading import CallOutcome
from tasks.sandbox_plan import Guess

Evaluate = Callable[[str, list[list], SandboxLimits, int], Evaluation]
MAX_PLAN_MISSES = 8
"""Dropped runs after which the session stops planning (each one costs the program a run)."""
MAX_REPLANS = 8
"""Times the tests are planned again on the answers so far (each runs them all here, on stand-ins)."""


@dataclass(frozen=True)
class ReplayRun:
    """One run: how it ended, what it reported, the calls it asked (canonical keys), how many of them the tests had
    made when it started (the rest were planned) and where in the plan its planned ones start."""

    evaluation: Evaluation
    events: Events
    keys: list[str]
    made: int
    plan_start: int
    used: set[int] = field(default_factory=set)
    """The calls whose answers the tests took from this run (the others do not count in its result)."""

    @property
    def clean(self) -> bool:
        """Whether it ran to its end within every rule and limit."""
        return (self.evaluation.status == "ok" and bool(self.events.loaded) and not self.events.violations
                and not self.events.beyond_budget and not self.events.malformed)


def call_key(call: list) -> str:
    """A call as canonical JSON: equal only for the same names, kinds and values (``1 == 1.0 == True`` in Python)."""
    return json.dumps(call, sort_keys=True)


class ReplaySession:
    """Answers the tests' calls by runs of the whole program (see the module's docstring)."""

    def __init__(self, evaluate: Evaluate, source: str, limits: SandboxLimits) -> None:
        self.evaluate, self.source, self.limits = evaluate, source, limits
        self.asked: list[list] = []
        self.asked_keys: list[str] = []
        self.history: list[ReplayRun] = []
        self.dropped_seconds, self.misses, self.replans = 0.0, 0, 0
        self.planner: Callable[[Guess], list[list]] | None = None
        self._plan([])

    def expect(self, plan: Callable[[Guess], list[list]]) -> None:
        """``plan(guess)``: the calls the tests will probably make, in order, given the answers ``guess`` knows
        (none yet; later, :meth:`_replan`)."""
        self.planner = plan
        self._plan(plan(lambda call: None))

    def _guess(self) -> Guess:
        """What the runs so far answered to each call, wherever they asked it (a guess for a program with state)."""
        known = {run.keys[index]: outcome for run in self.history for index, outcome in run.events.outcomes.items()}
        return lambda call: known.get(call_key(call))

    def _replan(self) -> bool:
        """Plan the calls after the ones made so far again, on the answers the runs gave (at most :data:`MAX_REPLANS`
        times); whether the new plan starts with the calls the tests made."""
        if self.planner is None or self.replans >= MAX_REPLANS:
            return False
        self.replans += 1
        calls = self.planner(self._guess())
        if [call_key(call) for call in calls[:len(self.asked)]] != self.asked_keys:
            return False
        self._plan(calls[len(self.asked):])
        return True

    def _plan(self, calls: list[list]) -> None:
        self.plan, self.plan_keys, self.planned_from = list(calls), [call_key(call) for call in calls], 0
        self.plan_positions: dict[str, list[int]] = {}
        for position, key in enumerate(self.plan_keys):
            self.plan_positions.setdefault(key, []).append(position)

    @property
    def events(self) -> Events:
        return self.history[-1].events if self.history else Events()

    def _spent(self) -> float:
        return sum(run.evaluation.seconds for run in self.history)

    def _run(self, with_plan: bool) -> None:
        """Run the calls made so far, then (``with_plan``) the rest of the plan, within what is left of the wall
        clock (and, with planned calls, of the second one dropped runs may spend); the answers earlier runs gave are
        neither written nor read, and the rest count against the session's one budget of answer values."""
        tail = slice(self.planned_from, None) if with_plan else slice(0)
        calls, keys = self.asked + self.plan[tail], self.asked_keys + self.plan_keys[tail]
        wall = self.limits.wall_seconds - self._spent()
        if len(calls) > len(self.asked):
            wall = min(wall, self.limits.wall_seconds - self.dropped_seconds)
        answered = max(len(self.asked) - 1, 0)
        evaluation = self.evaluate(self.source, calls, replace(self.limits, wall_seconds=max(wall, 0.001)), answered)
        budget = self.limits.answer_values - sum(run.events.values for run in self.history)
        events = Events()
        if evaluation.status not in ("output_limit", "unavailable"):  # output past a limit is not read at all
            events = Events.parse(evaluation.events, evaluation.tag, len(calls), max(budget, 0), answered)
        # the output is parsed: only its tail (in stdout/stderr) is kept, not all of it per run
        self.history.append(ReplayRun(replace(evaluation, events=""), events, keys, len(self.asked),
                                      self.planned_from))

    def _unplanned_failure(self) -> bool:
        """Whether the latest run went wrong after asking planned calls (not when the service could not run it at
        all: no fault of the plan). It is dropped, and so is the planned call it failed on (the whole plan when it
        failed before them, after :data:`MAX_PLAN_MISSES` such runs or a second wall clock spent on them)."""
        last = self.history[-1] if self.history else None
        if last is None or last.clean or len(last.keys) <= last.made or last.evaluation.status == "unavailable":
            return False
        self.history.pop()
        self.dropped_seconds += last.evaluation.seconds
        self.misses += 1
        missed = next((index for index in range(last.made - 1, len(last.keys)) if index not in last.events.outcomes),
                      None)
        if missed is None or missed < last.made or self.misses >= MAX_PLAN_MISSES or self.dropped_seconds >= self.limits.wall_seconds:
            self._plan([])
            return True
        position, planned_from = last.plan_start + missed - last.made, self.planned_from
        self._plan(self.plan[:position] + self.plan[position + 1:])
        self.planned_from = planned_from - (planned_from > position)
        return True

    def call(self, call: list) -> CallOutcome | None:
        key = call_key(call)
        self.asked.append(call)
        self.asked_keys.append(key)
        index = len(self.asked) - 1
        positions = self.plan_positions.get(key, [])
        at = bisect.bisect_left(positions, self.planned_from)
        on_plan = at < len(positions)
        if on_plan:
            self.planned_from = positions[at] + 1
        while True:
            if self._unplanned_failure():  # before any of its answers is taken: it must not count at all
                continue
            if self.history:
                last = self.history[-1]
                asked_there = last.keys[:index + 1] == self.asked_keys
                if asked_there and index in last.events.outcomes:
                    last.used.add(index)
                    return last.events.outcomes[index]
                cut_before_it = last.evaluation.truncated and index >= last.made  # its answer may come in a run
                if (asked_there and not cut_before_it) or not last.clean or self._spent() >= self.limits.wall_seconds:
                    return None
            # a call off the plan (one needing an earlier answer) is asked with a new plan made on the answers so
            # far, or alone: the rest of the old plan would be asked again by every such call
            self._run(with_plan=on_plan or not self.history or self._replan())

    def close(self) -> list[tuple[Evaluation, Events]]:
        if not self.history or self._unplanned_failure():
            self._run(with_plan=False)
        runs = [(run.evaluation, replace(run.events, outcomes={index: outcome for index, outcome
                                                                in run.events.outcomes.items() if index in run.used}))
                for run in self.history]  # a planned call's answer the tests never took (a branch not run) is none
        last, events = runs[-1]
        last = replace(last, seconds=last.seconds + self.dropped_seconds)
        unanswered = any(not run.used for run in self.history[-1:]) and len(self.asked) > 0
        if last.status == "ok" and last.truncated and unanswered:
            last = replace(last, status="output_limit", error="the service returned only the first part of the "
                           "output (its cap: task.options.sandbox.output_cap_bytes) and a call's answer was past it")
        runs[-1] = (last, events)
        return runs
