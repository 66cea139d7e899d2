"""The colocated vLLM engine against the trainer: prompt ids, sampled-token log-probs, weight sync.

Needs vLLM: on CPU, ``scripts/vllm_cpu_env.sh`` builds the environment and ``.ci/run`` runs this
file there. Tiny checkpoints use 2 attention heads at hidden 64 (head_dim 32: vLLM's CPU attention
rejects 16) and Qwen2-Audio a 30-second window (vLLM expects 3000 mel frames) and its weights
under the Hub checkpoints' names.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model
from PIL import Image
from safetensors.torch import load_file, save_file

from mmgrpo.config.schema import ModelConfig
from mmgrpo.config.vllm_section import VLLMConfig
from mmgrpo.models.freezing import freeze, frozen_parts, unchanging_weights
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from mmgrpo.rollout import SamplingParams
from mmgrpo.types import Completion, Sample
from processors import VideoBudget

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: scripts/vllm_cpu_env.sh builds the CPU environment .ci/run tests it in",
)

SAMPLED = SamplingParams(n=3, temperature=1.0, max_new_tokens=8, seed=0)
VIDEO_BUDGETS = {"video": VideoBudget(fps=2.0, min_frames=4, max_frames=4, min_pixels=28 * 28, max_pixels=56 * 84,
                                      total_pixels=4 * 56 * 84)}
LOGPROB_TOLERANCE = 1e-5
# Measured 0.8-1.8e-3 for Qwen3.5, whose linear attention vLLM's CPU build runs in bfloat16 only
BFLOAT16_LOGPROB_TOLERANCE = 1e-2
# GLM-4.1V: each temporal patch an image with its timestamp after it; LLaVA-OneVision: frames pooled 2 x 2
VIDEO_FAMILIES = ("qwen2_5_vl", "glm4v", "llava_onevision")


def prompt(sample_id: str, kind: str, ref: object, question: str) -> Sample:
    content = [{"type": kind, kind: ref}, {"type": "text", "text": question}]
    return Sample(id=sample_id, task="test", messages=[{"role": "user", "content": content}])


def image_samples(seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    sizes = [(112, 112, "How many red cubes are there?"), (56, 84, "Count.")]
    return [
        prompt(f"img-{i}", "image", Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)), question)
        for i, (h, w, question) in enumerate(sizes)
    ]


def audio_samples() -> list[Sample]:
    rng = np.random.default_rng(0)
    clips = [(1.0, "How many beeps?"), (0.5, "Count.")]
    return [
        prompt(f"aud-{i}", "audio", ((rng.standard_normal(int(s * 16_000)) * 0.1).astype(np.float32), 16_000), q)
        for i, (s, q) in enumerate(clips)
    ]


DOUBLED_PREFIX, ORIGINAL_PREFIX = "language_model.model.model.", "language_model.model."


def with_original_weight_names(folder: Path, out: Path) -> Path:
    """``folder`` copied to ``out`` with Qwen2-Audio's weight names as the Hub's checkpoints have them:
    transformers 5.19 saves them with a doubled prefix, which vLLM cannot load (5.24 saves them right)."""
    shutil.copytree(folder, out, dirs_exist_ok=True)
    weights = load_file(out / "model.safetensors")
    save_file({key.replace(DOUBLED_PREFIX, ORIGINAL_PREFIX, 1): value for key, value in weights.items()},
              out / "model.safetensors", metadata={"format": "pt"})
    return out


@pytest.fixture(scope="module")
def vllm_policy(tiny_model_dir, tmp_path_factory):
    """``vllm_policy(family) -> (model, processor, engine)``: one engine per family for the module."""
    from mmgrpo.rollout.vllm import VLLMEngine

    built = {}

    def build(family: str):
        if family not in built:
            folder = tiny_model_dir(family, **VLLM_CPU_TINY_OPTIONS)
            if family == "qwen2_audio":
                folder = with_original_weight_names(folder, tmp_path_factory.mktemp("qwen2_audio"))
            model, processor = load_model_and_processor(folder)
            engine = VLLMEngine(
                model, processor, options=VLLMConfig(), max_model_len=1024,
                budgets=VIDEO_BUDGETS if family in VIDEO_FAMILIES else None,
            )
            built[family] = (model.eval(), processor, engine)
        return built[family]

    return build


def assert_logprobs_match(groups: list[list[Completion]], expected: list[torch.Tensor]) -> None:
    completions = [c for group in groups for c in group]
    assert len(completions) == len(expected) and completions
    for completion, reference in zip(completions, expected):
        torch.testing.assert_close(torch.tensor(completion.logprobs), reference, atol=LOGPROB_TOLERANCE, rtol=0)


@pytest.mark.parametrize(
    ("family", "make_samples"),
    [("qwen2_5_vl", image_samples), ("qwen3_vl", image_samples), ("smolvlm", image_samples),
     ("glm4v", image_samples), ("llava_onevision", image_samples), ("qwen2_audio", audio_samples)],
)
def test_sampled_logprobs_equal_the_trainers(vllm_policy, teacher_forced_logprobs, family, make_samples) -> None:
    model, processor, engine = vllm_policy(family)
    samples = make_samples()
    prompts = engine.encode(samples)
    groups = engine.generate(samples, SAMPLED, prompts=prompts)  # raises if vLLM's prompt ids differ
    assert [len(group) for group in groups] == [SAMPLED.n] * len(samples)
    assert_logprobs_match(groups, teacher_forced_logprobs(model, processor, samples, groups))
    again = engine.generate(samples, SAMPLED)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in groups]


def test_qwen3_5_samples_in_bfloat16_near_the_trainer(tiny_model_dir, teacher_forced_logprobs) -> None:
    """Qwen3.5 in vLLM's CPU build: the prompt ids (images expanded) are the trainer's, and so are the weights and
    positions, but its Gated DeltaNet kernel runs in bfloat16 only ("CPU GDN attention requires BF16"): log-probs
    agree to bfloat16's precision, not to 1e-5."""
    from mmgrpo.rollout.vllm import VLLMEngine

    model, processor = load_model_and_processor(tiny_model_dir("qwen3_5", **VLLM_CPU_TINY_OPTIONS))
    engine = VLLMEngine(model, processor, options=VLLMConfig(), max_model_len=1024, budgets=VIDEO_BUDGETS)
    frames = np.random.default_rng(1).integers(0, 256, (8, 56, 84, 3), dtype=np.uint8)
    samples = [*image_samples(), prompt("vid-0", "video", frames, "How many objects move?")]
    groups = engine.generate(samples, SAMPLED, prompts=engine.encode(samples))  # raises if the prompt ids differ
    expected = teacher_forced_logprobs(model.eval(), processor, samples, groups, budgets=VIDEO_BUDGETS)
    completions = [completion for group in groups for completion in group]
    gaps = [(torch.tensor(c.logprobs) - e).abs().max().item() for c, e in zip(completions, expected)]
    assert len(gaps) == len(samples) * SAMPLED.n and max(gaps) < BFLOAT16_LOGPROB_TOLERANCE, gaps


def test_gemma3_matches_the_trainer_with_images_attended_causally(vllm_policy, teacher_forced_logprobs) -> None:
    """Gemma 3 in vLLM's CPU build: its prompt ids (the image expanded, newline runs merged), weights (the SigLIP
    tower under ``vision_model.``) and features are the trainer's, but an image's tokens attend causally there:
    of vLLM 0.32's attention back ends only FlashAttention (GPU) makes them attend both ways as transformers does
    (measured: log-probs 2.5e-3 apart; equal to 1e-5 once the trainer's forward is causal over images too)."""
    model, processor, engine = vllm_policy("gemma3")
    samples = image_samples()
    groups = engine.generate(samples, SAMPLED, prompts=engine.encode(samples))  # raises if the prompt ids differ
    assert_logprobs_match(groups, teacher_forced_logprobs(model, processor, samples, groups, causal_images=True))


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_a_video_prompt_matches_the_trainer(family, vllm_policy, teacher_forced_logprobs) -> None:
    model, processor, engine = vllm_policy(family)
    frames = np.random.default_rng(1).integers(0, 256, (8, 56, 84, 3), dtype=np.uint8)
    samples = [prompt("vid-0", "video", frames, "How many objects move?")]
    groups = engine.generate(samples, SAMPLED)
    expected = teacher_forced_logprobs(model, processor, samples, groups, budgets=VIDEO_BUDGETS)
    assert_logprobs_match(groups, expected)


def test_a_step_sized_batch_of_seeded_requests_samples(vllm_policy) -> None:
    """32 prompts x 8 samples, seeded: on CPU, chunked prefill crashed seeded requests."""
    _, _, engine = vllm_policy("qwen2_5_vl")
    samples = [image_samples(seed)[0] for seed in range(32)]
    groups = engine.generate(samples, SamplingParams(n=8, max_new_tokens=6, seed=7))
    assert [len(group) for group in groups] == [8] * 32


def test_stops_truncation_and_forbidden_ids_follow_the_hf_engine_rules(vllm_policy) -> None:
    model, processor, engine = vllm_policy("qwen2_5_vl")
    params = SamplingParams(n=8, temperature=1.0, max_new_tokens=30, seed=3)
    completions = [c for group in engine.generate(image_samples(), params) for c in group]
    stop_ids = set(engine.stop_ids)
    assert engine.forbidden_ids and not stop_ids & set(engine.forbidden_ids)
    for completion in completions:
        assert not set(completion.token_ids) & set(engine.forbidden_ids)
        stops = [i for i, token in enumerate(completion.token_ids) if token in stop_ids]
        if completion.truncated:
            assert not stops and len(completion.token_ids) == params.max_new_tokens
        else:
            assert stops == [len(completion.token_ids) - 1]
    assert any(c.truncated for c in completions) and any(not c.truncated for c in completions)


def test_after_a_weight_update_the_engine_samples_the_new_policy(vllm_policy, make_peaked, teacher_forced_logprobs,
                                                                capfd):
    """... quietly: a whole push says nothing about the layers that compute their tensors (rotary caches)."""
    model, processor, engine = vllm_policy("qwen2_5_vl")
    long_question = " ".join(["Count every red cube, blue sphere and green cylinder in the picture."] * 12)
    samples = [*image_samples(), prompt("long", "image", image_samples()[0].media("image")[0], long_question)]
    block_size = engine.llm.llm_engine.vllm_config.cache_config.block_size
    assert len(engine.encode(samples).input_ids[-1]) > block_size  # spans a full KV block: prefix cache
    before = engine.generate(samples, SAMPLED)  # fills the prefix and encoder caches with the old weights
    updated = make_peaked(model)
    try:
        capfd.readouterr()
        engine.update_weights(updated)
        assert "Failed to load weights" not in "".join(capfd.readouterr())
        after = engine.generate(samples, SAMPLED)  # the same images again: encoder cache
        assert_logprobs_match(after, teacher_forced_logprobs(updated, processor, samples, after))
        assert [c.logprobs for g in after for c in g] != [c.logprobs for g in before for c in g]
    finally:
        engine.update_weights(model)
    restored = engine.generate(samples, SAMPLED)
    assert [[c.token_ids for c in g] for g in restored] == [[c.token_ids for c in g] for g in before]


def test_a_lora_policy_reaches_the_engine_as_merged_weights(vllm_policy, teacher_forced_logprobs) -> None:
    """Only the adapted layers' merged weights travel; the rest the engine holds already."""
    model, processor, engine = vllm_policy("qwen2_5_vl")
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, weight in lora.named_parameters():
            if "lora_B" in name:
                weight.normal_(0, 0.5)
    pushed = copy.deepcopy(lora)  # the weights no adapter changes perturbed: a push leaves them out, the engine's stay
    engine.unchanging = unchanging_weights(lora)
    with torch.no_grad():
        for name, weight in pushed.get_base_model().named_parameters():
            if name in engine.unchanging:
                weight.add_(torch.randn_like(weight))
    try:
        engine.update_weights(pushed)
        samples = image_samples()
        groups = engine.generate(samples, SAMPLED)
        assert_logprobs_match(groups, teacher_forced_logprobs(lora.eval(), processor, samples, groups))
        base = teacher_forced_logprobs(model, processor, samples, groups)
        assert not all(torch.allclose(torch.tensor(c.logprobs), b, atol=1e-3) for g in groups for c, b in
                       zip(g, base[: len(g)]))
    finally:
        engine.unchanging = frozenset()
        engine.update_weights(model)


def test_a_push_after_the_first_leaves_the_frozen_tower_out(vllm_policy, make_peaked, teacher_forced_logprobs, capfd):
    """The engine keeps the tower it had (a changed copy of it in the pushed policy does not reach the engine, and the
    layers sent nothing are not rebuilt empty), takes everything else, and says nothing about the layers left out."""
    model, processor, engine = vllm_policy("qwen2_5_vl")
    frozen = copy.deepcopy(model)
    freeze(frozen, frozen_parts(frozen, ModelConfig(freeze_vision_tower=True)))
    engine.unchanging = unchanging_weights(frozen)
    updated = make_peaked(model)
    expected = copy.deepcopy(updated)  # the new language model with the tower the engine holds
    with torch.no_grad():
        for name, weight in updated.named_parameters():
            if name in engine.unchanging:
                weight.add_(torch.randn_like(weight))
    try:
        capfd.readouterr()
        engine.update_weights(updated)
        said = "".join(capfd.readouterr())
        samples = image_samples(seed=3)
        groups = engine.generate(samples, SAMPLED)
        assert_logprobs_match(groups, teacher_forced_logprobs(expected.eval(), processor, samples, groups))
        assert "Failed to load weights" not in said
    finally:
        engine.unchanging = frozenset()
        engine.update_weights(model)


class DiscardingSleep:
    """vLLM's sleep, as this CPU has none: level 2 leaves the engine zeros for weights (a GPU engine holds nothing
    after it), and waking brings nothing back."""

    def __init__(self, llm, model) -> None:
        self.llm, self.model, self.levels = llm, model, []

    def sleep(self, level: int) -> None:
        from mmgrpo.rollout.vllm import policy_weights

        self.levels.append(level)
        zeros = copy.deepcopy(self.model)
        for weight in zeros.parameters():
            weight.data.zero_()
        self.llm.collective_rpc("mmgrpo_reload", kwargs={"partial": False, "weights_iterator": policy_weights(zeros)})

    def wake_up(self, tags) -> None:
        pass


def test_sleep_level_2_discards_the_weights_for_the_update_and_the_next_push_sends_them_all(
    vllm_policy, make_peaked, teacher_forced_logprobs
):
    """The engine samples awake; when the update starts it gives its weights back; sampling before a push is refused;
    the push after the update sends every weight, the frozen tower's too (a partial push would leave it zeros)."""
    from mmgrpo.rollout.vllm_sleep import SleepMode

    model, processor, engine = vllm_policy("qwen2_5_vl")
    frozen = copy.deepcopy(model)
    freeze(frozen, frozen_parts(frozen, ModelConfig(freeze_vision_tower=True)))
    engine.unchanging = unchanging_weights(frozen)
    discarding = DiscardingSleep(engine.llm, model)
    engine.sleep = SleepMode(discarding, enabled=True, level=2)
    samples = image_samples(seed=4)
    try:
        engine.generate(samples, SAMPLED)
        assert discarding.levels == []  # level 2 stays awake through sampling
        engine.before_update()
        assert discarding.levels == [2]
        with pytest.raises(RuntimeError, match="discarded for the policy update"):
            engine.generate(samples, SAMPLED)
        updated = make_peaked(model)
        engine.update_weights(updated)
        groups = engine.generate(samples, SAMPLED)
        assert_logprobs_match(groups, teacher_forced_logprobs(updated.eval(), processor, samples, groups))
    finally:
        engine.sleep = SleepMode(engine.llm, enabled=False, level=1)
        engine.unchanging = frozenset()
        engine.update_weights(model)


@pytest.mark.parametrize("calls", [1, 2])
def test_tool_turns_continue_on_the_engine_with_the_crops_and_the_trainer_scores_them_alike(vllm_policy, calls):
    """Each next turn goes to vLLM as the trajectory's token ids with the prompt's image and the crops so far (its
    prompt ids checked against the trajectory's); the last turn's log-probs are the trainer's over the whole
    trajectory, crops included."""
    from mmgrpo.rollout.tool_turns import ToolTurns
    from tasks.tools import TOOLS, ToolContext
    from tests.rollout.test_tool_images import ScriptedTurns, trainer_logprobs, zoom

    model, processor, engine = vllm_policy("qwen2_5_vl")
    turns = ToolTurns(ScriptedTurns(engine, [zoom([0.1, 0.1, 0.6, 0.5]), zoom([0.5, 0.4, 0.9, 0.9])][:calls]),
                      processor, {"zoom_in": TOOLS.get("zoom_in")}, calls + 1, lambda sample: ToolContext(sample),
                      budgets=engine.budgets)
    samples = image_samples(seed=7)
    groups = turns.generate(samples, SamplingParams(n=2, max_new_tokens=6, seed=5))
    trajectories = [c for group in groups for c in group]
    assert all(t.tool_outcomes == ["ok"] * calls and t.media.counts == {"image": calls} for t in trajectories)
    logp = trainer_logprobs((model, processor), samples, groups, shared=True)
    for row, trajectory in enumerate(trajectories):
        last_turn = slice(trajectory.observation_spans[-1][1], len(trajectory.token_ids))
        assert last_turn.stop > last_turn.start
        torch.testing.assert_close(logp[row, last_turn], torch.tensor(trajectory.logprobs[last_turn]),
                                   rtol=0, atol=LOGPROB_TOLERANCE)


def test_a_gemma3_tool_turn_continues_on_the_engine_with_one_bos(vllm_policy) -> None:
    """Gemma's template writes ``<bos>`` itself: the next turn's token ids (the prompt's, tokenized as the engine
    has vLLM tokenize it) open with one, as the trainer's prompt does (else vLLM's prompt-id check raises)."""
    from mmgrpo.rollout.tool_turns import ToolTurns
    from tasks.tools import TOOLS, ToolContext
    from tests.rollout.test_tool_images import ScriptedTurns

    model, processor, engine = vllm_policy("gemma3")
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 3"}}</tool_call>'
    turns = ToolTurns(ScriptedTurns(engine, [call]), processor, {"calculator": TOOLS.get("calculator")}, 2,
                      lambda sample: ToolContext(sample), budgets=engine.budgets)
    groups = turns.generate(image_samples(seed=7), SamplingParams(n=2, max_new_tokens=6, seed=5))
    trajectories = [c for group in groups for c in group]
    assert trajectories and all(t.tool_outcomes == ["ok"] for t in trajectories)
    assert all(len(t.token_ids) > t.observation_spans[-1][1] for t in trajectories)  # the engine took the turn


def test_engines_on_a_resumed_policy_share_one_vllm_engine(tiny_model_dir, tmp_path):
    """A resumed run's policy loads from a checkpoint (the trainer's state beside the model's files): the evaluation's
    engine and the training's are one ``vllm.LLM``, not one each (on a GPU each would take its memory share)."""
    from mmgrpo.rollout.vllm import VLLMEngine

    checkpoint = tmp_path / "step-1"
    shutil.copytree(tiny_model_dir("qwen2_5_vl", seed=2, **VLLM_CPU_TINY_OPTIONS), checkpoint)
    save_file({"step": torch.zeros(1)}, checkpoint / "trainer_state.safetensors")
    model, processor = load_model_and_processor(checkpoint)
    first, second = (VLLMEngine(model, processor, options=VLLMConfig(), max_model_len=512) for _ in range(2))
    assert first.llm is second.llm


def test_weights_through_files_for_an_engine_in_its_own_process(tiny_model_dir, make_peaked, teacher_forced_logprobs):
    from mmgrpo.rollout.vllm import VLLMEngine

    model, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl", seed=1, **VLLM_CPU_TINY_OPTIONS))
    engine = VLLMEngine(model, processor, options=VLLMConfig(in_process=False), max_model_len=512)
    updated = make_peaked(model)
    engine.update_weights(updated)
    samples = image_samples(seed=5)
    groups = engine.generate(samples, SAMPLED)
    assert_logprobs_match(groups, teacher_forced_logprobs(updated, processor, samples, groups))
