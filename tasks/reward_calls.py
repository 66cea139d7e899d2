"""Call reward functions safely: a per-call timeout, a thread pool across groups, an error policy.

A reward is a plain Python callable, often a closure from a plugin file, so calls run on
threads: a process pool could not pickle such callables, and forking a process that holds
torch (and CUDA) state is unsafe. A thread cannot be killed, so a call past its timeout is
*abandoned*: it keeps running on a daemon thread until it returns (or the process exits),
and its completions count as errors. Threads overlap rewards that wait (sleeps, I/O, HTTP
judges, subprocesses, C code that releases the GIL); a pure-Python CPU-bound reward runs
no faster than serially.

A reward returns, per completion, a number (an outcome reward) or a list of steps (a process
reward): ``(char_start, char_end, score)`` spans of the completion, or one score per step of
the call's step rule (:mod:`tasks.steps`). Steps come back as spans in ``CallResult.steps``,
their mean as the completion's value (for reports).

A failure is per completion where it can be: a batch call that raises is retried item by
item, so one bad completion does not void its group; a NaN, inf or non-number is an error
of that item only. A call that times out or returns the wrong number of values fails for
all its completions. Abandoned calls are bounded: while a reward has ``workers`` of them
still running, its next calls fail at once as timeouts instead of starting more threads
(a reward that hangs for good cannot pile up threads over a long run).
"""

from __future__ import annotations

import functools
import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Literal, Sequence

from tasks.registry import REWARDS, RewardFn
from tasks.timed_calls import abandoned_calls, call_with_timeout
from mmgrpo.types import Span
from tasks.steps import split_steps

ErrorPolicy = Literal["raise", "skip"]


@dataclass(frozen=True)
class RewardPolicy:
    """How reward calls run and what a failed one does (the ``task.reward_*`` config keys).

    ``skip``: a failed completion scores ``None`` for that reward (left out of its weighted
    total) and is reported as a :class:`RewardError`; ``raise``: the first failure raises
    :class:`RewardFailure`. ``timeout`` is seconds per call (None = no limit).
    """

    errors: ErrorPolicy = "skip"
    timeout: float | None = 60.0
    workers: int = 4


@dataclass(frozen=True)
class RewardError:
    """One completion a reward could not score: which reward, sample and completion, and why."""

    reward: str
    sample_id: str
    completion: int  # index of the completion within its call (its group)
    kind: Literal["raised", "timeout", "non-finite", "not a number", "wrong length", "bad steps"]
    detail: str

    def describe(self) -> str:
        where = f"reward {self.reward!r} on sample {self.sample_id!r} (completion {self.completion})"
        return f"{where}: {self.kind}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RewardFailure(RuntimeError):
    """A reward failed under ``task.reward_errors: raise``; the message names the reward, sample and value."""

    def __init__(self, error: RewardError) -> None:
        super().__init__(f"{error.describe()} (task.reward_errors=raise; 'skip' scores it None and goes on)")
        self.error = error


@dataclass(frozen=True)
class RewardCall:
    """One reward function on one batch of completions (typically one group)."""

    reward: str
    completions: list[str]
    fields: dict[str, list[Any]]  # keyword fields, one entry per completion (see tasks.scoring.reward_fields)
    sample_ids: list[str]  # one per completion, for error reports
    options: dict[str, Any] = field(default_factory=dict)
    step_rule: str = "lines"  # how per-step scores are placed (tasks.steps)


@dataclass
class CallResult:
    """A call's value per completion (None = not applicable or failed) and its failures; for a
    process reward, each completion's step spans (None where it returned a number or failed)."""

    values: list[float | None]
    errors: list[RewardError]
    steps: list[list[Span] | None] | None = None  # None: no completion returned steps


def run_reward_calls(calls: Sequence[RewardCall], policy: RewardPolicy = RewardPolicy()) -> list[CallResult]:
    """Run ``calls`` on up to ``policy.workers`` threads; results in the order of ``calls``.

    An unknown reward name raises at once (a config error, whatever the policy). Under
    ``raise`` the first failure in call order raises :class:`RewardFailure`.
    """
    functions = [REWARDS.get(call.reward) for call in calls]
    workers = min(policy.workers, len(calls))
    if workers <= 1:
        results = [_run_call(fn, call, policy) for fn, call in zip(functions, calls)]
    else:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward")
        try:
            futures = [pool.submit(_run_call, fn, call, policy) for fn, call in zip(functions, calls)]
            results = [future.result() for future in futures]
        finally:  # on Ctrl-C, do not wait for queued calls
            pool.shutdown(wait=False, cancel_futures=True)
    if policy.errors == "raise":
        first = next((result.errors[0] for result in results if result.errors), None)
        if first is not None:
            raise RewardFailure(first)
    return results


def _run_call(fn: RewardFn, call: RewardCall, policy: RewardPolicy) -> CallResult:
    """The whole batch in one call; if it raises, each completion alone (per-item failures)."""
    everything = range(len(call.completions))
    if (hung := abandoned_calls(call.reward)) >= policy.workers:
        return _failed(call, everything, "timeout", f"not called: {hung} earlier calls still run past the timeout")
    outcome = call_with_timeout(
        functools.partial(fn, list(call.completions), **call.fields, **call.options), policy.timeout, call.reward
    )
    if outcome.timed_out:
        return _failed(call, everything, "timeout", f"no result after {policy.timeout:g} s (call abandoned)")
    if outcome.error is None:
        return _checked(call, outcome.value)
    if len(call.completions) == 1:
        return _failed(call, [0], "raised", _error_text(outcome.error))
    items = [_run_call(fn, _item(call, index), policy) for index in everything]
    errors = [replace(error, completion=index) for index, item in enumerate(items) for error in item.errors]
    steps = [item.steps[0] if item.steps else None for item in items]
    return CallResult(values=[item.values[0] for item in items], errors=errors,
                      steps=steps if any(step is not None for step in steps) else None)


def _item(call: RewardCall, index: int) -> RewardCall:
    """The call restricted to completion ``index``."""
    return RewardCall(
        reward=call.reward, completions=[call.completions[index]],
        fields={key: [values[index]] for key, values in call.fields.items()},
        sample_ids=[call.sample_ids[index]], options=call.options, step_rule=call.step_rule,
    )


def _checked(call: RewardCall, returned: Any) -> CallResult:
    """Values as floats or None; a non-number or non-finite value is an error of its completion."""
    try:
        values = list(returned)
    except TypeError:
        values = None
    if values is None or len(values) != len(call.completions):
        got = f"{len(values)} values" if values is not None else f"a {type(returned).__name__}"
        return _failed(call, range(len(call.completions)), "wrong length",
                       f"returned {got} for {len(call.completions)} completions")
    result = CallResult(values=[], errors=[])
    steps: list[list[Span] | None] = []
    for index, value in enumerate(values):
        if isinstance(value, (list, tuple)):
            spans, problem = _as_spans(value, call.completions[index], call.step_rule)
            number = sum(score for _, _, score in spans) / len(spans) if spans else None
        else:
            spans, (number, problem) = None, _as_number(value)
        result.values.append(number)
        steps.append(spans)
        if problem is not None:
            result.errors.append(RewardError(call.reward, call.sample_ids[index], index, *problem))
    result.steps = steps if any(spans is not None for spans in steps) else None
    return result


def _as_spans(value: list | tuple, text: str, rule: str) -> tuple[list[Span] | None, tuple[str, str] | None]:
    """A process reward's steps of ``text`` as spans sorted by end, or None and (kind, detail).

    Numbers are one score per step of ``rule``; triples are ``(char_start, char_end, score)``; an
    empty list is a completion without scored steps.
    """
    if value and all(not isinstance(step, (list, tuple)) for step in value):
        places = split_steps(text, rule)
        if len(places) != len(value):
            return None, ("bad steps", f"returned {len(value)} step scores but step rule {rule!r} finds "
                                       f"{len(places)} steps in the completion")
        value = [(start, end, score) for (start, end), score in zip(places, value)]
    spans = []
    for step in value:
        if not (isinstance(step, (list, tuple)) and len(step) == 3):
            return None, ("bad steps", f"a step is not (char_start, char_end, score): {short_repr(step)}")
        start, end, score = step
        number, problem = _as_number(score)
        if problem is not None:
            return None, problem
        if not (isinstance(start, numbers.Integral) and isinstance(end, numbers.Integral)
                and 0 <= start <= end <= len(text)):
            return None, ("bad steps", f"span ({start}, {end}) is not within the {len(text)} characters")
        spans.append((int(start), int(end), number))
    return sorted(spans, key=lambda span: (span[1], span[0])), None


def _as_number(value: Any) -> tuple[float | None, tuple[str, str] | None]:
    """``value`` as a float (numpy and torch scalars included), or None and (kind, detail) if unusable."""
    if value is None:
        return None, None
    try:
        number = float(value) if hasattr(type(value), "__float__") else None  # "__float__": not str/bytes
    except (TypeError, ValueError):
        number = None
    if number is None:
        return None, ("not a number", f"returned {short_repr(value)}")
    if not math.isfinite(number):
        return None, ("non-finite", f"returned {number}")
    return number, None


def _failed(call: RewardCall, indices: Sequence[int] | range, kind: str, detail: str) -> CallResult:
    return CallResult(
        values=[None] * len(call.completions),
        errors=[RewardError(call.reward, call.sample_ids[i], i, kind, detail) for i in indices],
    )


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (ending in ``...`` when cut): one line for a report."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
