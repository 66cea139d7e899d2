"""The Qwen-Omni thinkers: rows mixing images, videos and audio clips, TMRoPE positions, audio inside a video."""

from __future__ import annotations

from copy import deepcopy
from dataclasses import replace

import numpy as np
import pytest
import torch

from mmgrpo.models.adapters import adapter_for
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.logprobs import sequence_logprobs
from mmgrpo.models.shared_prefix import completion_logprobs
from mmgrpo.models.train_batch import build_train_batch
from mmgrpo.types import Sample
from tests.models.test_logprobs import ATOL, random_completions

THINKERS = ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker")


@pytest.fixture
def mixed_samples(media_samples, video_sample) -> list[Sample]:
    """Row 0: an image, a video and an audio clip; row 1: audio only; row 2: a video only."""
    image, audio = media_samples(THINKERS[0], "image")[0], media_samples(THINKERS[0], "audio")[1]
    parts = [*image.messages[0]["content"][:1], *video_sample.messages[0]["content"][:1], *audio.messages[0]["content"]]
    everything = Sample(id="all-three", task="test", messages=[{"role": "user", "content": parts}])
    return [everything, audio, video_sample]


@pytest.mark.parametrize("family", THINKERS)
def test_rows_mixing_image_video_and_audio_match_unbatched_reference(
    family, load_tiny, mixed_samples, video_budgets, reference
) -> None:
    """The plain and group-shared paths' log-probs equal one unbatched HF forward, whose positions transformers
    computes itself (TMRoPE over the image, the video's time steps and the clip; Qwen3-Omni's deepstack features
    added to the image's and the video's tokens)."""
    model, processor = load_tiny(family)
    completions = random_completions((4, 3, 5))
    batch = build_train_batch(processor, mixed_samples, completions, video_budgets, family=family)
    assert batch.prompt.media_counts == [{"image": 1, "video": 1, "audio": 1}, {"audio": 1}, {"video": 1}]
    with torch.no_grad():
        plain, _ = sequence_logprobs(model, batch, micro_batch_size=2)
        shared, _ = completion_logprobs(model, batch.prompt, completions, (1, 1, 1), micro_batch_size=3)
    for row, (sample, completion) in enumerate(zip(mixed_samples, completions)):
        expected = reference(model, processor, sample, completion, video_budgets)
        torch.testing.assert_close(plain[row, : len(completion)], expected, atol=ATOL, rtol=0)
        torch.testing.assert_close(shared[row, : len(completion)], expected, atol=ATOL, rtol=0)


# The 8 frames are taken at the budget's fps and 4 of them kept (max_frames): sampled at half that rate, so a
# temporal patch of two frames spans 2 s at 2 fps and 4 s at 1 fps: at Qwen2.5-Omni's 25 positions per second 50 and
# 100, at Qwen3-Omni's 13 26 and 52. The processor alone would assume 2 sampled frames per second (Qwen2.5-Omni) or
# 1 (Qwen3-Omni).
@pytest.mark.parametrize(("fps", "seconds"), [(2.0, 2), (1.0, 4)])
@pytest.mark.parametrize("family", THINKERS)
def test_video_time_steps_and_the_continuation_follow_tmrope(
    family, fps, seconds, load_tiny, video_sample, video_budgets
) -> None:
    """A video's temporal positions step by position_id_per_seconds x the seconds a temporal patch spans at the
    rate its frames were sampled at; the completion continues at the prompt's largest position + 1, where
    transformers' generate continues."""
    model, processor = load_tiny(family)
    budgets = {"video": replace(video_budgets["video"], fps=fps)}
    prompt = build_prompt_batch(processor, [video_sample], budgets, family=family)
    inputs = prompt.model_inputs()
    positions, next_position = adapter_for(family).prompt_positions(model, inputs)  # [3, 1, Tp], [1]
    step = seconds * model.config.position_id_per_seconds
    video = inputs["input_ids"][0] == processor.video_token_id
    steps = positions[0, 0, video].unique()
    assert inputs["video_grid_thw"][0, 0] == 2 and (steps - steps[0]).tolist() == [0, step]
    _, rope_deltas = model.model.get_rope_index(
        inputs["input_ids"], video_grid_thw=inputs["video_grid_thw"], attention_mask=inputs["attention_mask"],
        second_per_grids=inputs["video_second_per_grid"],
    )
    assert next_position.item() == positions.max() + 1 == inputs["input_ids"].shape[1] + rope_deltas.item()


@pytest.mark.parametrize("family", THINKERS)
def test_audio_interleaved_inside_a_video_is_refused(family, load_tiny) -> None:
    model, processor = load_tiny(family)
    tokens = [processor.vision_bos_token, processor.audio_bos_token, processor.video_token, processor.audio_token,
              processor.audio_eos_token, processor.vision_eos_token]
    input_ids = torch.tensor([processor.tokenizer.convert_tokens_to_ids(tokens)])
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
    with pytest.raises(ValueError, match="use_audio_in_video"):
        adapter_for(family).prompt_positions(model, inputs)


@pytest.mark.parametrize("seconds", [0.3, 1.0, 2.37, 3.0])
@pytest.mark.parametrize("family", ["qwen3_omni_moe_thinker"])  # in the test's id: skipped where it is refused
def test_clip_tokens_agree_between_processor_adapter_and_audio_tower(family, seconds, load_tiny) -> None:
    """Qwen3-Omni: a clip of S seconds is 13 tokens per whole second (chunks of 100 feature frames, halved three
    times) plus the rest's; the processor's expansion, the adapter's count and the audio tower's output rows agree."""
    model, processor = load_tiny(family)
    clip = np.random.default_rng(0).standard_normal(int(seconds * 16_000)).astype(np.float32)
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "audio"}]}], tokenize=False)
    encoded = processor(text=[text], audio=[clip], return_tensors="pt")
    written = int((encoded["input_ids"] == processor.audio_token_id).sum())
    frames = encoded["feature_attention_mask"].sum(-1)
    with torch.no_grad():
        features = model.model.get_audio_features(encoded["input_features"], encoded["feature_attention_mask"])
    assert written == features.last_hidden_state.shape[0] == int(adapter_for(family).clip_tokens(processor, frames))
    assert written == 13 * int(seconds) + ((int(frames) % 100 + 7) // 8 if int(frames) % 100 else 0)


@pytest.mark.parametrize("family", ["qwen3_omni_moe_thinker"])  # in the test's id: skipped where it is refused
def test_a_copy_of_the_thinker_encodes_clips_with_its_own_audio_tower(family, load_tiny, media_samples) -> None:
    """The KL reference is a deep copy of the policy: its audio tower (encoding clips one at a time) must run on the
    copy's weights, not on the policy's as they train."""
    model, processor = load_tiny(family)
    encoded = build_prompt_batch(processor, media_samples(family, "audio"), family=family)
    audio = {key: encoded.media_inputs[key] for key in ("input_features", "feature_attention_mask")}
    copy = deepcopy(model)
    with torch.no_grad():
        copy.model.audio_tower.proj2.weight.mul_(2)
        policy, reference = (m.model.get_audio_features(**audio).last_hidden_state for m in (model, copy))
    torch.testing.assert_close(reference, 2 * policy - model.model.audio_tower.proj2.bias, atol=1e-5, rtol=1e-5)
