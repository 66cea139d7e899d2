"""The calls the tests will probably make, read from their syntax (never run), so that a back end that takes all of
a run's calls at once (a sandbox service) asks them in one run rather than one more run per call.

A call is planned when the test names a candidate function (directly, e.g. ``assert add(1, 2) == 3``, or through
the parameter of a function the test defines and calls with it, as HumanEval's ``check(candidate)`` does) and its
arguments are literals; calls in source order, which is the order the tests make them unless they loop or branch.
A plan is only a guess: the grading asks the real calls all the same and a session uses a planned answer only when
the calls before it were the real ones (:class:`tasks.sandbox.ReplaySession`).
"""

from __future__ import annotations

import ast
from typing import Iterator

from tasks.sandbox_child import encode
from tasks.sandbox_grading import proxied_names

MAX_PLANNED_CALLS = 2_000
"""Most calls planned for one program (their answers count against the run's ``answer_values`` all the same)."""


def planned_calls(tests: list[str], candidate_names: set[str], entry_points: frozenset[str] = frozenset(),
                  limit: int = MAX_PLANNED_CALLS) -> list[list]:
    """The encoded calls ``[name, args, kwargs]`` the tests would make, in order, at most ``limit``."""
    plan: list[list] = []
    for test in tests:
        try:
            tree = ast.parse(test)
        except (SyntaxError, ValueError, RecursionError):
            continue
        names = proxied_names(test, candidate_names, entry_points)
        for call in _literal_calls(tree, {name: name for name in names} | _aliases(tree, names)):
            if len(plan) >= limit:
                return plan
            plan.append(call)
    return plan


def _aliases(tree: ast.Module, names: set[str]) -> dict[str, str]:
    """Parameters of the test's own functions that it calls with a candidate function: parameter -> candidate."""
    parameters = {node.name: [argument.arg for argument in node.args.args] for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in parameters:
            for parameter, argument in zip(parameters[node.func.id], node.args):
                if isinstance(argument, ast.Name) and argument.id in names:
                    aliases[parameter] = argument.id
    return aliases


def _literal_calls(tree: ast.Module, targets: dict[str, str]) -> Iterator[list]:
    """The calls of ``targets`` (a candidate's name, or a parameter standing for one -> the candidate's name) whose
    arguments are all literals, in source order."""
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in targets), key=lambda node: (node.lineno, node.col_offset))
    for node in calls:
        try:
            args = [ast.literal_eval(argument) for argument in node.args]
            kwargs = {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords}
            if None in kwargs:  # **mapping
                continue
            yield [targets[node.func.id], encode(args), encode(kwargs)]
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
