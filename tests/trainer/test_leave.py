"""A finished run's ranks free their process groups before the interpreter exits (``Ranks.leave``): no gloo
worker thread is left to drop a collective's tensor while the interpreter finalizes (a rank aborted so, now
and then, after its work was done). Two ranks on CPU, ~10 s each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.torchrun import torchrun

WORKER = Path(__file__).with_name("leave_worker.py")


def _per_rank(*arguments: str) -> list[tuple[int, int, int]]:
    """(gloo workers while the group was in use, after leaving, groups that outlived their release) per rank."""
    done = torchrun(2, [str(WORKER), *arguments], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.findall(r"gloo workers during=(\d+) after=(\d+) outlived=(\d+)", done.stdout)
    assert len(found) == 2, done.stdout
    return [tuple(map(int, rank)) for rank in found]


@pytest.mark.parametrize("holders", [[], ["--held-by-objects"]], ids=["device-mesh", "objects-too"])
def test_leaving_joins_the_gloo_workers_whatever_held_the_group(holders):
    ranks = _per_rank(*holders)
    assert all(during > 0 for during, _, _ in ranks)  # the threads existed while the group was in use
    assert [(after, outlived) for _, after, outlived in ranks] == [(0, 0), (0, 0)], ranks


def test_a_group_something_else_still_holds_is_reported():
    ranks = _per_rank("--import-after-init")
    assert all(after > 0 and outlived == 1 for _, after, outlived in ranks), ranks
