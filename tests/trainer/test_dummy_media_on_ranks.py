"""Which runs get the dummy media pass on several ranks, and which are still refused."""

from __future__ import annotations

import pytest

from mmgrpo.distributed import Ranks
from mmgrpo.inputs import SampleSet
from mmgrpo.models.dummy_media import installed_dummy_media_pass
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.pipeline import _dummy_media_on_ranks
from mmgrpo.types import Sample


def rows(*kinds: str) -> SampleSet:
    """One row per kind: ``"image"`` / ``"video"`` rows of task count, ``"text"`` rows of task math."""
    samples = []
    for index, kind in enumerate(kinds):
        content = [{"type": "text", "text": "How many?"}]
        if kind != "text":
            content.insert(0, {"type": kind, kind: f"/media/{index}.png"})
        samples.append(Sample(id=str(index), task="math" if kind == "text" else "count",
                              messages=[{"role": "user", "content": content}]))
    return SampleSet(samples=samples, tasks={})


@pytest.fixture()
def policy(tiny_model_dir):
    model, _ = load_model_and_processor(tiny_model_dir("qwen2_5_vl"), dtype="float32")
    return model


@pytest.mark.parametrize("kinds, world_size, tools, expected", [
    (("image", "text"), 2, False, True),
    (("image", "video"), 2, False, True),  # Qwen-VL runs its tower once per kind
    (("image", "text"), 1, False, False),
    (("image", "image"), 2, False, False),
    (("text", "text"), 2, False, False),
    (("image", "image"), 2, True, True),  # a tool's images inside one rank's completions
    (("image", "image"), 1, True, False),
])
def test_the_pass_is_installed_for_mixed_media_or_tools_on_several_ranks(policy, kinds, world_size, tools,
                                                                          expected) -> None:
    _dummy_media_on_ranks(policy, (rows(*kinds), SampleSet(samples=[], tasks={})), Ranks(0, world_size), tools=tools)
    assert (installed_dummy_media_pass(policy) is not None) == expected


def test_a_family_with_an_unknown_tower_is_refused(policy) -> None:
    policy.config.model_type = "unknown_family"
    with pytest.raises(ValueError, match=r"rows with no media \(tasks: math\); image \(tasks: count\) cannot share"):
        _dummy_media_on_ranks(policy, (rows("image"), rows("text")), Ranks(0, 2), tools=False)
