"""The calls the tests will probably make, found by running them here on stand-in answers, so that a back end that
takes all of a run's calls at once (a sandbox service) asks them in one run rather than one more run per call.

Each test runs as the grading runs it (:func:`tasks.sandbox_grading.test_namespace`: the same proxies, the same
seeded ``random``), except that a call of the candidate's function is recorded, not asked, and answers a
:class:`StandIn`, and an ``assert`` is only evaluated, never raised: so ``for x in range(100): assert f(x) == x``
and HumanEval's ``check(candidate)`` with inputs drawn from ``random`` are planned whole. A call whose arguments
hold a stand-in (one that needs an earlier answer, ``f(f(2))``) cannot be planned at first; once a run has answered
the calls it needs, the tests are planned again on those answers (``guess``), so a loop of such calls
(HumanEval/38's ``candidate(encode_cyclic(s))``) takes a second run, not one per call.
A test's run on stand-ins ends at its first error (``math.isclose`` of a stand-in), or when its stand-ins have
been used :data:`MAX_STAND_IN_USES` times (a loop on an answer, ``while f(x) > 0``, that would never end).

A plan is only a guess: the grading asks the real calls all the same and a session uses a planned answer only when
the calls before it were the real ones (:class:`tasks.sandbox_replay.ReplaySession`). The tests are dataset
content, trusted as the grading trusts them (they run here either way).
"""

from __future__ import annotations

import ast
from typing import Any, Callable

from tasks.sandbox_child import encode
from tasks.sandbox_grading import CallOutcome, Caller, test_namespace

MAX_PLANNED_CALLS = 2_000
"""Most calls planned for one program (their answers count against the run's ``answer_values`` all the same)."""
MAX_STAND_IN_USES = 10_000
"""Operations on stand-ins after which a test's planning run is ended."""


class _PlanEnded(BaseException):
    """Ends a planning run (BaseException: a test's ``except Exception`` cannot swallow it)."""


class _Uses:
    """The count of operations on a test's stand-ins."""

    def __init__(self) -> None:
        self.count = 0

    def spend(self) -> None:
        self.count += 1
        if self.count > MAX_STAND_IN_USES:
            raise _PlanEnded


class StandIn:
    """An answer not known yet: equal to anything, true, neither less nor greater than anything, and whatever
    arithmetic, indexing, attribute or call makes of it is itself; it has no length, no number and nothing to iterate (a test using those ends its planning)."""

    def __init__(self, uses: _Uses) -> None:
        self._uses = uses

    def _same(self, *_: Any, **__: Any) -> StandIn:
        self._uses.spend()
        return self

    def _true(self, *_: Any) -> bool:
        self._uses.spend()
        return True

    def _false(self, *_: Any) -> bool:
        self._uses.spend()
        return False

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _same
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _same
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __invert__ = __getitem__ = __call__ = _same
    __eq__ = __bool__ = __contains__ = _true
    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _false  # so ``while f(x) > 0`` ends
    __hash__ = object.__hash__

    def __getattr__(self, name: str) -> StandIn:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._same()


Guess = Callable[[list], "CallOutcome | None"]
"""An answer an earlier run gave to the same encoded call, if any (a guess: it may have been given in another state)."""


class _Recorder(Caller):
    """Records each call whose arguments are known, answering what ``guess`` knows of it (its value, or its exception
    raised) or a stand-in; ends the plan past ``limit`` calls."""

    def __init__(self, limit: int, guess: Guess) -> None:
        super().__init__(guess)
        self.calls: list[list] = []
        self.limit, self.uses = limit, _Uses()

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        try:
            call = [name, encode(list(args)), encode(dict(kwargs))]
        except (TypeError, ValueError, RecursionError):  # a stand-in (or no plain data) among the arguments
            return StandIn(self.uses)
        self.calls.append(call)
        if len(self.calls) >= self.limit:
            raise _PlanEnded
        known = self.ask(call)
        return StandIn(self.uses) if known is None else known.result()


class _AssertsEvaluated(ast.NodeTransformer):
    """``assert x, message`` becomes ``x``: its calls are made, its verdict on stand-ins not taken."""

    def visit_Assert(self, node: ast.Assert) -> ast.Expr:
        return ast.copy_location(ast.Expr(self.visit(node.test)), node)


def planned_calls(tests: list[str], candidate_names: set[str], entry_points: frozenset[str] = frozenset(),
                  limit: int = MAX_PLANNED_CALLS, guess: Guess = lambda call: None) -> list[list]:
    """The encoded calls ``[name, args, kwargs]`` the tests would make, in order, at most ``limit``: on the answers
    ``guess`` knows, stand-ins for the others."""
    plan: list[list] = []
    for index, test in enumerate(tests):
        try:
            code = compile(ast.fix_missing_locations(_AssertsEvaluated().visit(ast.parse(test))), f"<plan {index}>",
                           "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        recorder = _Recorder(limit - len(plan), guess)
        try:
            exec(code, test_namespace(test, recorder, candidate_names, entry_points))
        except (Exception, _PlanEnded, SystemExit):  # noqa: BLE001 - its planning ends here, the grading will tell
            pass
        plan += recorder.calls
        if len(plan) >= limit:
            break
    return plan[:limit]
