"""A lockstep engine (decoding is a collective of the ranks) decodes a stand-in when a call has nothing of its own."""

from __future__ import annotations

from types import SimpleNamespace

from mmgrpo.rollout.base import SamplingParams
from mmgrpo.rollout.lockstep import in_lockstep
from mmgrpo.types import Completion, Sample


class RecordingEngine:
    """Encodes every sample but those whose id starts with "bad"; records what each decoding call decoded."""

    needs_loaded_media = False

    def __init__(self, lockstep: bool) -> None:
        self.lockstep, self.decoded = lockstep, []

    def encode(self, samples):
        kept = [i for i, sample in enumerate(samples) if not sample.id.startswith("bad")]
        return SimpleNamespace(kept=kept, prepared=kept)

    def generate(self, samples, params, group_sizes=None, *, prompts=None):
        prompts = prompts or self.encode(samples)
        if not prompts.kept:
            return [[] for _ in samples]
        self.decoded.append([samples[i].id for i in prompts.kept])
        return [[Completion("x", [1], [0.0])] if i in prompts.kept else [] for i in range(len(samples))]


def sample(name: str) -> Sample:
    return Sample(name, "t", [])


def test_a_call_with_nothing_to_decode_decodes_the_first_candidate_the_engine_takes():
    engine = RecordingEngine(lockstep=True)
    guarded = in_lockstep(engine, [sample("bad-0"), sample("good-1"), sample("good-2")])
    params = SamplingParams(n=2, max_new_tokens=4)
    assert guarded.generate([sample("bad-a"), sample("bad-b")], params) == [[], []]  # every prompt left out
    assert guarded.generate([], params) == []  # an empty share
    assert guarded.generate([sample("good-a"), sample("bad-c")], params)[1] == []  # its own: no stand-in
    assert engine.decoded == [["good-1"], ["good-1"], ["good-a"]]  # one decoding call each, as on the other ranks


def test_an_engine_that_decodes_on_its_own_is_left_as_it_is():
    engine = RecordingEngine(lockstep=False)
    assert in_lockstep(engine, [sample("good-1")]) is engine
    guarded = in_lockstep(RecordingEngine(lockstep=True), [])
    assert in_lockstep(guarded, [sample("good-1")]).filler.candidates == [sample("good-1")]  # wrapped once, anew
    assert guarded.generate([sample("bad-a")], SamplingParams()) == [[]]  # no candidate it can take: no call
