"""The calls a replay back end asks in one run are found by running the tests here on stand-in answers."""

from __future__ import annotations

import random

from tasks.sandbox_child import encode
from tasks.sandbox_grading import CallOutcome, Caller, run_test
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


def test_calls_are_planned_in_the_order_the_tests_make_them_computed_arguments_included():
    assert planned_calls([HUMANEVAL], {"has_close_elements"}) == [
        asked("has_close_elements", [1.0, 2.0], threshold=0.5),
        asked("has_close_elements", [(1, 2)], threshold=-1),
        asked("has_close_elements", [3], threshold=0.1),  # the test's own helper, run here
    ]
    tests = ["import math\nassert math.isclose(area(2), 12.56, rel_tol=0.01)\nassert area(3) > 0",
             "assert len(sorted([3, 1])) == 2", "x = 3\nassert square(x) == 9", "assert square(b'\\x00') == 0",
             "assert sum(range(3)) == 3", "for n in range(3):\n    assert square(n) == n * n"]
    # isclose of a stand-in ends that test's planning; builtins and modules are never planned
    assert planned_calls(tests, {"area", "square"}) == [
        asked("area", 2), asked("square", 3), asked("square", b"\x00"), *(asked("square", n) for n in range(3))]
    assert planned_calls(["assert list(range(3)) == [0, 1, 2]"], {"range"}, frozenset({"range"})) == [asked("range", 3)]  # a row naming a builtin as the function under test


def test_inputs_drawn_from_random_are_planned_as_the_grading_will_draw_them():
    """HumanEval's random checks: the test's ``random`` is seeded from its text, here and when it is graded."""
    state = random.getstate()
    for test in ("import random\nfor _ in range(5):\n    n = random.randint(0, 10 ** 6)\n    assert twice(n) == 2 * n",
                 "from random import choice\nfor _ in range(5):\n    assert twice(choice(range(10 ** 6))) > 0",
                 "for _ in range(5):\n    assert twice(random.random()) < 2"):  # imported, from-imported, named
        graded = []
        caller = Caller(lambda call: graded.append(call) or CallOutcome.answer(2 * call[1][0], 1))
        assert run_test(0, test, caller, {"twice"}).passed and len(graded) == 5
        assert planned_calls([test], {"twice"}) == graded
    assert random.getstate() == state  # the trainer's random is not the tests'


def test_calls_needing_an_answer_are_left_to_their_own_run_and_loops_on_answers_end():
    tests = ["assert add(add(1, 1), 1) == 3", "while add(0, 0) > 0:\n    pass", "n = add(5, 5)\nwhile n:\n    n -= 1",
             "try:\n    add(7, 7)[0]\nexcept Exception:\n    pass\nassert add(8, 8) == 16"]
    assert planned_calls(tests, {"add"}) == [asked("add", 1, 1), asked("add", 0, 0), asked("add", 5, 5),
                                             asked("add", 7, 7), asked("add", 8, 8)]


def test_the_plan_is_bounded_and_tests_that_do_not_parse_are_skipped():
    tests = ["assert f(", *(f"assert f({i}) == {i}" for i in range(10))]
    assert planned_calls(tests, {"f"}, limit=4) == [asked("f", i) for i in range(4)]
    assert len(planned_calls(["while True:\n    f(1)"], {"f"}, limit=50)) == 50
