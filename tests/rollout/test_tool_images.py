"""Tool turns that return images (``zoom_in``): the crop comes inside the trajectory, the policy's next turns see
it, and the trainer's forward over the whole trajectory (crop included) gives the sampler's log-probs."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.rollout.hf import HFEngine
from mmgrpo.rollout.tool_turns import ToolTurns
from mmgrpo.types import Completion
from tasks.tools import TOOLS, ToolContext


def zoom(box: list[float]) -> str:
    return '<tool_call>{"name": "zoom_in", "arguments": {"bbox_2d": %s}}</tool_call>' % box


class ScriptedTurns:
    """The engine, except that its first calls' completions are ``turns[i]`` followed by its stop token (a tiny
    random policy never writes a tool call by itself); later calls sample."""

    def __init__(self, engine: HFEngine, turns: list[str]) -> None:
        self.engine, self.turns, self.calls = engine, turns, 0

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, samples, params, group_sizes=None, *, prompts=None):
        groups = self.engine.generate(samples, params, group_sizes, prompts=prompts)
        self.calls += 1
        if self.calls > len(self.turns):
            return groups
        text, tokenizer = self.turns[self.calls - 1], self.engine.tokenizer
        ids = [*tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        return [[Completion(text, ids, [0.0] * len(ids)) for _ in group] for group in groups]


def sampled(policy, samples, turns: list[str], max_turns: int, n: int = 2):
    model, processor = policy
    engine = HFEngine(model, processor)
    tool_turns = ToolTurns(ScriptedTurns(engine, turns), processor, {"zoom_in": TOOLS.get("zoom_in")}, max_turns,
                           lambda sample: ToolContext(sample))
    groups = tool_turns.generate(samples, SamplingParams(n=n, max_new_tokens=6, seed=5))
    return groups, engine


def trainer_logprobs(policy, samples, groups, *, shared: bool, media=True) -> torch.Tensor:
    model, processor = policy
    prompts = build_prompt_batch(processor, samples, family=model.config.model_type)
    completions = [c for group in groups for c in group]
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, prompts, [c.token_ids for c in completions], [len(g) for g in groups], group_shared_encoding=shared,
            micro_batch_size=len(completions), media=[c.media for c in completions] if media else None,
        )
    return logp


@pytest.mark.parametrize("calls", [1, 2])
def test_a_zoomed_crop_is_seen_by_the_next_turn_and_the_trainer_scores_the_trajectory_as_the_sampler_did(
    policy, samples, calls
):
    """After ``calls`` zooms (two crops of different sizes, each its own placeholder run), the policy's last turn
    is sampled with log-probs the trainer's forward over the whole trajectory gives, group-shared or plain."""
    turns = [zoom([0.1, 0.1, 0.6, 0.5]), zoom([0.5, 0.4, 0.9, 0.9])][:calls]
    groups, engine = sampled(policy, samples[:2], turns, max_turns=calls + 1)
    image_pad = engine.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for trajectory in (c for group in groups for c in group):
        assert trajectory.tool_outcomes == ["ok"] * calls
        assert [call["arguments"]["bbox_2d"] for call in trajectory.tool_calls] == [[0.1, 0.1, 0.6, 0.5],
                                                                                    [0.5, 0.4, 0.9, 0.9]][:calls]
        assert trajectory.media is not None and trajectory.media.counts == {"image": calls}
        assert trajectory.media.inputs["image_grid_thw"].shape == (calls, 3)
        pads = [i for i, token in enumerate(trajectory.token_ids) if token == image_pad]
        assert len(pads) == trajectory.media.placeholder_tokens["image"] > 0
        types = trajectory.media.token_inputs["mm_token_type_ids"].tolist()  # what M-RoPE's positions follow
        assert [i for i, kind in enumerate(types) if kind] == pads
        assert all(any(start <= i < end for start, end in trajectory.observation_spans) for i in pads)
        assert len(trajectory.token_ids) > trajectory.observation_spans[-1][1]  # the policy's last turn
    for shared in (True, False):
        logp = trainer_logprobs(policy, samples[:2], groups, shared=shared)
        for row, trajectory in enumerate(c for group in groups for c in group):
            last_turn = slice(trajectory.observation_spans[-1][1], len(trajectory.token_ids))
            torch.testing.assert_close(logp[row, last_turn], torch.tensor(trajectory.logprobs[last_turn]),
                                       rtol=0, atol=1e-5)


def test_the_trainer_reads_the_crop_itself(policy, samples):
    """The last turn's log-probs depend on the crop's pixels: another crop of the same size gives others."""
    groups, _ = sampled(policy, samples[:1], [zoom([0.0, 0.0, 0.5, 0.5])], max_turns=2)
    trajectory = groups[0][0]
    other_pixels = torch.flip(trajectory.media.inputs["pixel_values"], [0])
    swapped = replace(trajectory, media=replace(trajectory.media, inputs={**trajectory.media.inputs,
                                                                          "pixel_values": other_pixels}))
    last_turn = slice(trajectory.observation_spans[-1][1], len(trajectory.token_ids))
    seen = trainer_logprobs(policy, samples[:1], [[trajectory]], shared=True)[0, last_turn]
    other = trainer_logprobs(policy, samples[:1], [[swapped]], shared=True)[0, last_turn]
    assert (seen - other).abs().max() > 1e-4


def test_a_family_without_media_mid_sequence_gets_the_text_and_the_call_counts_its_images_dropped(
    tiny_model_dir, samples
):
    from mmgrpo.models.loading import load_model_and_processor

    policy = load_model_and_processor(tiny_model_dir("smolvlm"))
    groups, _ = sampled(policy, samples[:1], [zoom([0.1, 0.1, 0.6, 0.5])], max_turns=2, n=1)
    (trajectory,), = groups
    assert trajectory.tool_outcomes == ["images_dropped"] and trajectory.media is None
    (start, end), = trajectory.observation_spans
    assert "zoomed in" in policy[1].tokenizer.decode(trajectory.token_ids[start:end])


def test_a_checkpointed_round_keeps_its_trajectories_crops(policy, samples, tmp_path):
    """An asynchronous run's checkpoint holds rounds sampled ahead: their crops come back, scored the same."""
    from mmgrpo.trainer.rollout_records import rollouts_from_record, rollouts_record
    from mmgrpo.trainer.rollouts import Group, Rollouts
    from mmgrpo.trainer.safe_state import dump_state, load_state

    groups, _ = sampled(policy, samples[:1], [zoom([0.2, 0.2, 0.7, 0.7])], max_turns=2)
    rollouts = Rollouts(groups=[Group(samples[0], groups[0], rewards=[1.0, 0.0], components={})])
    dump_state(rollouts_record(rollouts), tmp_path / "state.json", tmp_path / "state.safetensors")
    record = load_state(tmp_path / "state.json", tmp_path / "state.safetensors")
    restored = rollouts_from_record(record, {samples[0].id: samples[0]}, prompts=None).groups[0].completions
    for back, kept in zip(restored, groups[0]):
        assert replace(back, media=None) == replace(kept, media=None)
        assert back.media.counts == kept.media.counts and back.media.placeholder_tokens == kept.media.placeholder_tokens
        for field in ("inputs", "token_inputs"):
            assert all(torch.equal(value, getattr(kept.media, field)[key])
                       for key, value in getattr(back.media, field).items())
    torch.testing.assert_close(trainer_logprobs(policy, samples[:1], [restored], shared=True),
                               trainer_logprobs(policy, samples[:1], groups, shared=True), rtol=0, atol=0)


@pytest.mark.parametrize("shared", [True, False])
def test_a_grpo_run_trains_on_trajectories_with_crops(small_config, tmp_path, monkeypatch, shared):
    """Every first turn zooms (scripted: the tiny policy never would); the trajectories, crops inside, train
    group-shared or as plain rows, and the trainer's log-probs are the sampler's (the step's measured gap)."""
    from mmgrpo.run_files import read_metrics
    from mmgrpo.trainer.pipeline import run_training

    real_generate = HFEngine.generate
    call = zoom([0.25, 0.25, 0.75, 0.75])

    def first_turn_zooms(self, samples, params, group_sizes=None, *, prompts=None):
        groups = real_generate(self, samples, params, group_sizes, prompts=prompts)
        if params.n == 1:  # a later turn (or a greedy decode): the policy's own
            return groups
        ids = [*self.tokenizer(call, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        with torch.no_grad():  # the policy's own log-probs of the scripted turn, as a sampler would report them
            logp, _ = completion_logprobs(self.model, prompts, [ids] * len(prompts), [1] * len(prompts),
                                          micro_batch_size=len(prompts))
        return [[replace(c, text=call, token_ids=ids, logprobs=logp[row].tolist(), truncated=False) for c in group]
                for row, group in enumerate(g for g in groups if g)]

    monkeypatch.setattr(HFEngine, "generate", first_turn_zooms)
    config = small_config("train.steps=2", "rollout.tools=[zoom_in]", "rollout.max_turns=2", "eval.before=false",
                          "eval.after=false", f"train.group_shared_encoding={str(shared).lower()}",
                          "algo.num_iterations=2", "rollout.logprobs_source=engine")
    assert run_training(config)["grpo_steps"] == 2
    rows = read_metrics(tmp_path / "runs" / "test" / "metrics.jsonl")
    assert all(row["tools/ok_frac"] == 1.0 for row in rows)
    assert all(row["rollout/logprob_gap_max"] < 1e-4 for row in rows), [row["rollout/logprob_gap_max"] for row in rows]
    logged = read_metrics(tmp_path / "runs" / "test" / "completions.jsonl")  # the gallery's: turn by turn, crops shown
    roles = [[turn["role"] for turn in record["turns"]] for record in logged]
    assert logged and all(r == ["assistant", "tool", "assistant"] for r in roles)
    assert all(len(record["turns"][1]["images"]) == 1 and "zoomed in" in record["turns"][1]["text"] for record in logged)
    report = (tmp_path / "runs" / "test" / "report.html").read_text()
    assert report.count('<div class="turn tool">') == report.count("zoomed in") > 0 and "data:image/jpeg" in report
