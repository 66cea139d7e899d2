"""``gsm8k``: grade-school math word problems (openai/gsm8k and copies in its schema), text only.

Columns: ``question`` and ``answer``, where the answer is the worked solution ending in a
line ``#### N``. The final answer is the number after the last ``####`` with thousands
commas removed (``#### 1,200`` -> 1200); the solution before it, without the calculator
annotations ``<<48/2=24>>``, becomes the row's ``reasoning`` (the cold-start SFT target's
think part, see ``Task.reference_completion``). A row without ``####`` or whose final
answer is not a number is skipped with that reason.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from data_recipes.adapters.base import BadRow, Row, field, register_adapter

FINAL_ANSWER_MARK = "####"
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_CALCULATOR_ANNOTATION = re.compile(r"<<[^<>]*>>")


def final_answer(solution: str) -> int | str:
    """The number after the last ``####``: an int when whole, else its text (``"2.5"``); else ``BadRow``."""
    if FINAL_ANSWER_MARK not in solution:
        raise BadRow("no final answer", f"answer has no {FINAL_ANSWER_MARK!r} line: {solution[-60:]!r}")
    text = solution.rpartition(FINAL_ANSWER_MARK)[2].strip().replace(",", "")
    if not _NUMBER.fullmatch(text):
        raise BadRow("non-numeric answer", f"the answer after {FINAL_ANSWER_MARK!r} is {text!r}")
    return int(text) if re.fullmatch(r"[-+]?\d+", text) else text


def worked_solution(solution: str) -> str:
    """The reasoning before the final ``####``, calculator annotations removed."""
    reasoning = solution.rpartition(FINAL_ANSWER_MARK)[0]
    return _CALCULATOR_ANNOTATION.sub("", reasoning).strip()


@register_adapter("gsm8k", columns=("question", "answer"))
def gsm8k(raw: Mapping[str, Any]) -> Row:
    """openai/gsm8k: ``question``, ``answer`` = worked solution + ``#### N``."""
    solution = str(field(raw, "answer"))
    row: Row = {"problem": field(raw, "question"), "answer": final_answer(solution)}
    reasoning = worked_solution(solution)
    if reasoning:
        row["reasoning"] = reasoning
    return row
