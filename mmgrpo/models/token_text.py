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

    def __call__(self, token_ids: Sequence[int], text: str) -> list[int]:
        pieces = [self._piece(token) for token in token_ids]
        if "".join(pieces) == text:
            return list(itertools.accumulate(len(piece) for piece in pieces))
        # Pieces that do not add up to the text (a character split over tokens, decoder clean-up of
        # spaces): decode each prefix, keeping the ends non-decreasing.
        ends, longest = [], 0
        for count in range(1, len(token_ids) + 1):
            longest = max(longest, len(self.tokenizer.decode(token_ids[:count], skip_special_tokens=True)))
            ends.append(longest)
        return ends

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.tokenizer.decode([token], skip_special_tokens=True)
        return self._pieces[token]
