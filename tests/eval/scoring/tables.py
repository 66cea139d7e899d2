"""Tricky completions with the verdict of each benchmark's published scoring code.

A row: the completion, the ground truth, the official verdict (what the published code
reads, or the score it gives), why, and -- where lmms-eval 0.7.3 departs from the
published code -- lmms-eval's correctness on the same row (``SAME`` otherwise).
``test_scoring_oracle.py`` checks the ``lmms`` column against lmms-eval itself.
"""

from __future__ import annotations

from typing import Any, NamedTuple

SAME = "same"


class Case(NamedTuple):
    completion: str
    gold: Any
    verdict: Any
    why: str
    lmms: Any = SAME


# --- MMStar: VLMEvalKit exact matching, four options -------------------------------------
MMSTAR_OPTIONS = {"A": "cat", "B": "dog", "C": "horse", "D": "bird"}
MMSTAR = [
    Case("B", "B", "B", "the bare letter"),
    Case("B.", "B", "B", "letter with a period"),
    Case("(B)", "B", "B", "letter in parentheses"),
    Case("Best option:(B)", "B", "B", "MVBench-style lead-in: punctuation becomes spaces"),
    Case("The answer is B.", "B", "B", "lone letter among the last four words"),
    Case("b", "B", None, "a lower-case letter is no option letter and no option text"),
    Case("dog", "B", "B", "option text without a letter", 0.0),
    Case("Dog.", "B", "B", "option text, capitalised, trailing period", 0.0),
    Case("It is a dog", "B", "B", "free text holding one option's text", 0.0),
    Case("A dog.", "B", "A", "the article A reads as option A (VLMEvalKit warns only when VERBOSE)"),
    Case("B or C", "B", None, "two letters and no 'answer is': no answer", 1.0),
    Case("The answer is B, not C.", "B", "B", "two letters, but 'answer is B' decides", 0.0),
    Case("Cannot determine the answer", "B", None, "a refusal phrase"),
    Case("B. The animal in the picture is clearly a dog sitting on grass", "B", None,
         "letter not among the last four words, text over twice the options' length", 1.0),
    Case("The correct answer is **B**", "B", "B", "markdown bold around the letter"),
    Case("Z", "B", None, "VLMEvalKit's 'none of these' letter"),
    Case("the answer is b", "B", "B", "'answer is x' matches in any case", 0.0),
    Case("the answer is bird", "D", "B", "'answer is b(ird)': the regex reads the b of bird"),
    Case("<answer>B</answer>", "B", None, "tags are not separators: one word '<answer>B</answer>'", 1.0),
    Case("Answer: B", "B", "B", "colon becomes a space"),
    Case("B, dog", "B", "B", "letter and option text"),
    Case("cat or dog", "B", None, "two option texts: no answer"),
    Case("I think it's B because the dog is visible", "B", None,
         "letter too early, text longer than twice the options", 1.0),
    Case("\\boxed{B}", "B", "B", "braces become spaces"),
    Case("None of the options", "B", None, "unparseable"),
    Case("A", "B", "A", "a wrong letter"),
    Case("I pick B as final answer", "B", "B", "the letter is the fourth word from the end"),
    Case("I pick B as my final answer", "B", None, "the letter is the fifth word from the end: too early", 1.0),
]

# --- AI2D: the same VLMEvalKit rule; lmms-eval reads a leading 'X.' or compares the whole text --
AI2D_OPTIONS = {"A": "egg", "B": "larva", "C": "pupa", "D": "Adult butterfly."}
AI2D = [
    Case("B", "B", "B", "the bare letter"),
    Case("B.", "B", "B", "letter with a period"),
    Case("(B)", "B", "B", "letter in parentheses"),
    Case("b", "B", None, "lower-case letter: not read", 1.0),
    Case("larva", "B", "B", "option text", 0.0),
    Case("Larva.", "B", "B", "option text, capitalised, with a period", 0.0),
    Case("B. larva", "B", "B", "'B.' followed by the option text"),
    Case("Best option:(B)", "B", "B", "lead-in and parenthesised letter", 0.0),
    Case("The answer is B.", "B", "B", "sentence ending in the letter", 0.0),
    Case("adult butterfly", "D", None, "option text lacks the option's trailing period: no match"),
    Case("Adult butterfly.", "D", "D", "option text with its trailing period", 0.0),
    Case("A larva.", "B", "A", "the article A reads as option A"),
    Case("B or C", "B", None, "two letters"),
    Case("C", "B", "C", "a wrong letter"),
    Case("B\n", "B", "B", "trailing newline", 0.0),
    Case(" B.", "B", "B", "leading space"),
    Case("B) larva", "B", "B", "letter with a closing parenthesis", 0.0),
    Case("Answer: B", "B", "B", "'Answer:' lead-in", 0.0),
    Case("egg or larva", "B", None, "two option texts"),
    Case("<answer>B</answer>", "B", None, "tagged answer is one unreadable word"),
    Case("It is the larva stage, B", "B", "B", "letter at the end of free text", 0.0),
    Case("B. The stage shown at the arrow is the larva of the butterfly", "B", None,
         "letter too early and text too long", 1.0),
    Case("the answer is b", "B", "B", "'answer is b' in lower case", 0.0),
    Case("pupa", "B", "C", "a wrong option text"),
    Case("E", "B", None, "a letter beyond the options"),
]

# --- ScienceQA-IMG: LLaVA's eval_science_qa.py, three options ------------------------------
SCIENCEQA_CHOICES = ["cat", "dog", "horse"]
SCIENCEQA = [
    Case("B", "B", "B", "the bare letter"),
    Case(" B\n", "B", "B", "surrounding whitespace is stripped"),
    Case("B. dog", "B", "B", "'B. ' then text"),
    Case("B. ", "B", None, "stripped first (as LLaVA stores outputs): 'B.' is not read", 1.0),
    Case("B.", "B", None, "'B.' without the space after it is not read", 1.0),
    Case("(B)", "B", None, "parentheses are not read"),
    Case("b", "B", None, "lower-case letter", 1.0),
    Case("The answer is B.", "B", "B", "the ScienceQA sentence", 0.0),
    Case("The answer is B", "B", None, "the regex needs one character after the letter"),
    Case("The answer is B, because dogs bark.", "B", "B", "any character after the letter", 0.0),
    Case("The answer is B. The answer is C.", "B", None, "two 'The answer is' sentences"),
    Case("The answer is (B).", "B", None, "parenthesised letter after 'The answer is'"),
    Case("the answer is B.", "B", None, "the sentence is case-sensitive"),
    Case("Answer: B", "B", None, "'Answer:' lead-in"),
    Case("B: dog", "B", None, "letter with a colon"),
    Case("BC", "B", None, "two letters run together"),
    Case("", "B", None, "empty output"),
    Case("E", "B", None, "a letter beyond the three options"),
    Case("C. horse", "B", "C", "a wrong option"),
    Case("Best option:(B)", "B", None, "lead-in not read"),
    Case("dog", "B", None, "option text is not read"),
    Case("Because of the fur, the answer is B.\nThe answer is B.", "B", "B",
         "only the capitalised sentence counts: one match", 0.0),
]

# --- Video-MME: the eval_your_results.py its README links (thanku-all/parse_answer), four options --
VIDEOMME = [
    Case("B", "B", "B", "the bare letter"),
    Case("(B)", "B", "B", "parenthesised letter"),
    Case("B.", "B", "B", "letter with a period"),
    Case("The best answer is B.", "B", "B", "prefix removed"),
    Case("Best option: C", "C", "B", "'Best option:' is not removed (a missing comma in the list): B of Best", 1.0),
    Case("Best answer: C", "C", "B", "'Best answer:' is not removed either", 1.0),
    Case("Based on the video, the answer is C", "C", "B", "first capital A-D anywhere: B of Based", 1.0),
    Case("c", "C", None, "no capital A-D: unanswered, left out of the accuracy"),
    Case("I don't know", "B", None, "unanswered"),
    Case("Answer: D", "D", "D", "'Answer:' removed"),
    Case("Final Answer: C", "C", "C", "'Answer:' removed, 'Final' holds no capital A-D"),
    Case("**Answer:** C", "C", "C", "'Answer:' removed from inside the bold"),
    Case("Option: D", "D", "D", "'Option:' removed"),
    Case("The correct answer: D", "D", "D", "'The correct answer' removed"),
    Case("Correct Answer: B", "B", "C", "'Answer:' removed, then C of Correct", 1.0),
    Case("The answer is D", "D", "D", "prefix removed"),
    Case("The correct option is D", "D", "D", "no capital A-D before the letter"),
    Case("Option D", "D", "D", "lead-in without capitals A-D"),
    Case("A. The man is cooking", "A", "A", "letter then option text"),
    Case("The man is cooking (C).", "C", "C", "option text then letter"),
    Case("<answer>C</answer>", "C", "C", "tags hold no capitals"),
    Case("Dogs are running, so B", "B", "D", "D of Dogs", 1.0),
    Case("", "B", None, "empty output: unanswered"),
    Case("The answer: B", "B", "B", "'The answer' removed"),
    Case("E", "B", None, "no fifth option"),
    Case("After watching, C", "C", "A", "A of After", 1.0),
    Case("B or C", "B", "B", "two answers: the first"),
]

# --- MVBench: answer() post-processing, then check_ans on '(' + first line (the prompt prefills 'Best option:(') --
MVBENCH_CANDIDATES = ["man cooking", "dancing", "running", "swimming"]
MVBENCH = [
    Case("A) man cooking", "A", True, "letter, parenthesis, text"),
    Case("A", "A", True, "'(a' is a substring of '(a)'"),
    Case("B) dancing", "A", False, "a wrong option"),
    Case(" A)", "A", True, "stripped first"),
    Case("A.\nbecause it is", "A", True, "periods dropped, first line only"),
    Case("", "A", True, "empty reply: '(' is a substring of every option", 0.0),
    Case("(A) man cooking", "A", True, "'(a)' inside '((a)'"),
    Case("a) man cooking", "A", True, "lower-cased"),
    Case("The answer is A", "A", False, "first word '(the'", 1.0),
    Case("\nA) man cooking", "A", True, "leading newline stripped before the first line is cut"),
    Case("A)man cooking", "A", True, "'(a)' inside '(a)man'"),
    Case("C", "A", False, "a wrong letter"),
    Case("AB", "A", False, "'(ab' is not inside '(a)'"),
    Case(")", "A", False, "'()' matches nothing"),
    Case("A\nB) dancing", "A", True, "second line ignored"),
    Case("man cooking", "A", False, "option text alone: first word '(man'"),
    Case("B", "B", True, "the bare letter"),
    Case("D) swimming", "D", True, "last option"),
    Case("A) dancing", "A", True, "right letter, wrong text: only the letter counts"),
    Case("E) flying", "A", False, "no such option"),
    Case("A, man cooking", "A", False, "a comma after the letter: '(a,' neither inside '(a)' nor holding it", 1.0),
    Case("Assistant: A)", "A", True, "answer() keeps what follows the last 'Assistant:'"),
    Case("I think so. Assistant: A) man cooking", "A", True, "answer(): the text before 'Assistant:' goes"),
    Case("B) dancing ###A)", "A", False, "answer() keeps only the text before '###'"),
]
MVBENCH_NO_PREFILL = [
    Case("(A) man cooking", "A", True, "the model writes the parenthesis itself"),
    Case("Answer: A", "A", False, "first word 'answer:'", 1.0),
    Case("", "A", True, "empty first word is a substring of anything", 0.0),
    Case("A", "A", True, "'a' inside '(a)'"),
]

# --- TextVQA: VQA accuracy over ten human answers (mmf TextVQAAccuracyEvaluator) -----------
def _humans(*groups: tuple[int, str]) -> list[str]:
    """Ten human answers from (count, answer) groups."""
    answers = [answer for count, answer in groups for _ in range(count)]
    assert len(answers) == 10
    return answers


TEXTVQA = [
    Case("Coca-Cola", _humans((10, "coca cola")), 1.0, "a hyphen between letters becomes a space"),
    Case("coca cola.", _humans((10, "coca cola")), 1.0, "a period not before a digit goes"),
    Case("The Coca Cola", _humans((10, "coca cola")), 1.0, "case and articles go"),
    Case("two", _humans((3, "2"), (2, "two"), (5, "3")), 1.0, "number words 0-10 become digits, on both sides"),
    Case("yes", _humans((2, "yes"), (8, "no")), 0.6, "two matching humans"),
    Case("red", _humans((1, "red"), (9, "blue")), 0.3, "one matching human"),
    Case("red", _humans((3, "red"), (7, "blue")), 0.9, "three matching humans: 0.9, not 1"),
    Case("red", _humans((4, "red"), (6, "blue")), 1.0, "four matching humans"),
    Case("none", _humans((10, "0")), 1.0, "'none' is the number 0"),
    Case("1,000", _humans((10, "1000")), 1.0, "commas are deleted"),
    Case("don't", _humans((10, "dont")), 1.0, "'dont' is restored to don't"),
    Case("It's a STOP sign", _humans((10, "stop")), 0.0, "untagged free text"),
    Case("stop", _humans((5, "stop sign"), (5, "stop")), 1.0, "five of ten say 'stop'"),
    Case("12:30", _humans((10, "12:30")), 1.0, "a colon is kept"),
    Case("12.5", _humans((10, "12.5")), 1.0, "a decimal point is kept"),
    Case("3.0", _humans((10, "3")), 0.0, "precision: '3.0' is not '3'"),
    Case("$5", _humans((10, "5")), 0.0, "units: '$' is kept"),
    Case("ten dollars", _humans((10, "10 dollars")), 1.0, "number word inside a phrase"),
    Case("<answer>stop</answer>", _humans((10, "stop")), 0.0, "tags become words"),
    Case("STOP!", _humans((10, "stop")), 1.0, "exclamation mark goes"),
    Case("twenty", _humans((10, "20")), 0.0, "only zero to ten are mapped"),
    Case("", _humans((10, "the")), 1.0, "an empty answer equals an article-only answer"),
    Case("yes, stop", _humans((10, "yes stop")), 1.0, "comma deleted"),
    Case("e.g.", _humans((10, "eg")), 1.0, "periods go"),
]

# --- DocVQA: ANLS (RRC script) ---------------------------------------------------------------
DOCVQA = [
    Case("Paris", ["paris"], 1.0, "case-insensitive"),
    Case(" Paris ", ["Paris"], 1.0, "surrounding whitespace"),
    Case("Pari", ["Paris"], 0.8, "one edit in five"),
    Case("Lond", ["London"], 1 - 2 / 6, "two edits in six"),
    Case("Lon", ["London"], 0.5, "NL exactly 0.5 keeps 0.5"),
    Case("Lo", ["London"], 0.0, "NL above 0.5 scores 0"),
    Case("The answer is Paris", ["Paris"], 0.0, "untagged free text"),
    Case("$1,000", ["1000"], 1 - 2 / 6, "units and commas cost edits"),
    Case("1000", ["$1,000"], 1 - 2 / 6, "the other way round"),
    Case("12/15/89", ["12/15/88"], 1 - 1 / 8, "one wrong digit"),
    Case("Dear dr. Lobo", ["Dear Dr. Lobo", "Dr. Lobo"], 1.0, "best of several answers"),
    Case("Dr. Lobo", ["Dear Dr. Lobo", "Dr. Lobo"], 1.0, "matches the second answer"),
    Case("", ["abc"], 0.0, "empty prediction"),
    Case("", [""], 1.0, "both empty"),
    Case("paris   france", ["paris france"], 1.0, "inner whitespace collapsed"),
    Case("pari     ", ["paris"], 1 - 1 / 9, "trailing spaces count in the length, not in the distance"),
    Case("Straße", ["strasse"], 1 - 2 / 7, "length of the upper-cased text: 'ß' is 'SS'"),
    Case("paris, france", ["Paris"], 0.0, "extra words"),
    Case("10 a.m.", ["10:00 am", "10 am"], 1 - 2 / 7, "two periods to delete"),
    Case("<answer>Paris</answer>", ["Paris"], 0.0, "tags count as characters"),
    Case("Paris\n", ["Paris"], 1.0, "trailing newline"),
    Case("PARIS", ["paris"], 1.0, "upper case"),
]

# --- ChartQA: relaxed accuracy --------------------------------------------------------------
CHARTQA = [
    Case("12", "12", True, "equal"),
    Case("12.5", "12", True, "4.2% off"),
    Case("12.7", "12", False, "5.8% off"),
    Case("12.6", "12", True, "5% off (within float rounding)"),
    Case("1,000", "1000", False, "thousands separator: not a number, strings differ"),
    Case("1000", "1,000", False, "target with a separator is compared as a string"),
    Case("12%", "12", False, "'12%' is 0.12"),
    Case("12%", "0.12", True, "'12%' is 0.12"),
    Case("12", "12%", False, "the target '12%' is 0.12"),
    Case("0", "0", True, "target 0: string comparison"),
    Case("0.0", "0", False, "target 0: '0.0' is not '0' as a string"),
    Case("Yes", "yes", True, "text: case-insensitive"),
    Case("yes.", "yes", False, "text: trailing period"),
    Case("$12", "12", False, "units"),
    Case("12 ", "12", True, "float() ignores surrounding whitespace"),
    Case("The answer is 12", "12", False, "untagged free text"),
    Case("<answer>12</answer>", "12", False, "tags are not stripped"),
    Case("1e1", "10", True, "scientific notation is a number"),
    Case("-12", "12", False, "sign"),
    Case("12 kg", "12", False, "unit after the number"),
    Case("Twelve", "12", False, "number words are text"),
    Case("0.5", "50%", True, "percent target"),
    Case("2019", "2020", True, "years are numbers too: 0.05% off"),
    Case("nan", "12", False, "NaN compares false"),
]

# --- POPE: evaluate.py's yes/no reading (verdict: the parsed answer) ------------------------
POPE = [
    Case("Yes", "yes", "yes", "plain yes"),
    Case("yes", "yes", "yes", "lower case"),
    Case("No", "no", "no", "plain no"),
    Case("No.", "no", "no", "first sentence 'No'", 0.0),
    Case("Yes.", "yes", "yes", "first sentence 'Yes'", 0.0),
    Case("NO", "no", "yes", "'NO' is not one of No/no/not: read as yes", 1.0),
    Case("No, there is no dog.", "no", "no", "comma deleted, 'No' is a word", 0.0),
    Case("There is no dog in the image.", "no", "no", "negation inside the sentence", 0.0),
    Case("There is not a dog.", "no", "no", "'not' counts", 0.0),
    Case("Not", "no", "yes", "capitalised 'Not' is not in the list"),
    Case("Nope", "no", "yes", "'Nope' is not a negation word"),
    Case("no\n", "no", "yes", "words split on spaces only: 'no\\n' is not 'no'", 1.0),
    Case("Yes, there is a dog. No other animals.", "yes", "yes", "only the first sentence counts", 0.0),
    Case("", "no", "yes", "empty answer reads as yes"),
    Case("I cannot tell", "no", "yes", "unparseable reads as yes"),
    Case("Yes, but not clearly", "yes", "no", "'not' anywhere in the first sentence"),
    Case("There is a dog, not a cat", "yes", "no", "negation about something else"),
    Case("Yes\nNo", "yes", "yes", "'Yes\\nNo' is one word", 0.0),
    Case("<answer>no</answer>", "no", "yes", "tagged answer is one word"),
    Case("1.No", "no", "yes", "text before the first period is '1'"),
    Case("Absolutely no.", "no", "no", "'no' at the end", 0.0),
    Case("nothing", "no", "yes", "'nothing' is not 'no'"),
    Case("no", "yes", "no", "a wrong answer"),
]

# --- MME: calculation.py's yes/no/other reading ----------------------------------------------
MME = [
    Case("Yes", "yes", "yes", "plain yes"),
    Case("No", "no", "no", "plain no"),
    Case("yes.", "yes", "yes", "'yes' in the first four characters"),
    Case("No.", "no", "no", "'no' in the first four characters"),
    Case(" Yes", "yes", "yes", "one leading space still leaves 'yes' in four characters"),
    Case("  Yes", "yes", "other", "two leading spaces push 'yes' out of the first four", 1.0),
    Case("Y", "yes", "other", "a single letter", 1.0),
    Case("N", "no", "other", "a single letter", 1.0),
    Case("n.", "no", "other", "letter with a period", 1.0),
    Case("Yes, it is.", "yes", "yes", "yes first"),
    Case("No, it isn't", "no", "no", "no first"),
    Case("Not really", "no", "no", "'not ' holds 'no'"),
    Case("None", "no", "no", "'none' holds 'no'"),
    Case("nope", "no", "no", "'nope' holds 'no'"),
    Case("I think yes", "yes", "other", "yes too late"),
    Case("The answer is no", "no", "other", "no too late"),
    Case("", "no", "other", "empty answer"),
    Case("noyes", "no", "no", "'yes' not within the first four characters"),
    Case("Ye", "yes", "other", "truncated"),
    Case("YES!", "yes", "yes", "upper case"),
    Case("\nyes", "yes", "yes", "a newline is one character"),
    Case("\n\nyes", "yes", "other", "two newlines push 'yes' out", 1.0),
    Case("<answer>yes</answer>", "yes", "other", "tagged answer"),
    Case("know", "no", "no", "'know' holds 'no'"),
    Case("snow", "yes", "no", "'snow' holds 'no': a wrong answer"),
]

# --- RefCOCO: Qwen2.5-VL boxes (pixels of the 500x250 image shown; original 1000x500) --------
# No single published protocol: the verdicts are our documented rule (docs/benchmark_scoring.md, "Where we
# depart"); the rows where lmms-eval's utils_rec.py, VLM-R1's test_rec_baseline.py or Qwen-VL's
# evaluate_grounding.py decide otherwise say so, and test_scoring_boxes_counting.py pins exactly those.
# The annotation (100, 100, 300, 300) in original pixels is (50, 50, 150, 150) as shown.
REFCOCO_TRUTH = (100.0, 100.0, 300.0, 300.0)
REFCOCO_QWEN2_5 = [
    Case("[50, 50, 150, 150]", REFCOCO_TRUTH, True, "the exact box"),
    Case('```json\n[{"bbox_2d": [50, 50, 150, 150], "label": "dog"}]\n```', REFCOCO_TRUTH, True, "Qwen2.5-VL JSON"),
    Case("[100, 100, 300, 300]", REFCOCO_TRUTH, False, "original pixels instead of the resized image's: IoU 0.05"),
    Case("[50.5, 50.5, 150.5, 150.5]", REFCOCO_TRUTH, True, "decimals"),
    Case("[50,50,150,150] or [0,0,10,10]", REFCOCO_TRUTH, True, "two boxes: the first is the answer"),
    Case("[0,0,10,10] or [50,50,150,150]", REFCOCO_TRUTH, False, "two boxes: the first is wrong"),
    Case("x1=50, y1=50, x2=150, y2=150", REFCOCO_TRUTH, False, "no bracketed box"),
    Case("(50,50),(150,150)", REFCOCO_TRUTH, False, "Qwen2-VL notation is not Qwen2.5-VL's"),
    Case("[50, 50, 150]", REFCOCO_TRUTH, False, "three numbers"),
    Case("[-10, 50, 150, 150]", REFCOCO_TRUTH, True, "negative coordinate, IoU 0.625"),
    Case("[50, 50, 150, 100]", REFCOCO_TRUTH, True, "IoU exactly 0.5 is a hit (VLM-R1's IoU > 0.5: a miss)"),
    Case("[50, 50, 150, 99]", REFCOCO_TRUTH, False, "IoU 0.49"),
    Case("[150, 150, 50, 50]", REFCOCO_TRUTH, False, "inverted box has no area"),
    Case("<answer>[50, 50, 150, 150]</answer>", REFCOCO_TRUTH, True, "inside answer tags"),
    Case("[ 50 , 50 , 150 , 150 ]", REFCOCO_TRUTH, True, "spaces before the commas (lmms-eval's regex: no box)"),
    Case("[.5, 50, 150, 150]", REFCOCO_TRUTH, False, "a number without its leading 0 is no box (VLM-R1 reads .5)"),
    Case("The dog is at [40, 45, 160, 140].", REFCOCO_TRUTH, True, "free text around a close box"),
    Case("", REFCOCO_TRUTH, False, "no answer"),
]
# Qwen2-VL boxes on a 0-1000 grid (Qwen2-VL's documented grid, divided by 1000; Qwen-VL's script divides by 999)
# of the same 1000x500 original: the annotation is (100,200),(300,600).
REFCOCO_QWEN2 = [
    Case("<|box_start|>(100,200),(300,600)<|box_end|>", REFCOCO_TRUTH, True, "Qwen2-VL box tokens"),
    Case("(100,200),(300,600)", REFCOCO_TRUTH, True, "without the tokens"),
    Case("(100, 200), (300, 600)", REFCOCO_TRUTH, True, "a space between the corners (Qwen-VL's regex needs '),(')"),
    Case("(100,200)(300,600)", REFCOCO_TRUTH, True, "no comma between the corners (Qwen-VL's regex: no box)"),
    Case("(100,200),(300,400)", REFCOCO_TRUTH, True, "IoU exactly 0.5 on the 1000 grid (Qwen-VL's /999: 0.4995)"),
    Case("the dog (left one) is at (100,200),(300,600)", REFCOCO_TRUTH, True,
         "a parenthesis before the box (Qwen-VL's lazy regex starts at it: no box)"),
    Case("[100, 200, 300, 600]", REFCOCO_TRUTH, False, "Qwen2.5-VL notation is not Qwen2-VL's"),
    Case("(100,100),(300,300)", REFCOCO_TRUTH, False, "pixels instead of the 0-1000 grid: IoU 0.2"),
    Case("(0.1,0.2),(0.3,0.6)", REFCOCO_TRUTH, False, "0-1 instead of the 0-1000 grid"),
    Case("(100,200),(300,600) and (0,0),(5,5)", REFCOCO_TRUTH, True, "two boxes: the first"),
]

# --- Counting ----------------------------------------------------------------------------------
R1V_COUNT = [
    Case("<answer>3</answer>", 3, 3, "digits in tags"),
    Case("<answer> 3 </answer>", 3, 3, "spaces inside the tags"),
    Case("<answer>\n3\n</answer>", 3, 3, "newlines inside the tags"),
    Case("<think>two cubes, one ball</think><answer>3</answer>", 3, 3, "after reasoning"),
    Case("<answer>three</answer>", 3, None, "number word"),
    Case("<answer>3.</answer>", 3, None, "trailing period"),
    Case("3", 3, None, "untagged"),
    Case("<answer>3</answer><answer>4</answer>", 3, 3, "two answers: the first"),
    Case("<answer>4</answer><answer>3</answer>", 3, 4, "two answers: the first is wrong"),
    Case("<answer>03</answer>", 3, 3, "leading zero: the integer 3"),
    Case("<answer>3 cubes</answer>", 3, None, "unit"),
    Case("<Answer>3</Answer>", 3, None, "tags are case-sensitive"),
    Case("<answer>-3</answer>", 3, None, "sign"),
    Case("<answer>3</answer", 3, None, "unclosed tag"),
    Case("<answer>10</answer>", 10, 10, "two digits"),
    Case("<answer>1 0</answer>", 10, None, "digits split by a space"),
    Case("There are <answer>5</answer> objects", 5, 5, "text around the tags"),
    Case("<answer></answer>", 3, None, "empty tags"),
    Case("<answer>3.0</answer>", 3, None, "precision"),
    Case("<answer>3</answer>", 4, 3, "a wrong count"),
]
COUNTBENCH = [
    Case("3", 3, 3, "digits", ),
    Case(" 3 ", 3, 3, "surrounding whitespace"),
    Case("three", 3, 3, "number word"),
    Case("Three", 3, 3, "capitalised number word"),
    Case("3.", 3, None, "trailing period"),
    Case("3 dogs", 3, None, "unit"),
    Case("There are 3 dogs.", 3, None, "untagged free text"),
    Case("none", 0, 0, "'none' is 0"),
    Case("zero", 0, 0, "'zero' is 0"),
    Case("twenty", 20, 20, "largest word"),
    Case("twenty-one", 21, None, "compound words are not mapped"),
    Case("eleven", 11, 11, "teens"),
    Case("03", 3, None, "leading zero: '03' is not the string '3'"),
    Case("<answer>3</answer>", 3, None, "tags are not stripped"),
    Case("3\n", 3, 3, "trailing newline"),
    Case("3,000", 3000, None, "thousands separator"),
    Case("3.0", 3, None, "precision"),
    Case("three or four", 3, None, "two answers"),
    Case("4", 3, 4, "a wrong count"),
    Case("TEN", 10, 10, "upper case"),
]

# --- Aggregation: MMStar overall over unequal l2-categories (score, l2-category) ---------------
MMSTAR_MACRO = [(1.0, "object counting"), (1.0, "object counting"), (1.0, "object counting"), (0.0, "localization")]
