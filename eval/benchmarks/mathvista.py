"""MathVista (Lu et al., ICLR 2024): ``mathvista_testmini`` (1,000 items, answers published) and
``mathvista_test`` (5,141 items, answers hidden: a submission file is written).

Files: the Hub dataset ``AI4Math/MathVista`` (``data/testmini-*.parquet``, ``data/test-*.parquet``:
``pid``, ``question``, ``decoded_image`` bytes, ``image`` path, ``choices``, ``unit``, ``precision``,
``answer``, ``question_type``, ``answer_type``, ``metadata``, ``query``), or the GitHub release's
``data/testmini.json`` (an object keyed by pid) beside its ``images/`` folder.

Prompt: the row's ``query`` (the benchmark's own zero-shot prompt: hint, question, unit, choices);
rebuilt the same way when a file has none.

Scoring follows ``evaluation/calculate_score.py`` of the MathVista repository: a multiple-choice
answer becomes an option's text -- a letter (also inside ``(B)``) names its option, anything else
is mapped to the option at the smallest edit distance; an integer answer is ``str(int(float(x)))``;
a float is rounded to the item's ``precision`` (1.54 at precision 1 is "1.5"); a list is ``str(x)``;
the result must equal the answer string. Extraction follows ``extract_answer.py``'s rules (empty ->
""; a multiple-choice response that is an option; a response that parses as the answer type; with
``quick_extract``, ``The answer is "..."``); where the reference uses an LLM to read the rest, we read
it by rule (see :func:`read_answer`), so these scores are rule-extracted -- or, with ``eval.judge``, a
local judge model is asked (:data:`EXTRACTION_QUESTION`, zero-shot) and the verdict is noted
``judge-extracted``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, Verdict, category_labels, hidden

CATEGORY_KEYS = ("question_type", "answer_type", "language", "source", "category", "task", "context", "grade", "skills")
HINTS = {
    "multi_choice": "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end.",
    "integer": "Hint: Please answer the question requiring an integer answer and provide the final value, "
    "e.g., 1, 2, 3, at the end.",
    ("float", 1): "Hint: Please answer the question requiring a floating-point number with one decimal place "
    "and provide the final value, e.g., 1.2, 1.3, 1.4, at the end.",
    ("float", 2): "Hint: Please answer the question requiring a floating-point number with two decimal places "
    "and provide the final value, e.g., 1.23, 1.34, 1.45, at the end.",
    "list": "Hint: Please answer the question requiring a Python list as an answer and provide the final list, "
    "e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end.",
}
EXTRACTION_QUESTION = (
    "Below are a question and a model's response to it. Write the final answer the response gives and nothing "
    "else: the option letter for a multiple-choice question, the number for a numeric one, the Python list for a "
    "list. If it gives no answer, write nothing.\n\nQuestion:\n{query}\n\nResponse:\n{response}\n\nExtracted answer:"
)
_QUICK = re.compile(r'The answer is "(.*)"\.')
_LEAD_IN = re.compile(
    r"\b(?:final answer|correct answer|best answer|answer|best option|correct option|option|choice)\b\s*(?:is\b|:)?\s*:?\s*",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")
_LIST = re.compile(r"\[[^\[\]]*\]")
_LETTER = re.compile(r"\(?([A-Za-z])\)?[.:)]?")
_LETTER_THEN_TEXT = re.compile(r"\(?([A-Z])[.:)]\s+(.+)", re.DOTALL)


class MathVista(Benchmark):
    id_column = "pid"
    max_new_tokens = 1024
    layout = (
        "Hub AI4Math/MathVista: data/<split>-*.parquet (decoded_image bytes); "
        "or the GitHub release: data/<split>.json + data/images/ (or its rows as JSON lines)"
    )

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        columns = ["decoded_image"] if raw.get("decoded_image") else ["image"]
        images, refs = files.images(raw, columns, folder, item_id=item_id, file_label=str(path))
        choices = [str(choice) for choice in raw.get("choices") or []]
        fields = {
            "choices": choices,
            "question_type": raw.get("question_type") or "free_form",
            "answer_type": raw.get("answer_type") or "text",
            "precision": _precision(raw.get("precision")),
            "unit": raw.get("unit") or "",
            "query": raw.get("query") or "",
        }
        if fields["question_type"] == "multi_choice" and not choices:
            raise BadRow("missing field", "'choices' of a multi_choice question")
        metadata = raw.get("metadata") or {}
        labels = category_labels({**metadata, **fields}, CATEGORY_KEYS)
        answer = None if hidden(raw.get("answer")) else str(raw["answer"])
        return Item(item_id, str(raw.get("question") or ""), images, refs, answer, fields, labels)

    def official_prompt(self, item: Item) -> str:
        return item.fields["query"] or build_query(item)

    def task_question(self, item: Item) -> str:
        return "\n".join(part for part in (_question_text(item), _choices_text(item)) if part)

    def extract(self, completion: str, item: Item) -> str:
        return read_answer(completion, item.fields)

    def score(self, extracted: Any, item: Item) -> Verdict:
        prediction = normalize(extracted, item.fields)
        correct = None if item.answer is None else prediction == item.answer
        return Verdict(extracted, prediction, correct, _fallback(extracted, item.fields))

    def judge_question(self, completion: str, item: Item) -> str | None:
        if reference_steps(completion, item.fields) is not None:
            return None
        return EXTRACTION_QUESTION.format(query=self.official_prompt(item), response=completion.strip())

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        return item.id, {"pid": item.id, "response": completion, "extraction": verdict.extracted,
                         "prediction": verdict.prediction}


def _precision(value: Any) -> int | None:
    """Decimal places of a float answer: the Hub parquet stores them as floats (1.0), missing ones as null or NaN."""
    return None if value is None or value != value else int(value)


def build_query(item: Item) -> str:
    """The zero-shot query as the Hub files publish it: hint, question (and unit), choices."""
    fields = item.fields
    if fields["question_type"] == "multi_choice":
        hint = HINTS["multi_choice"]
    elif fields["answer_type"] == "float":
        hint = HINTS.get(("float", fields["precision"]), "")
    else:
        hint = HINTS.get(fields["answer_type"], "")
    return "\n".join(part for part in (hint, _question_text(item), _choices_text(item)) if part)


def _question_text(item: Item) -> str:
    unit = item.fields["unit"]
    return f"Question: {item.question}" + (f" (Unit: {unit})" if unit else "")


def _choices_text(item: Item) -> str:
    choices = item.fields["choices"]
    return "\n".join(["Choices:", *(f"({chr(65 + i)}) {c}" for i, c in enumerate(choices))]) if choices else ""


def read_answer(response: str, fields: Mapping[str, Any]) -> str:
    """The answer a response gives: the reference extractor's rule-based steps, then our reading of the rest.

    Reference steps: "" for an empty response; a multiple-choice response that is an option's text;
    a response that parses as the answer type (``int`` / ``float``); ``The answer is "..."``. Our
    reading, where the reference asks an LLM: the last ``\\boxed{}``, else the text after the last
    lead-in ("answer is", "Answer:", "best option:"), else the whole response; then for a
    multiple-choice question a lone letter (any case, bare or in ``(B)``/``B.``), the letter of a
    letter followed by text (``(B) Moved right.``), an option's text, or the only ``(X)`` named
    (two named: none); for a number, the last number in it (thousands commas removed, units
    dropped); for a list, the last ``[...]``. Nothing found: "" (the scorer then maps a
    multiple-choice answer to the closest option).
    """
    response = response.strip()
    official = reference_steps(response, fields)
    if official is not None:
        return official
    question_type, answer_type, choices = fields["question_type"], fields["answer_type"], fields["choices"]
    span = _answer_span(response)
    if question_type == "multi_choice":
        return _choice_answer(span, choices)
    if answer_type in ("integer", "float"):
        numbers = _NUMBER.findall(span) or _NUMBER.findall(response)
        return numbers[-1].replace(",", "") if numbers else ""
    if answer_type == "list":
        lists = _LIST.findall(span) or _LIST.findall(response)
        return lists[-1] if lists else ""
    return span


def reference_steps(response: str, fields: Mapping[str, Any]) -> str | None:
    """The reference extractor's steps before it asks an LLM: "" for an empty response, an option's
    text given as is, a response that parses as the answer type, ``The answer is "..."``; else None."""
    response = response.strip()
    if not response:
        return ""
    if fields["question_type"] == "multi_choice" and response in fields["choices"]:
        return response
    direct = _as_type(response, fields["answer_type"])
    if direct is not None:
        return direct
    quick = _QUICK.search(response)
    return quick.group(1) if quick else None


def _as_type(response: str, answer_type: str) -> str | None:
    """``str(int(x))`` / ``str(float(x))`` when the whole response parses as the answer type, else None."""
    try:
        if answer_type == "integer":
            return str(int(response))
        if answer_type == "float":
            return str(float(response))
    except ValueError:
        return None
    return None


def _answer_span(response: str) -> str:
    """The part of ``response`` that states the answer (the last boxed value or lead-in), else all of it."""
    boxed = _BOXED.findall(response)
    if boxed:
        return boxed[-1].strip()
    lead_ins = list(_LEAD_IN.finditer(response))
    if lead_ins:
        tail = response[lead_ins[-1].end():].strip()
        return re.split(r"\n", tail, maxsplit=1)[0].strip() or response
    return response


def _choice_answer(span: str, choices: list[str]) -> str:
    """A letter (upper-cased) or an option's text named by ``span``; "" when it names none or several."""
    text = span.strip().rstrip(".").strip()
    letters = [chr(65 + i) for i in range(len(choices))]
    mentioned = {m for m in re.findall(r"\(([A-Z])\)", text) if m in letters}
    if len(mentioned) > 1:  # two answers
        return ""
    lone = _LETTER.fullmatch(text)
    if lone and lone.group(1).upper() in letters:
        return lone.group(1).upper()
    pair = _LETTER_THEN_TEXT.fullmatch(text)
    if pair and pair.group(1) in letters:
        return pair.group(1)
    named = [c for c in choices if _loose(c) == _loose(text)]
    if len(named) == 1:
        return named[0]
    return mentioned.pop() if mentioned else ""


def _loose(text: str) -> str:
    return " ".join(text.lower().rstrip(".").split())


def normalize(extraction: Any, fields: Mapping[str, Any]) -> str | None:
    """The prediction ``calculate_score.py`` compares with the answer (rules in the module docstring)."""
    if fields["question_type"] == "multi_choice":
        choices = fields["choices"]
        text = extraction.strip() if isinstance(extraction, str) else str(extraction)
        letters = re.findall(r"\(([a-zA-Z])\)", text)
        if letters:
            text = letters[0].upper()
        options = [chr(65 + i) for i in range(len(choices))]
        return choices[options.index(text)] if text in options else closest(text, choices)
    answer_type = fields["answer_type"]
    try:
        if answer_type == "integer":
            return str(int(float(extraction)))
        if answer_type == "float":
            return str(round(float(extraction), int(fields["precision"])))
    except (TypeError, ValueError, OverflowError):  # the reference catches every error: no prediction, wrong
        return None
    return str(extraction) if answer_type == "list" else extraction


def _fallback(extraction: Any, fields: Mapping[str, Any]) -> str:
    """``closest option`` when a multiple-choice answer named no option (the scorer picked the nearest text)."""
    if fields["question_type"] != "multi_choice":
        return ""
    text = str(extraction).strip()
    named = re.search(r"\(([a-zA-Z])\)", text)
    letter = named.group(1).upper() if named else text
    letters = [chr(65 + i) for i in range(len(fields["choices"]))]
    return "" if text in fields["choices"] or letter in letters else "closest option"


def closest(text: str, choices: list[str]) -> str:
    """The first choice at the smallest edit distance from ``text``."""
    distances = [edit_distance(text, choice) for choice in choices]
    return choices[distances.index(min(distances))]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions each cost 1)."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


BENCHMARKS.add("mathvista_testmini", MathVista("mathvista_testmini", "testmini"))
BENCHMARKS.add("mathvista_test", MathVista("mathvista_test", "test"))
