"""Code benchmarks in their public jsonl schemas -> rows of the ``code`` task.

- ``mbpp`` (google-research MBPP, full and sanitized): ``text`` or ``prompt`` (the
  specification), ``code`` (reference), ``test_list`` (assert statements), optional
  ``test_setup_code`` (run before each test). The first test is shown in the problem, as
  MBPP's own prompt does, so the function's name and signature are known.
- ``humaneval`` (openai HumanEval and its copies): ``prompt`` (signature and docstring),
  ``canonical_solution`` (the body), ``test`` (a ``check(candidate)`` function) and
  ``entry_point``; the one test calls ``check`` on the function, all or nothing. The prompt's own code but the
  entry point (helpers such as ``poly`` or ``encode_cyclic``, imports) opens the test: the grader defines those
  names from the dataset, so only the entry point is asked of the candidate (a candidate's own ``poly`` cannot
  grade its answer, and one that does not repeat the prompt's helpers is not failed for it).
"""

from __future__ import annotations

import ast
from typing import Any, Mapping

from data_recipes.adapters.base import BadRow, Row, field, first_field, register_adapter


def _statements(value: Any, column: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise BadRow("bad tests", f"{column!r} must be a non-empty list of Python statements")
    return [str(v) for v in value]


@register_adapter("mbpp", columns=("code", "test_list"), optional=(
    "task_id", "text", "prompt", "test_setup_code", "challenge_test_list", "test_imports", "source_file",
))
def mbpp(raw: Mapping[str, Any]) -> Row:
    tests = _statements(field(raw, "test_list"), "test_list")
    setup = str(raw.get("test_setup_code") or "").strip()
    specification = str(first_field(raw, ("text", "prompt"))).strip()
    return {
        "problem": f"{specification}\nYour code should pass this test:\n{tests[0]}",
        "answer": str(field(raw, "code")),
        "tests": [f"{setup}\n{test}" if setup else test for test in tests],
    }


def given_code(prompt: str, entry_point: str) -> str:
    """The prompt's code without the entry point's unfinished definition (empty when the prompt is not Python)."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return ""
    tree.body = [node for node in tree.body
                 if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point)]
    return ast.unparse(tree)


@register_adapter("humaneval", columns=("prompt", "canonical_solution", "test", "entry_point"), optional=("task_id",))
def humaneval(raw: Mapping[str, Any]) -> Row:
    prompt, entry_point = str(field(raw, "prompt")), str(field(raw, "entry_point")).strip()
    if not entry_point.isidentifier():
        raise BadRow("bad entry point", f"{entry_point!r} is not a Python name")
    return {
        "problem": f"Complete this Python function:\n```python\n{prompt.rstrip()}\n```",
        "answer": prompt + str(field(raw, "canonical_solution")),
        "tests": ["\n".join(filter(None, [given_code(prompt, entry_point), str(field(raw, "test")),
                                           f"check({entry_point})"]))],
        "entry_point": entry_point,
        "preamble": given_code(prompt, entry_point),  # the prompt's helpers, run before the completion as HumanEval does
    }
