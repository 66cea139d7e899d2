"""A byte-level BPE tokenizer trained offline on a small built-in corpus.

Real checkpoints cannot be downloaded here, so tiny models get a tokenizer trained in
a second from text that looks like what the tests and recipes feed them: counting
questions, digits, number words, everyday English and the reasoning tags. The result
is wrapped in the family's own tokenizer class, so it saves and reloads exactly like a
real checkpoint's tokenizer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence

from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerBase

# Single tokens for the reasoning format; added as NORMAL tokens so decoding keeps them.
REASONING_TAGS: tuple[str, ...] = ("<think>", "</think>", "<answer>", "</answer>")

# Qwen's pre-tokenizer: words, single digits, punctuation runs, whitespace runs.
_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_NUMBER_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty",
)  # fmt: skip
_OBJECTS = ("objects", "cubes", "spheres", "cylinders", "squares", "circles", "beeps", "tones")
_COLOURS = ("red", "green", "blue", "yellow", "purple", "cyan", "gray", "brown", "orange", "pink")
_FILLER = (
    "You are a helpful assistant.",
    "Think step by step, then give the final answer.",
    "Put your reasoning in <think> </think> and the answer in <answer> </answer> tags.",
    "Look at the image and answer the question.",
    "Watch the video and listen to the audio carefully.",
    "The answer is a number. Let me count them one by one.",
    "First, I see the shapes. Then I add them up. So the total is",
    "What is shown in this picture? Describe it in one sentence.",
    "Which option is correct? A, B, C or D.",
    "The box is at (12, 34) to (56, 78) in pixel coordinates.",
)


# Text every prompt carries (chat roles, the default system prompt, the tasks' format
# instructions). Repeated in the corpus so BPE merges it into few tokens: short prompts
# make every forward of a tiny model cheaper.
_PROMPT_BOILERPLATE = (
    "system\nYou are a helpful assistant.",
    "user\nHow many objects are there?",
    "assistant\n",
    "Give only the final answer inside <answer> </answer> tags.",
    "First think about the question step by step inside <think> </think> tags, "
    "then give the final answer inside <answer> </answer> tags.",
)
_BOILERPLATE_REPEATS = 30

# Short arithmetic word problems (data_recipes/generators/arithmetic.py), so their words are
# whole tokens: a tiny model then reads the numbers and operations, not letters.
_WORD_PROBLEM_NAMES = ("Ann", "Ben", "Sam", "Mia")
_WORD_PROBLEM_ITEMS = ("apples", "pens", "cards", "coins")


def word_problems() -> list[str]:
    """One word problem per (name, item) pair, amounts varying, in the arithmetic recipe's phrasing."""
    return [
        f"{name} has {i % 10} {item}. {name} gets {(i + 3) % 10} more. {name} gives away {(i + 7) % 10}. "
        f"How many {item} does {name} have?"
        for i, (name, item) in enumerate(itertools.product(_WORD_PROBLEM_NAMES, _WORD_PROBLEM_ITEMS))
    ]


def tiny_corpus() -> list[str]:
    """The built-in training text: deterministic, a few hundred short lines."""
    counting = [f"How many {colour} {obj} are there?" for colour, obj in itertools.product(_COLOURS, _OBJECTS)]
    numbers = [
        f"<think>I count {word} {obj}.</think><answer>{n}</answer>"
        for (n, word), obj in itertools.product(enumerate(_NUMBER_WORDS), _OBJECTS[:3])
    ]
    arithmetic = [f"{a} + {b} = {a + b}" for a, b in itertools.product(range(10), repeat=2)]
    return [*_FILLER, *counting, *numbers, *arithmetic, *word_problems(), *_PROMPT_BOILERPLATE * _BOILERPLATE_REPEATS]


def corpus_fingerprint() -> str:
    """A short hash of the built-in corpus: tiny-model caches key on it, so a corpus change rebuilds them."""
    return hashlib.sha1("\n".join(tiny_corpus()).encode()).hexdigest()[:10]


def train_byte_level_bpe(corpus: Sequence[str], *, vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE (Qwen-style pre-tokenisation) and return its vocab and merges.

    ``vocab_size`` counts the 256 byte symbols plus the learned merges; special and
    added tokens are appended later by the tokenizer wrapper.
    """
    if vocab_size <= 256:
        raise ValueError(f"vocab_size must exceed the 256 byte symbols, got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bpe = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(pair) for pair in bpe["merges"]]
    return dict(sorted(bpe["vocab"].items(), key=lambda item: item[1])), merges


def build_tokenizer(
    tokenizer_class: type[PreTrainedTokenizerBase],
    *,
    vocab_size: int,
    special_tokens: Sequence[str],
    chat_template: str,
    corpus: Sequence[str] | None = None,
    plain_tokens: Sequence[str] = (),
    **tokenizer_kwargs: object,
) -> PreTrainedTokenizerBase:
    """Train a BPE and wrap it in ``tokenizer_class`` with the family's tokens and template.

    ``special_tokens`` (chat markers, media placeholders) get ids right after the BPE
    vocabulary, as in real checkpoints; ``plain_tokens`` (strings the family's vocabulary
    holds whole, decoded as text) and the reasoning tags follow as normal tokens.
    ``tokenizer_kwargs`` names the roles (``eos_token``, ``pad_token``, ...).
    """
    vocab, merges = train_byte_level_bpe(corpus or tiny_corpus(), vocab_size=vocab_size)
    normal_tokens = [*plain_tokens, *REASONING_TAGS]
    extra_tokens = [*special_tokens, *normal_tokens]
    # Appended to the vocab first so ids follow the listed order, like a real checkpoint's.
    vocab.update({token: len(vocab) + i for i, token in enumerate(extra_tokens)})
    tokenizer = tokenizer_class(vocab=vocab, merges=merges, **tokenizer_kwargs)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [_added(t, special=True) for t in special_tokens]},
        replace_extra_special_tokens=False,
    )
    tokenizer.add_tokens([_added(t, special=False) for t in normal_tokens])
    tokenizer.chat_template = chat_template
    return tokenizer


def _added(token: str, *, special: bool) -> AddedToken:
    return AddedToken(token, special=special, normalized=False, lstrip=False, rstrip=False)
