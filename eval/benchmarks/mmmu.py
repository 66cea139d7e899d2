"""MMMU (Yue et al., CVPR 2024): ``mmmu_val`` (900 items, answers published) and ``mmmu_test``
(10,500 items, answers hidden: a submission file is written).

Files: the Hub dataset ``MMMU/MMMU``, one folder per subject (``Accounting/validation-*.parquet``
...; pass the top folder, every subject is read): ``id`` (``validation_<Subject>_<n>``),
``question`` with ``<image k>`` placeholders, ``options`` (a Python list written as a string),
``answer`` (a letter, or free text for open questions; ``?`` in test), ``question_type``
(``multiple-choice`` / ``open``), ``topic_difficulty``, ``image_1`` .. ``image_7`` (bytes).

Prompt (the reference's ``construct_prompt`` with its default format): the question, the options as
``(A) ...`` lines, then "Answer with the option's letter from the given choices directly." (open
questions: "Answer the question using a single word or phrase."). Images: those the question and
options name, in placeholder order (each once); the placeholders stay in the text.

Reading and scoring follow ``eval/eval_utils.py`` of the MMMU repository (rules in
:func:`parse_choice`, :func:`parse_open` and :func:`open_correct`). Results: overall, per discipline
and per subject, micro-averaged over items (``calculate_ins_level_acc``).
"""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path
from typing import Any, Mapping

from data_recipes.adapters.base import BadRow
from eval.benchmarks import files
from eval.benchmarks.base import BENCHMARKS, Benchmark, Item, Verdict, hidden

DISCIPLINES = {
    "Art and Design": ("Art", "Art_Theory", "Design", "Music"),
    "Business": ("Accounting", "Economics", "Finance", "Manage", "Marketing"),
    "Science": ("Biology", "Chemistry", "Geography", "Math", "Physics"),
    "Health and Medicine": (
        "Basic_Medical_Science", "Clinical_Medicine", "Diagnostics_and_Laboratory_Medicine", "Pharmacy",
        "Public_Health",
    ),
    "Humanities and Social Science": ("History", "Literature", "Sociology", "Psychology"),
    "Tech and Engineering": (
        "Agriculture", "Architecture_and_Engineering", "Computer_Science", "Electronics", "Energy_and_Power",
        "Materials", "Mechanical_Engineering",
    ),
}
DISCIPLINE_OF = {subject: discipline for discipline, subjects in DISCIPLINES.items() for subject in subjects}
MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
OPEN_INSTRUCTION = "Answer the question using a single word or phrase."
RANDOM_SEED = 42  # the reference seeds Python's random with 42 before parsing
IMAGE_COLUMNS = tuple(f"image_{k}" for k in range(1, 8))
_PLACEHOLDER = re.compile(r"<image (\d+)>")
_EDGE_MARKS = ",.!?;:'"  # stripped from both ends of a response, one mark after the other
_KEY_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ")
_TRIVIAL = {":", ",", ".", "!", "?", ";", "'"}
_NUMBER_PATTERNS = (
    re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b"),  # with thousands commas
    re.compile(r"-?\d+(?:\.\d+)?[eE][+-]?\d+"),  # scientific
    re.compile(r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"),  # plain
)


class MMMU(Benchmark):
    id_column = "id"
    max_new_tokens = 128
    layout = "Hub MMMU/MMMU: <Subject>/<split>-*.parquet (image_1..image_7 bytes); pass the folder of all subjects"

    def item(self, raw: Mapping[str, Any], item_id: str, folder: Path | None, path: str) -> Item:
        options = _literal_list(raw.get("options"))
        question_type = str(raw.get("question_type") or ("multiple-choice" if options else "open"))
        if question_type == "multiple-choice" and not options:
            raise BadRow("missing field", "'options' of a multiple-choice question")
        named = _PLACEHOLDER.findall(" ".join([str(raw.get("question") or ""), *options]))
        columns = [f"image_{k}" for k in sorted(set(named), key=int)] or list(IMAGE_COLUMNS)
        images, refs = files.images(raw, columns, folder, item_id=item_id, file_label=str(path))
        subject = "_".join(item_id.split("_")[1:-1])
        labels = {"discipline": DISCIPLINE_OF.get(subject, "unknown"), "subject": subject,
                  "question_type": question_type}
        if raw.get("topic_difficulty"):
            labels["difficulty"] = str(raw["topic_difficulty"])
        answer = raw.get("answer")
        answer = None if hidden(answer) else _literal_list(answer) if str(answer).startswith("[") else str(answer)
        fields = {"options": options, "question_type": question_type}
        return Item(item_id, str(raw.get("question") or ""), images, refs, answer, fields, labels)

    def official_prompt(self, item: Item) -> str:
        if item.fields["question_type"] != "multiple-choice":
            return f"{item.question}\n\n{OPEN_INSTRUCTION}"
        return f"{self.task_question(item)}\n\n{MC_INSTRUCTION}"

    def task_question(self, item: Item) -> str:
        options = "\n".join(f"({chr(65 + i)}) {option}" for i, option in enumerate(item.fields["options"]))
        return f"{item.question}\n\n{options}" if options else item.question

    def extract(self, completion: str, item: Item) -> Any:
        if item.fields["question_type"] != "multiple-choice":
            return parse_open(completion)
        return parse_choice(completion, item.fields["options"], random.Random(f"{RANDOM_SEED}:{item.id}"))

    def score(self, extracted: Any, item: Item) -> Verdict:
        if item.fields["question_type"] != "multiple-choice":
            correct = None if item.answer is None else open_correct(item.answer, extracted)
            return Verdict(extracted, extracted, correct)
        letter, note = extracted
        golds = item.answer if isinstance(item.answer, list) else [item.answer]
        return Verdict(letter, letter, None if item.answer is None else letter in golds, note)

    def submission(self, item: Item, completion: str, verdict: Verdict) -> tuple[str, Any]:
        """The reference's test output: the parsed letter, or an open question's response as given."""
        return item.id, verdict.prediction if item.fields["question_type"] == "multiple-choice" else completion


def _literal_list(value: Any) -> list[str]:
    """A list column that MMMU publishes as a Python list in a string (``"['1', '2']"``)."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise BadRow("bad field", f"not a list: {value[:60]!r}") from None
    return [str(v) for v in value or []]


def parse_choice(response: str, options: list[str], rng: random.Random) -> tuple[str, str]:
    """The option letter a response picks, and how it was found ("" plainly, ``random choice`` when not).

    The reference's rules: strip ``, . ! ? ; : '`` from both ends (in that order), pad with spaces;
    candidates are the letters written ``(X)``; else those standing alone as `` X ``; else, for a
    response of more than 5 words, the options whose text it contains (case-insensitive); several
    candidates: the one written last; none: a random letter (seeded).
    """
    for mark in _EDGE_MARKS:
        response = response.strip(mark)
    padded = f" {response} "
    letters = [chr(65 + i) for i in range(len(options))]
    forms = [f"({letter})" for letter in letters]
    candidates = [letter for letter, form in zip(letters, forms) if form in padded]
    if not candidates:
        forms = [f" {letter} " for letter in letters]
        candidates = [letter for letter, form in zip(letters, forms) if form in padded]
    haystack = padded
    if not candidates and len(padded.split()) > 5:
        haystack, forms = padded.lower(), [option.lower() for option in options]
        candidates = [letter for letter, form in zip(letters, forms) if form in haystack]
    if not candidates:
        return rng.choice(letters), "random choice"
    last = {letter: haystack.rfind(form) for letter, form in zip(letters, forms)}
    return max(candidates, key=lambda letter: (last[letter], -candidates.index(letter))), ""


def parse_open(response: str) -> list[Any]:
    """Candidate answers of an open response: numbers (floats rounded to 2 places) and lower-cased strings.

    The reference's rules: per line of the lower-cased response (its sentence split only fires
    before a capital, so after lower-casing only newlines split), the shortest tail after one of
    "could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result " (and "=" on
    the last line); no tail anywhere: the whole response. Each tail and every number in it become
    candidates (:func:`normalize_open`), duplicates removed.
    """
    text = response.strip().strip(".").lower()
    lines = text.split("\n")
    keys = []
    for index, line in enumerate(lines):
        indicators = _KEY_INDICATORS + (("=",) if index == len(lines) - 1 else ())
        shortest: str | None = None
        for indicator in indicators:
            if indicator in line:
                tail = line.split(indicator)[-1].strip()
                if not shortest or len(tail) < len(shortest):
                    shortest = tail
        if shortest and shortest.strip() not in _TRIVIAL:
            keys.append(shortest)
    keys = keys or [text]
    found = keys + [number for key in keys for pattern in _NUMBER_PATTERNS for number in pattern.findall(key)]
    candidates: list[Any] = []
    for value in found:
        for normal in normalize_open(value):
            if normal not in candidates:
                candidates.append(normal)
    return candidates


def normalize_open(text: str) -> list[Any]:
    """A number (commas removed) as a float rounded to 2 places; else the lower-cased text, a single
    character as ``[" x", "x "]`` so it only matches as a word."""
    text = text.strip()
    try:
        return [round(float(text.replace(",", "")), 2)]
    except ValueError:
        pass
    text = text.lower()
    return [f" {text}", f"{text} "] if len(text) == 1 else [text]


def open_correct(answer: str | list[str], candidates: list[Any]) -> bool:
    """The reference's open-question check: a number candidate equal to a normalised answer, or a
    text candidate containing a normalised text answer."""
    golds = [normal for gold in (answer if isinstance(answer, list) else [answer]) for normal in normalize_open(gold)]
    for candidate in candidates:
        if isinstance(candidate, str):
            if any(isinstance(gold, str) and gold in candidate for gold in golds):
                return True
        elif candidate in golds:
            return True
    return False


BENCHMARKS.add("mmmu_val", MMMU("mmmu_val", "validation"))
BENCHMARKS.add("mmmu_test", MMMU("mmmu_test", "test"))
