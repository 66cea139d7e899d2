"""VQA accuracy over ten human answers, with the EvalAI answer normalisation (TextVQA).

facebookresearch/mmf ``mmf/utils/m4c_evaluators.py`` (``EvalAIAnswerProcessor``,
``TextVQAAccuracyEvaluator``) -- the evaluator of the TextVQA authors, the same
normalisation and leave-one-out average as GT-Vision-Lab/VQA
``PythonEvaluationTools/vqaEvaluation/vqaEval.py`` except that every human answer is
normalised too (vqaEval normalises the human answers' punctuation only when they disagree,
and uses a slightly different punctuation list).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUMBERS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}
_ARTICLES = frozenset({"a", "an", "the"})
_CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't",
    "dont": "don't", "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've",
    "hasnt": "hasn't", "havent": "haven't", "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've",
    "hes": "he's", "howd": "how'd", "howll": "how'll", "hows": "how's", "Id've": "I'd've",
    "I'dve": "I'd've", "Im": "I'm", "Ive": "I've", "isnt": "isn't", "itd": "it'd", "itd've": "it'd've",
    "it'dve": "it'd've", "itll": "it'll", "maam": "ma'am", "mightnt": "mightn't",
    "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've",
    "mustnt": "mustn't", "mustve": "must've", "neednt": "needn't", "notve": "not've",
    "oclock": "o'clock", "oughtnt": "oughtn't", "ow's'at": "'ow's'at", "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've", "she'dve": "she'd've",
    "shouldve": "should've", "shouldnt": "shouldn't", "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd", "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've", "somebodyll": "somebody'll", "somebodys": "somebody's",
    "someoned": "someone'd", "someoned've": "someone'd've", "someone'dve": "someone'd've",
    "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd",
    "somethingd've": "something'd've", "something'dve": "something'd've", "somethingll": "something'll",
    "thats": "that's", "thered": "there'd", "thered've": "there'd've", "there'dve": "there'd've",
    "therere": "there're", "theres": "there's", "theyd": "they'd", "theyd've": "they'd've",
    "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're", "theyve": "they've",
    "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've", "weve": "we've",
    "werent": "weren't", "whatll": "what'll", "whatre": "what're", "whats": "what's",
    "whatve": "what've", "whens": "when's", "whered": "where'd", "wheres": "where's",
    "whereve": "where've", "whod": "who'd", "whod've": "who'd've", "who'dve": "who'd've",
    "wholl": "who'll", "whos": "who's", "whove": "who've", "whyll": "why'll", "whyre": "why're",
    "whys": "why's", "wont": "won't", "wouldve": "would've", "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've", "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll",
    "y'allll": "y'all'll", "yall'd've": "y'all'd've", "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've", "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've",
    "youll": "you'll", "youre": "you're", "youve": "you've",
}
_PUNCTUATION = (
    ";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!",
)
_DIGIT_COMMA_DIGIT = re.compile(r"(?<=\d)(\,)+(?=\d)")
# Published as (?!<=\d): a negative lookahead, not a lookbehind -- every period not followed by a digit goes.
_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_PERIODS_REMOVED = 32  # the published call passes re.UNICODE (= 32) as sub()'s count argument


def _punctuation(text: str) -> str:
    """EvalAI ``process_punctuation``: each mark goes (next to a space, or in a text with a
    digit-comma-digit) or becomes a space; then periods not followed by a digit go."""
    out = text
    glue = _DIGIT_COMMA_DIGIT.search(text) is not None
    for mark in _PUNCTUATION:
        out = out.replace(mark, "" if glue or mark + " " in text or " " + mark in text else " ")
    return _PERIOD.sub("", out, count=_PERIODS_REMOVED)


def _digits_articles(text: str) -> str:
    """EvalAI ``process_digit_article``: number words 0-10 to digits, articles dropped, contractions restored."""
    words = [_NUMBERS.get(word, word) for word in text.lower().split()]
    return " ".join(_CONTRACTIONS.get(word, word) for word in words if word not in _ARTICLES)


def normalize_answer(answer: str) -> str:
    """An answer as EvalAI compares it (mmf ``EvalAIAnswerProcessor.__call__``).

    Lower-case; delete "," and "?"; "'s" -> " 's"; newlines and tabs to spaces; the
    punctuation rule; number words 0-10 to digits ("none" is "0"); articles a/an/the
    dropped; apostrophe-less contractions restored ("dont" -> "don't").
    """
    text = answer.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return _digits_articles(_punctuation(text))


def vqa_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """VQA accuracy of ``prediction`` against the human ``answers`` (TextVQA: ten of them).

    mmf ``TextVQAAccuracyEvaluator``: after :func:`normalize_answer` on all of them, the
    mean over each human answer left out of ``min(1, matches among the others / 3)`` --
    the average of min(#matches/3, 1) over the 10-choose-9 subsets. Of ten humans, one
    matching gives 0.3, two 0.6, three 0.9, four or more 1.0.
    """
    if not answers:
        raise ValueError("VQA accuracy needs at least one human answer")
    predicted = normalize_answer(prediction)
    humans = [normalize_answer(answer) for answer in answers]
    matches = humans.count(predicted)
    # Leaving out a matching answer leaves matches - 1 others; leaving out another leaves all of them.
    left_out = [min(1.0, (matches - (human == predicted)) / 3) for human in humans]
    return sum(left_out) / len(left_out)
