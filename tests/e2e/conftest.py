"""Fixtures of the multi-rank end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def rate_per_prompt_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reward that succeeds at a rate that differs by prompt (1 in ``answer`` completions, by a
    checksum of the text), from any policy."""
    plugin = tmp_path_factory.mktemp("plugins") / "rate_per_prompt.py"
    plugin.write_text(RATE_PER_PROMPT_PLUGIN)
    return plugin


RATE_PER_PROMPT_PLUGIN = '''
import zlib

from tasks import register_reward

@register_reward("one_in_answer")
def one_in_answer(completions, answer, **_):
    return [float(zlib.crc32(text.encode()) % int(n) == 0) for text, n in zip(completions, answer)]
'''
