"""``code``: write a Python function; rewards check the format, the syntax and hidden unit tests.

Rows: ``problem`` (the specification), ``answer`` (a reference solution: the cold-start SFT
target), ``tests`` (Python statements such as ``assert f(2) == 4``), optional ``entry_point``
and media (a specification in a picture). A completion answers with one fenced code block
(after its ``<think>`` part, when it thinks); code drafted inside ``<think>`` is not graded.

Rewards: ``code_format`` (exactly one fenced block and nothing else: a policy that runs on
past the closing fence loses it), ``code_syntax`` (it parses; checked here
without running it), ``code_tests`` (share of tests passed) and ``code_passed`` (all passed:
the eval metric, pass@1), the last two run in the sandbox the task's ``sandbox`` option names
(:mod:`tasks.sandbox`: back end and limits), ``sandbox_workers`` completions of a group at a time (as many parse
helpers at once for ``code_syntax``; each distinct source is parsed once, for all of them: :mod:`tasks.syntax`).
A run that breaks a sandbox rule or limit passes nothing; one the sandbox could not run at all
(``unavailable``: a service down) gets no verdict (None) rather than zero.
"""

from __future__ import annotations

import functools
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from mmgrpo.types import Sample
from tasks.base import RowError, Task, require
from tasks.code_fence import fenced_blocks
from tasks.registry import register_reward, register_task
from tasks.sandbox import Sandbox, SandboxLimits, SandboxResult, make_sandbox, run_tests
from tasks.shared_results import SharedResults, digest
from tasks.syntax import names_of_all, top_level_names

FUTURE_IMPORTS = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n|from __future__ import [^\n]*\n)*from __future__ import [^\n]*(?:\n|$)")
"""The blank, comment and ``from __future__`` lines that open a source, up to its last such import."""
MAX_COMPLETION_CHARS = 200_000
"""Longer completions are not graded (no code block): a bound on the text every code reward reads."""
THINK_END = "</think>"
CODE_THINK_INSTRUCTION = (
    "First think about the problem step by step inside <think> </think> tags, "
    "then give the complete function in one ```python code block."
)
CODE_ANSWER_INSTRUCTION = "Give only the complete function in one ```python code block."
SANDBOX_REWARDS = ("code_tests", "code_passed")


def graded_part(completion: str) -> str:
    """What is graded: the text after the think part (the whole completion without one)."""
    return completion.rpartition(THINK_END)[2] if THINK_END in completion else completion


def code_blocks(completion: str, max_chars: int = MAX_COMPLETION_CHARS) -> list[str]:
    """The fenced code blocks of ``completion``'s graded part; none when it is longer than ``max_chars``."""
    if len(completion) > max_chars:
        return []
    return [block.body for block in fenced_blocks(graded_part(completion))]


def only_one_block(completion: str, max_chars: int = MAX_COMPLETION_CHARS) -> bool:
    """Whether the graded part is exactly one fenced block, nothing but whitespace around it."""
    if len(completion) > max_chars:
        return False
    text = graded_part(completion).strip()
    blocks = fenced_blocks(text)
    return len(blocks) == 1 and blocks[0].start == 0 and blocks[0].end == len(text)


def single_block(completion: str, max_chars: int = MAX_COMPLETION_CHARS) -> str | None:
    """The one code block the completion answers with; None when it has none or several."""
    blocks = code_blocks(completion, max_chars)
    return blocks[0] if len(blocks) == 1 else None


def parses(source: str) -> bool:
    """Whether ``source`` is valid Python (compiled to a syntax tree only, never run, within a bound on this
    process's CPU, once per distinct source: :mod:`tasks.syntax`)."""
    return top_level_names(source) is not None


RUNS = SharedResults[SandboxResult](4096, keep=lambda result: result.status != "unavailable")
"""The latest 4,096 sandbox runs, one per (digest of the code, tests, entry points, sandbox, limits): ``code_tests``
and ``code_passed`` share them, and so do identical completions graded at once. A run the sandbox could not make
(``unavailable``) is not kept, so the next call retries."""


@functools.cache
def default_sandbox() -> tuple[Sandbox, SandboxLimits]:
    """The default back end and limits, for reward calls made without a task (made once)."""
    return make_sandbox()


def sandbox_results(completions: Sequence[str], tests: Sequence[Sequence[str]], sandbox: Sandbox | None,
                    limits: SandboxLimits | None, workers: int,
                    entry_point: Sequence[str | None] | None = None,
                    max_chars: int = MAX_COMPLETION_CHARS,
                    preamble: Sequence[str | None] | None = None) -> list[SandboxResult | None]:
    """Each completion's sandbox result (None without a single code block), ``workers`` at a time; a row's
    ``entry_point`` names the function under test (the only name that may shadow a builtin in its tests), its
    ``preamble`` is code run before the completion in the sandbox (HumanEval's helpers from the prompt: its
    harness runs prompt + completion)."""
    preambles = preamble or [None] * len(completions)
    sources = [_after(preambles[i], single_block(text, max_chars)) for i, text in enumerate(completions)]
    entry_points = [frozenset({name} if name else ()) for name in (entry_point or [None] * len(completions))]
    sandbox = sandbox or default_sandbox()[0]
    limits = limits or default_sandbox()[1]

    def run(index: int) -> SandboxResult | None:
        source = sources[index]
        if source is None:
            return None
        key = (digest(source), tuple(tests[index]), entry_points[index], sandbox, limits)
        return RUNS.get(key, lambda: run_tests(source, list(tests[index]), sandbox, limits, entry_points[index]))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(run, range(len(completions))))


def _after(preamble: str | None, source: str | None) -> str | None:
    """``source`` run after ``preamble`` (its definitions win over the preamble's); the ``from __future__`` imports
    that open ``source`` open the whole (they must come first)."""
    if not preamble or source is None:
        return source
    future = FUTURE_IMPORTS.match(source)
    if future is None:
        return f"{preamble}\n{source}"
    return f"{future.group()}\n{preamble}\n{source[future.end():]}"


@register_reward("code_format")
def code_format(completions: Sequence[str], *, max_chars: int = MAX_COMPLETION_CHARS, **_) -> list[float]:
    return [float(only_one_block(text, max_chars)) for text in completions]


@register_reward("code_syntax")
def code_syntax(completions: Sequence[str], *, max_chars: int = MAX_COMPLETION_CHARS, workers: int = 4,
                **_) -> list[float]:
    """Whether each completion's code block parses; long sources are parsed by helpers, ``workers`` at once."""
    sources = [single_block(text, max_chars) for text in completions]
    names = iter(names_of_all([source for source in sources if source is not None], workers))
    return [float(source is not None and next(names) is not None) for source in sources]


def _verdict(result: SandboxResult | None, score: float) -> float | None:
    """``score``, zero without a code block, None when the sandbox could not run the code at all."""
    if result is None:
        return 0.0
    return None if result.status == "unavailable" else score


@register_reward("code_tests")
def code_tests(completions: Sequence[str], tests: Sequence[Sequence[str]], *, sandbox: Sandbox | None = None,
               limits: SandboxLimits | None = None, workers: int = 4,
               entry_point: Sequence[str | None] | None = None, max_chars: int = MAX_COMPLETION_CHARS,
                preamble: Sequence[str | None] | None = None, **_) -> list[float | None]:
    results = sandbox_results(completions, tests, sandbox, limits, workers, entry_point, max_chars, preamble)
    return [_verdict(result, result.fraction_passed if result else 0.0) for result in results]


@register_reward("code_passed")
def code_passed(completions: Sequence[str], tests: Sequence[Sequence[str]], *, sandbox: Sandbox | None = None,
                limits: SandboxLimits | None = None, workers: int = 4,
                entry_point: Sequence[str | None] | None = None, max_chars: int = MAX_COMPLETION_CHARS,
                preamble: Sequence[str | None] | None = None, **_) -> list[float | None]:
    results = sandbox_results(completions, tests, sandbox, limits, workers, entry_point, max_chars, preamble)
    return [_verdict(result, float(result is not None and result.status == "passed")) for result in results]


@register_task("code")
class CodeTask(Task):
    default_rewards = {"code_format": 0.1, "code_syntax": 0.1, "code_tests": 1.0}
    metric_reward = "code_passed"
    default_reasoning = "I read the specification and write the function."

    def __init__(self, *, sandbox: Mapping[str, Any] | None = None, sandbox_workers: int = 4,
                 max_completion_chars: int = MAX_COMPLETION_CHARS, think_instruction: str = CODE_THINK_INSTRUCTION, answer_instruction: str = CODE_ANSWER_INSTRUCTION,
                 **options: Any) -> None:
        """``sandbox``: ``backend`` (``bwrap``, the default; ``http``; ``process``, unsafe), the back end's own
        settings and :class:`tasks.sandbox.SandboxLimits` fields (e.g. ``{wall_seconds: 5}``). A back end that
        cannot run here refuses to start, saying why. ``max_completion_chars``: longer completions are not graded
        (every code reward scores them 0), bounding the text the rewards read."""
        super().__init__(think_instruction=think_instruction, answer_instruction=answer_instruction, **options)
        self.sandbox, self.limits = make_sandbox(sandbox)
        if sandbox_workers < 1:
            raise ValueError(f"sandbox_workers must be at least 1, got {sandbox_workers}")
        self.sandbox_workers = sandbox_workers
        if max_completion_chars < 1:
            raise ValueError(f"max_completion_chars must be at least 1, got {max_completion_chars}")
        self.max_completion_chars = max_completion_chars

    def ground_truth(self, row: Mapping[str, Any]) -> str:
        solution = require(row, "answer")
        if not isinstance(solution, str) or not parses(solution):
            raise RowError(row, "answer", "the reference solution is not Python source that parses")
        return solution

    def task_fields(self, row: Mapping[str, Any]) -> dict[str, Any]:
        tests = require(row, "tests")
        if isinstance(tests, str):
            tests = [tests]
        if not tests or not all(isinstance(test, str) and parses(test) for test in tests):
            raise RowError(row, "tests", "needs a non-empty list of Python statements")
        preamble = row.get("preamble") or None
        if preamble is not None and not (isinstance(preamble, str) and parses(preamble)):
            raise RowError(row, "preamble", "is not Python source that parses")
        return {"tests": list(tests), "entry_point": row.get("entry_point"), "preamble": preamble}

    def format_answer(self, sample: Sample) -> str:
        return f"```python\n{sample.answer.rstrip()}\n```"

    def reference_completion(self, sample: Sample) -> str:
        if sample.extra.get("think") is False:
            return self.format_answer(sample)
        reasoning = sample.extra.get("reasoning") or self.default_reasoning
        return f"<think>{reasoning}</think>\n{self.format_answer(sample)}"

    def parse_answer(self, completion: str) -> str | None:
        return single_block(completion, self.max_completion_chars)

    def reward_options(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        names = None if names is None else set(names)
        options = super().reward_options(names)
        wanted = set(self.default_rewards if names is None else names)
        for name in wanted & {"code_format", "code_syntax", *SANDBOX_REWARDS}:
            options[name] = {**options.get(name, {}), "max_chars": self.max_completion_chars}
        for name in wanted & {"code_syntax", *SANDBOX_REWARDS}:
            options[name]["workers"] = self.sandbox_workers
        for name in wanted & set(SANDBOX_REWARDS):
            options[name].update(sandbox=self.sandbox, limits=self.limits)
        return options
