"""The ``code`` task: fenced-block extraction, format/syntax/test rewards, rows from the generator
and the MBPP/HumanEval adapters, every reference solution passing its own hidden tests."""

from __future__ import annotations

import pytest

from data_recipes.adapters import ADAPTERS, BadRow
from data_recipes.generators import GENERATORS, example_rng
from tasks import REWARDS, RowError, get_task, score_completions
from tasks.code import code_blocks, single_block
from tasks.sandbox import SandboxLimits

LIMITS = SandboxLimits(wall_seconds=5, cpu_seconds=3)
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]


def block(code: str, language: str = "python") -> str:
    return f"```{language}\n{code}\n```"


def test_only_the_code_after_thinking_is_graded_and_it_must_be_one_block():
    draft, final = "def f():\n    return 1", "def f():\n    return 2"
    assert single_block(f"<think>{block(draft)}</think>\n{block(final)}") == final + "\n"
    assert single_block(f"{block(draft)}\n{block(final)}") is None  # two answers
    assert single_block("def f(): return 2") is None  # not fenced
    assert code_blocks(block("x = 1", "py") + block("y = 2", "")) == ["x = 1\n", "y = 2\n"]


def test_format_syntax_and_test_rewards_score_what_they_name():
    completions = [
        block("def add(a, b):\n    return a + b"),  # right
        block("def add(a, b):\n    return a * b"),  # passes add(2, 2) only
        block("def add(a, b):\n    return a +"),  # does not parse
        "def add(a, b): return a + b",  # no block
        block("import socket\nsocket.create_connection(('127.0.0.1', 9), 1)\ndef add(a, b):\n    return a + b"),  # phones out
        block("def add(a, b):\n    return a + b") + "``````` and more",  # right, but runs on past the block
    ]
    tests = [ADD_TESTS] * len(completions)
    assert REWARDS.get("code_format")(completions) == [1, 1, 1, 0, 1, 0]
    assert REWARDS.get("code_syntax")(completions) == [1, 1, 0, 0, 1, 1]
    assert REWARDS.get("code_tests")(completions, tests, limits=LIMITS) == [1.0, 0.5, 0.0, 0.0, 0.0, 1.0]
    assert REWARDS.get("code_passed")(completions, tests, limits=LIMITS) == [1, 0, 0, 0, 0, 1]


def test_every_generated_reference_earns_full_reward_and_a_wrong_one_does_not():
    task = get_task("code", sandbox={"wall_seconds": 5})
    recipe = GENERATORS.get("code_functions")(scene_prob=0.3)
    samples = []
    for index in range(24):
        example = recipe.example(example_rng(7, index))
        samples.append(task.to_sample({"id": str(index), **example.fields}, think=index % 2 == 0))
    assert {sample.extra["tests"][0].split("(")[0] for sample in samples} >= {"assert count_shapes"}  # scenes too
    references = [task.reference_completion(sample) for sample in samples]
    scores = score_completions(references, samples, task.default_rewards, reward_options=task.reward_options())
    assert scores.total == pytest.approx([1.2] * len(samples)), scores.components
    assert all(task.metric(text, sample) == 1.0 for text, sample in zip(references, samples))
    wrong = block("def solve(*args):\n    return None")
    assert all(task.metric(wrong, sample) == 0.0 for sample in samples)


def test_generated_problems_are_seeded_and_options_checked():
    recipe = GENERATORS.get("code_functions")()
    assert recipe.example(example_rng(1, 3)).fields == recipe.example(example_rng(1, 3)).fields
    assert recipe.example(example_rng(1, 3)).fields != recipe.example(example_rng(1, 4)).fields
    with pytest.raises(ValueError, match="kinds must be"):
        GENERATORS.get("code_functions")(kinds=("sort",))
    with pytest.raises(ValueError, match="identifiers"):
        GENERATORS.get("code_functions")(names=("not a name",))


def test_rows_without_tests_or_with_a_broken_reference_are_refused_by_name():
    task = get_task("code")
    good = {"id": "p1", "problem": "Write add(a, b).", "answer": "def add(a, b):\n    return a + b\n",
            "tests": ADD_TESTS}
    assert task.to_sample(good).extra["tests"] == ADD_TESTS
    with pytest.raises(RowError, match="row 'p1', field 'tests'"):
        task.to_sample({**good, "tests": []})
    with pytest.raises(RowError, match="field 'tests'"):
        task.to_sample({**good, "tests": ["assert add(1, 2) =="]})
    with pytest.raises(RowError, match="field 'answer'"):
        task.to_sample({**good, "answer": "def add(a, b) return"})


MBPP_ROW = {
    "task_id": 2, "text": "Write a function to find the shared elements from the given two lists.",
    "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
    "test_list": ["assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
                  "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == set((3, 4))"],
    "test_setup_code": "", "challenge_test_list": [],
}
HUMANEVAL_ROW = {
    "task_id": "HumanEval/0", "entry_point": "has_close_elements",
    "prompt": "from typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
              '    """ Any two numbers closer than threshold? """\n',
    "canonical_solution": "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) "
                          "for b in numbers[i + 1:])\n",
    "test": "def check(candidate):\n    assert candidate([1.0, 2.0, 3.9, 4.0], 0.3) is True\n"
            "    assert candidate([1.0, 2.0, 3.0], 0.5) is False\n",
}

HUMANEVAL_LONG_ROW = {  # eight sequential asserts and a loop of ten calls, as real HumanEval checks have
    "task_id": "HumanEval/2", "entry_point": "truncate_number",
    "prompt": "def truncate_number(number: float) -> float:\n    \"\"\" The decimal part of a positive number. \"\"\"\n",
    "canonical_solution": "    return number % 1.0\n",
    "test": "def check(candidate):\n" + "".join(f"    assert abs(candidate({n}.5) - 0.5) < 1e-6\n" for n in range(8))
            + "    for n in range(10):\n        assert candidate(n + 0.25) == 0.25\n",
}


@pytest.mark.parametrize("name, raw", [("mbpp", MBPP_ROW), ("humaneval", HUMANEVAL_ROW),
                                       ("humaneval", HUMANEVAL_LONG_ROW)])
def test_public_code_rows_become_samples_whose_reference_passes(name, raw):
    adapter = ADAPTERS.get(name)
    assert adapter.matches(raw)
    task = get_task("code", sandbox={"wall_seconds": 5})
    sample = task.to_sample({"id": "0", **adapter.convert(raw)}, think=False)
    reference = task.reference_completion(sample)
    assert task.metric(reference, sample) == 1.0
    assert task.metric(block(raw.get("prompt", "") + "    return None\n"), sample) == 0.0


HUMANEVAL_HELPER_ROW = {  # HumanEval/38's shape: the prompt defines a helper the check uses
    "task_id": "HumanEval/38", "entry_point": "decode_cyclic",
    "prompt": "def encode_cyclic(s: str):\n    groups = [s[3 * i:3 * i + 3] for i in range((len(s) + 2) // 3)]\n"
              "    return ''.join(g[1:] + g[0] if len(g) == 3 else g for g in groups)\n\n\n"
              "def decode_cyclic(s: str):\n    \"\"\"Decodes what encode_cyclic encoded.\"\"\"\n",
    "canonical_solution": "    return encode_cyclic(encode_cyclic(s))\n",
    "test": "def check(candidate):\n    for word in ['abcdefg', 'xy', 'hello world']:\n"
            "        assert candidate(encode_cyclic(word)) == word\n",
}


def test_helpers_the_prompt_defines_are_the_datasets_not_the_candidates():
    """A candidate's own ``encode_cyclic`` cannot make wrong code pass; a right answer need not repeat the helper."""
    task = get_task("code", sandbox={"wall_seconds": 5})
    sample = task.to_sample({"id": "38", **ADAPTERS.get("humaneval").convert(HUMANEVAL_HELPER_ROW)}, think=False)
    assert task.metric(task.reference_completion(sample), sample) == 1.0
    forged = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    assert task.metric(block(forged), sample) == 0.0
    alone = ("def decode_cyclic(s):\n    groups = [s[3 * i:3 * i + 3] for i in range((len(s) + 2) // 3)]\n"
             "    return ''.join(g[-1] + g[:-1] if len(g) == 3 else g for g in groups)\n")
    assert task.metric(block(alone), sample) == 1.0


def test_a_completion_may_call_the_helpers_its_prompt_defines():
    """HumanEval's harness runs prompt + completion, so an entry point that calls the prompt's helper (HumanEval/10,
    /32, /38) is right: the prompt's code runs before the completion in the sandbox; the completion's own
    definitions still win there."""
    task = get_task("code", sandbox={"wall_seconds": 5})
    sample = task.to_sample({"id": "38", **ADAPTERS.get("humaneval").convert(HUMANEVAL_HELPER_ROW)}, think=False)
    calls_helper = "def decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n"
    assert task.metric(block(calls_helper), sample) == 1.0
    redefined = "def encode_cyclic(s):\n    return s\n\n" + calls_helper  # its own helper: wrong, as it wrote it
    assert task.metric(block(redefined), sample) == 0.0
    with pytest.raises(RowError, match="preamble"):
        task.to_sample({"id": "x", **ADAPTERS.get("humaneval").convert(HUMANEVAL_HELPER_ROW), "preamble": "def ("},
                       think=False)


def test_a_function_under_test_named_like_a_builtin_is_graded_only_when_the_row_names_it():
    """The tests keep the real builtins, except the entry point a row declares (here ``round``)."""
    task = get_task("code", sandbox={"wall_seconds": 5})
    row = {"id": "r", "problem": "Write round(x): halves round up.", "answer": "def round(x):\n    return int(x + 0.5)\n",
           "tests": ["assert round(2.5) == 3", "assert round(0.5) == 1"]}
    declared = task.to_sample({**row, "entry_point": "round"}, think=False)
    assert task.metric(task.reference_completion(declared), declared) == 1.0
    assert task.metric(block("def round(x):\n    return 0"), declared) == 0.0
    undeclared = task.to_sample(row, think=False)  # the builtin round(2.5) == 2: the tests see that one
    assert task.metric(task.reference_completion(undeclared), undeclared) == 0.0


def test_a_public_row_without_tests_is_a_bad_row():
    with pytest.raises(BadRow, match="test_list"):
        ADAPTERS.get("mbpp").convert({**MBPP_ROW, "test_list": []})
    with pytest.raises(BadRow, match="entry point"):
        ADAPTERS.get("humaneval").convert({**HUMANEVAL_ROW, "entry_point": "not a name"})
