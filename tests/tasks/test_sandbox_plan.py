"""The calls a replay back end asks in one run are read from the tests' syntax, never run."""

from __future__ import annotations

from tasks.sandbox_child import encode
from tasks.sandbox_plan import planned_calls


def asked(name: str, *args: object, **kwargs: object) -> list:
    """The call as the grading asks it of the sandbox."""
    return [name, encode(list(args)), encode(kwargs)]

HUMANEVAL = """
def helper(x):
    return x

def check(candidate):
    assert candidate([1.0, 2.0], threshold=0.5) == True
    assert candidate([(1, 2)], threshold=-1) == False
    assert candidate(helper([3]), threshold=0.1)

check(has_close_elements)
"""


def test_calls_with_literal_arguments_are_planned_in_source_order_through_a_check_functions_parameter():
    assert planned_calls([HUMANEVAL], {"has_close_elements"}) == [
        asked("has_close_elements", [1.0, 2.0], threshold=0.5),
        asked("has_close_elements", [(1, 2)], threshold=-1),
    ]


def test_calls_of_builtins_modules_and_computed_arguments_are_not_planned():
    tests = ["import math\nassert math.isclose(area(2), 12.56, rel_tol=0.01)", "assert len(sorted([3, 1])) == 2",
             "x = 3\nassert square(x) == 9", "assert square(b'\\x00') == 0", "assert sum(range(3)) == 3"]
    assert planned_calls(tests, {"area", "square"}) == [asked("area", 2), asked("square", b"\x00")]
    assert planned_calls(["assert list(range(3)) == [0, 1, 2]"], {"range"}, frozenset({"range"})) == [asked("range", 3)]  # a row naming a builtin as the function under test


def test_the_plan_is_bounded_and_tests_that_do_not_parse_are_skipped():
    tests = ["assert f(", *(f"assert f({i}) == {i}" for i in range(10))]
    assert planned_calls(tests, {"f"}, limit=4) == [asked("f", i) for i in range(4)]
