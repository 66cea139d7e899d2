"""A multiple-choice letter out of a model's free text, the way each benchmark's own code reads it.

Every reader returns the option letter it finds, or ``None`` when the published code would
not find one (that item then scores as wrong, except under Video-MME's rule, which leaves it
out of the accuracy -- see :func:`eval.scoring.aggregate.summarize`).

- :func:`vlmevalkit_choice`: MMStar and AI2D, as VLMEvalKit reads them without a judge model
  (its ``exact_matching`` policy; with an API key it asks a GPT judge about what its rules
  cannot read);
- :func:`scienceqa_choice`: ScienceQA-IMG, the LLaVA evaluation script built on ScienceQA's own;
- :func:`videomme_choice`: the ``eval_your_results.py`` Video-MME's README links;
- :func:`mvbench_prediction` + :func:`mvbench_correct`: MVBench's ``answer()`` and ``check_ans``;
- :func:`lmms_eval_choice`: lmms-eval 0.7.3's generic reader (its MMStar and Video-MME tasks),
  to reproduce numbers published with lmms-eval -- not any benchmark's own rule.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

Options = Mapping[str, str]  # option letter -> option text, in the order shown

_VLMEVALKIT_REFUSALS = (
    "Sorry, I can't help with images of people yet.",
    "I can't process this file.",
    "I'm sorry, but without the image provided",
    "Cannot determine the answer",
)
_VLMEVALKIT_SEPARATORS = str.maketrans({char: " " for char in ".()[],:;!*#{}"})
_VLMEVALKIT_ANSWER_IS = re.compile(r"(?i)(?:correct\s+)?answer\s+is\s+\**([ABCD])\**")
_VLMEVALKIT_TAIL = 4  # a lone letter counts only among the last four words


def option_letters(count: int) -> list[str]:
    """The letters of ``count`` options: ``["A", "B", ...]``."""
    return list(string.ascii_uppercase[:count])


def vlmevalkit_choice(prediction: str, options: Options) -> str | None:
    """The option ``prediction`` picks under VLMEvalKit's exact matching (``can_infer``).

    open-compass/VLMEvalKit ``vlmeval/utils/matching_util.py`` (``can_infer_option`` then
    ``can_infer_text``; ``extract_answer_from_item`` in ``vlmeval/dataset/utils/multiple_choice.py``
    scores anything else as wrong when no judge model is set). In order:

    1. a refusal phrase -> no answer;
    2. ``.()[],:;!*#{}`` become spaces, the text splits into words; if exactly one option
       letter is a word, it is the answer when it first appears among the last four words;
    3. no option letter but a word ``Z`` -> no answer (VLMEvalKit's "none of these");
    4. "answer is X" / "correct answer is **X**" (any case, X in A-D) -> X;
    5. exactly one option's text appears in the lower-cased prediction -> that option,
       unless the prediction is over twice as long as all option texts together.
    """
    if any(refusal in prediction for refusal in _VLMEVALKIT_REFUSALS):
        return None
    words = prediction.translate(_VLMEVALKIT_SEPARATORS).split()
    named = [letter for letter in options if letter in words]
    if len(named) == 1:
        if words.index(named[0]) >= len(words) - _VLMEVALKIT_TAIL:
            return named[0]
    elif not named and "Z" in words:
        return None
    stated = _VLMEVALKIT_ANSWER_IS.search(prediction)
    if stated and stated.group(1).upper() in options:
        return stated.group(1).upper()
    return _option_by_text(prediction, options)


def _option_by_text(prediction: str, options: Options) -> str | None:
    """VLMEvalKit's ``can_infer_text``: the one option whose text the prediction contains."""
    lowered = prediction.lower()
    if len(lowered) > 2 * sum(len(str(text)) for text in options.values()):
        return None
    found = [letter for letter, text in options.items() if str(text).lower() in lowered]
    return found[0] if len(found) == 1 else None


_SCIENCEQA_ANSWER_IS = re.compile(r"The answer is ([A-Z]).")
SCIENCEQA_LETTERS = ("A", "B", "C", "D", "E")


def scienceqa_choice(prediction: str, n_choices: int) -> str | None:
    """The option ``prediction`` picks under the ScienceQA evaluation of LLaVA.

    haotian-liu/LLaVA ``llava/eval/eval_science_qa.py`` (its last rule is ScienceQA's own,
    lupantech/ScienceQA ``models/run_gpt3.py``), on the stripped output as LLaVA's
    ``model_vqa_science.py`` writes it: the output is a letter A-E; or starts with a
    letter A-E, a period and a space (``"B. text"``); or holds exactly one
    ``"The answer is X"`` followed by any one character (the regex's unescaped ``.``).
    The letter must be one of the ``n_choices`` options. Anything else is no answer, scored
    wrong, as LLaVA's script does today (its ``return -1`` comes before the random guess of its
    first version).
    """
    text = prediction.strip()
    if text in SCIENCEQA_LETTERS:
        letter = text
    elif len(text) >= 3 and text[0] in SCIENCEQA_LETTERS and text[1:3] == ". ":
        letter = text[0]
    else:
        found = _SCIENCEQA_ANSWER_IS.findall(text)
        letter = found[0] if len(found) == 1 else ""
    return letter if letter and letter in option_letters(n_choices) else None


# The list of the script Video-MME's README links (thanku-all/parse_answer ``eval_your_results.py``),
# in its order. It was published with two missing commas, so two pairs of prefixes are single strings:
# "Best option: C" keeps its "Best option:" and reads as B (the B of "Best"). Kept as published.
_VIDEOMME_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
)


def videomme_choice(prediction: str) -> str | None:
    """The letter Video-MME reads in ``prediction``; None when it reads none ("unanswered").

    ``extract_characters_regex`` of the ``eval_your_results.py`` that Video-MME's README links
    (thanku-all/parse_answer; it replaced BradyFU/Video-MME ``evaluation/eval_your_results.py``,
    which lacked the last four prefixes): strip, delete the answer prefixes (case-sensitive,
    in order), then take the first capital A, B, C or D anywhere -- also inside a word
    ("Based on the video, C" reads as B; its extra ten-word rule never changes that outcome).
    "Answer: D" and "Final Answer: D" read as D. Unanswered items are left out of
    Video-MME's accuracy, not counted wrong.
    """
    text = prediction.strip()
    for prefix in _VIDEOMME_PREFIXES:
        text = text.replace(prefix, "")
    found = re.search("[ABCD]", text)
    return found.group(0) if found else None


MVBENCH_NO_ANSWER = "@"
"""The option letter the notebook gives an answer found among no candidates: the letter before A."""


def mvbench_gold(candidates: Sequence[str], answer: str) -> str:
    """The option letter of ``answer`` as MVBench's ``qa_template`` finds it.

    OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb``: its loop over the candidates keeps
    the LAST one equal to the answer (it never breaks), and an answer equal to none keeps
    index -1, the letter before "A" (:data:`MVBENCH_NO_ANSWER`), which no reply but an empty
    one matches.
    """
    found = [index for index, candidate in enumerate(candidates) if candidate == answer]
    return option_letters(len(candidates))[found[-1]] if found else MVBENCH_NO_ANSWER


def mvbench_answer(letter: str, text: str) -> str:
    """MVBench's ground truth as its ``qa_template`` writes it: ``"(A) text"``."""
    return f"({letter}) {text}"


def mvbench_reply(output: str) -> str:
    """The reply MVBench's notebook keeps of a model's output (its ``answer()`` post-processing).

    OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb``: the text before the first "###",
    then what follows the last "Assistant:", stripped.
    """
    return output.split("###")[0].split("Assistant:")[-1].strip()


def mvbench_prediction(completion: str, return_prompt: str = "(") -> str:
    """What MVBench's ``check_ans`` compares: ``return_prompt`` + the reply's first line.

    OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb``: the reply is the output as ``answer()``
    keeps it (:func:`mvbench_reply`); ``infer_mvbench`` strips it, cuts it at its first newline
    and puts the prefilled "(" of "Best option:(" back in front. Pass ``return_prompt=""`` for a
    prompt that prefills nothing.
    """
    lines = mvbench_reply(completion).strip().split("\n")
    return return_prompt + lines[0]


def mvbench_correct(prediction: str, answer: str) -> bool:
    """MVBench's ``check_ans``: is ``prediction`` (see :func:`mvbench_prediction`) the option ``answer``?

    OpenGVLab/Ask-Anything ``video_chat2/mvbench.ipynb``: both are lower-cased and split on
    single spaces; the first word of each is its option (``"(a)"``). Correct when the
    prediction's option without periods is a substring of the answer's option, or the
    answer's option is a substring of the prediction's. So ``"(a)"``, ``"(a)."``, ``"a"`` and
    ``"a)"`` all match ``"(a)"``; a prediction whose first word is empty or ``"("`` matches
    any answer, as published. The answer's text is never compared: where it is empty the
    notebook raises (an ``IndexError`` dropping a trailing period from it), here the row is
    scored by its option like any other.
    """
    predicted = prediction.lower().split(" ")[0]
    expected = answer.lower().split(" ")[0]
    return predicted.replace(".", "") in expected or expected in predicted


_LMMS_EDGE_PUNCTUATION = (",", ".", "!", "?", ";", ":", "'", '"')
_LMMS_PHRASES = (
    "the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
    "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
    "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select",
    "i pick", "my answer is", "my choice is",
)
# (template around the letter, priority): the last occurrence of each counts.
_LMMS_FORMS = (("({})", 6), ("{}.", 5), ("{}:", 4), ("{})", 3), ("{} ", 2))


def lmms_eval_choice(prediction: str, letters: Sequence[str] = ("A", "B", "C", "D")) -> str | None:
    """The letter lmms-eval 0.7.3 reads (``lmms_eval/tasks/_task_utils/mcq_extract.py``), or None.

    Edge punctuation stripped, every letter found in any of these forms becomes a candidate
    ranked by form, then by position (later wins): alone at the start (10) or the end (9)
    of the text; after an answer phrase such as "the answer is" (7, each letter's first
    occurrence after the phrase's first); ``(X)`` (6); ``X.`` (5); ``X:`` (4); ``X)`` (3);
    ``X `` (2); and, only when none of those exist, the letter anywhere (0). Capital
    letters only.
    """
    text = prediction.strip()
    if not text:
        return None
    for mark in _LMMS_EDGE_PUNCTUATION:
        text = text.strip(mark)
    padded, core = f" {text} ", text.strip()
    candidates = [(priority, padded.rfind(form.format(letter)), letter)
                  for form, priority in _LMMS_FORMS for letter in letters if form.format(letter) in padded]
    lowered = padded.lower()
    for phrase in _LMMS_PHRASES:
        start = lowered.find(phrase)
        if start >= 0:
            found = ((padded.find(letter, start + len(phrase)), letter) for letter in letters)
            candidates += [(7, position, letter) for position, letter in found if position >= 0]
    for letter in letters:
        if core.startswith(letter) and (len(core) == 1 or not core[1].isalpha()):
            candidates.append((10, 0, letter))
        if core.endswith(letter) and (len(core) == 1 or not core[-2].isalpha()):
            candidates.append((9, len(padded) - 1, letter))
    if not candidates:
        candidates = [(0, padded.rfind(letter), letter) for letter in letters if letter in padded]
    return max(candidates)[2] if candidates else None
