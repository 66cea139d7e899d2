"""Where each sampled token's text ends within its completion's text: places process-reward step
spans (character offsets) on tokens."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase


class TokenTextEnds:
    """``ends(token_ids, text)[k]`` = length of the text of tokens ``0..k``, decoded as completions are
    (special tokens skipped). Each token's own text is decoded once per vocabulary entry."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self._pieces: dict[int, str] = {}

    def __call__(self, token_ids: Sequence[int], text: str, hidden: Sequence[tuple[int, int]] = ()) -> list[int]:
        """``hidden``: token ranges ``[start, end)`` whose text ``text`` leaves out (a trajectory's tool turns):
        they add no text."""
        shown = [True] * len(token_ids)
        for start, end in hidden:
            shown[start:end] = [False] * (end - start)
        pieces = [self._piece(token) if own else "" for token, own in zip(token_ids, shown)]
        if "".join(pieces) == text:
            return list(itertools.accumulate(len(piece) for piece in pieces))
        # Pieces that do not add up to the text (a character split over tokens, decoder clean-up of
        # spaces): decode each prefix of the shown tokens, keeping the ends non-decreasing.
        own_ids = [token for token, own in zip(token_ids, shown) if own]
        ends, longest = [], 0
        for count in itertools.accumulate(shown):
            longest = max(longest, len(self.tokenizer.decode(own_ids[:count], skip_special_tokens=True)))
            ends.append(longest)
        return ends

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=True)
        return self._pieces[token]
