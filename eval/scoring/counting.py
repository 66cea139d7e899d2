"""Counting benchmarks: the count a completion states.

- :func:`r1v_count`: CLEVR counting and SuperCLEVR as R1-V scores them (Deep-Agent/R1-V
  ``src/eval/test_qwen2vl_counting_superclevr.py``: digits alone inside ``<answer>`` tags);
- :func:`count_answer`: a bare answer, for CountBench, whose paper (Paiss et al. 2023)
  publishes no scorer for generated text: lmms-eval ``countbench/utils.py``'s rule (the whole
  answer, stripped and lower-cased, as digits or a number word up to twenty).

The count is then compared with the annotation by equality.
"""

from __future__ import annotations

import re

from tasks.parsing import NUMBER_WORDS

_R1V_ANSWER = re.compile(r"<answer>\s*(\d+)\s*</answer>")
_COUNT_WORDS = {word: value for word, value in NUMBER_WORDS.items() if value <= 20} | {"none": 0}


def r1v_count(completion: str) -> int | None:
    """The integer in the first ``<answer> N </answer>`` of ``completion`` (ASCII digits and
    whitespace only: "3.", "three", "3 cubes" or a missing tag give None)."""
    found = _R1V_ANSWER.search(completion)
    return None if found is None else int(found.group(1))


def count_answer(prediction: str) -> int | None:
    """The count a bare answer is: ``" 7 "`` -> 7, ``"Seven"`` -> 7, ``"none"`` -> 0; else None
    ("7.", "7 dogs", "twenty-one", and "07": lmms-eval compares the normalised text with the
    annotation's digits as strings)."""
    text = prediction.strip().lower()
    if text in _COUNT_WORDS:
        return _COUNT_WORDS[text]
    return int(text) if re.fullmatch(r"0|[1-9][0-9]*", text) else None
