"""GRPO learns on every modality's tiny model, as the image test in test_grpo_trainer.py does.

Each test trains 40 steps on the digit reward with that modality's (or family's) media in every batch; it
fails if the policy-gradient sign is flipped or advantages are zeroed (reward then falls or
stays flat; checked by hand for all three by negating the advantages in the trainer).
"""

from __future__ import annotations

import pytest

from tests.training import reward_at_start_and_end
from tests.trainer.test_grpo_trainer import train

AUDIO_SECONDS = 3  # the audio_count clips' length, as recipes/audio_count.yaml sets it
LEARNING_STEPS = ("train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8")


def assert_reward_rises(small_config, tmp_path, *overrides: str) -> None:
    train(small_config(*overrides, *LEARNING_STEPS), tmp_path / "run")
    first, last = reward_at_start_and_end(tmp_path / "run")
    assert last > first + 0.25, f"reward did not rise: first steps {first:.3f}, last steps {last:.3f}"


def test_reward_rises_under_grpo_on_audio(small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen2-Audio over generated beep clips (that the encoder hears the clips is
    tests/models/test_tiny_audio_init.py's check)."""
    assert_reward_rises(
        small_config, tmp_path,
        f"model.name_or_path={tiny_model_dir('qwen2_audio', audio_max_seconds=AUDIO_SECONDS)}",
        f"model.max_audio_seconds={AUDIO_SECONDS}",
        "data.train.0.recipe=audio_count", "data.test.0.recipe=audio_count", "task.name=audio_count",
    )


def test_reward_rises_under_grpo_on_video(small_config, tmp_path):
    """The tiny Qwen2.5-VL over generated clips (video patches and 3-D positions in every batch)."""
    assert_reward_rises(
        small_config, tmp_path,
        "data.train.0.recipe=video_count", "data.test.0.recipe=video_count", "task.name=video_count",
    )


def test_reward_rises_under_grpo_on_grounding(small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen3-VL as recipes/grounding.yaml builds it (learned patch positions at std 0.5)
    over generated grounding scenes: the recipe's model, processor budgets and data path."""
    scenes = "{n: 40, test_fraction: 0.2, image_size: 128}"
    assert_reward_rises(
        small_config, tmp_path,
        f"model.name_or_path={tiny_model_dir('qwen3_vl', vision_position_init_std=0.5)}",
        "model.min_pixels=4096", "model.max_pixels=16384",
        "data.train.0.recipe=grounding", f"data.train.0.recipe_args={scenes}",
        "data.test.0.recipe=grounding", f"data.test.0.recipe_args={scenes}", "task.name=grounding",
    )


def test_reward_rises_under_grpo_on_internvl(small_config, tiny_model_dir, tmp_path):
    """The tiny InternVL over the default image recipe (one pixel-shuffled tile per image, 1-D positions)."""
    assert_reward_rises(small_config, tmp_path, f"model.name_or_path={tiny_model_dir('internvl')}")


OMNI_MEDIA = {
    "image": (),
    "audio": (f"model.max_audio_seconds={AUDIO_SECONDS}", "data.train.0.recipe=audio_count",
              "data.test.0.recipe=audio_count", "task.name=audio_count"),
}


@pytest.mark.parametrize("modality", OMNI_MEDIA)
def test_reward_rises_under_grpo_on_qwen2_5_omni_thinker(modality, small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen2.5-Omni thinker, one policy that sees and hears, over the default image recipe and over
    beep clips (TMRoPE positions, its vision or audio tower in every batch)."""
    model = tiny_model_dir("qwen2_5_omni_thinker", audio_max_seconds=AUDIO_SECONDS)
    assert_reward_rises(small_config, tmp_path, f"model.name_or_path={model}", *OMNI_MEDIA[modality])


@pytest.mark.parametrize("modality", OMNI_MEDIA)
def test_reward_rises_under_grpo_on_qwen3_omni_moe_thinker(modality, small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen3-Omni thinker over the default image recipe and over beep clips: 16-px patches with deepstack
    features, its chunked audio tower (13 tokens a second), routed experts, TMRoPE at 13 positions a second."""
    model = tiny_model_dir("qwen3_omni_moe_thinker", audio_max_seconds=AUDIO_SECONDS)
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={model}", *OMNI_MEDIA[modality],
        "model.min_pixels=4096", "model.max_pixels=16384",  # 16-px patches, as Qwen3-VL's
    )


def test_reward_rises_under_grpo_on_gemma3(small_config, tiny_model_dir, tmp_path):
    """The tiny Gemma 3 over the default image recipe (pooled SigLIP tokens attending both ways, sliding-window and
    global layers, the system text inside the first user turn)."""
    assert_reward_rises(small_config, tmp_path, f"model.name_or_path={tiny_model_dir('gemma3')}")


IMAGE_AND_VIDEO = {
    "image": (),
    "video": ("data.train.0.recipe=video_count", "data.test.0.recipe=video_count", "task.name=video_count"),
}


@pytest.mark.parametrize("modality", IMAGE_AND_VIDEO)
def test_reward_rises_under_grpo_on_glm4v(modality, small_config, tiny_model_dir, tmp_path):
    """The tiny GLM-4.1V over the default image recipe and over generated clips (its own 3-D positions: a video's
    frames numbered apart, each followed by its timestamp; partial rotary)."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('glm4v')}", *IMAGE_AND_VIDEO[modality]
    )


def test_reward_rises_under_grpo_on_glm4v_moe(small_config, tiny_model_dir, tmp_path):
    """The tiny GLM-4.5V (GLM-4.6V's released model type too) over the default image recipe: routed experts."""
    assert_reward_rises(small_config, tmp_path, f"model.name_or_path={tiny_model_dir('glm4v_moe')}")


def test_reward_rises_under_grpo_on_glm46v_videos(small_config, tiny_model_dir, tmp_path):
    """The tiny ``glm46v`` (4.6V's own model type and processors: timestamps written in seconds) over clips."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('glm46v')}", *IMAGE_AND_VIDEO["video"]
    )


@pytest.mark.parametrize("modality", IMAGE_AND_VIDEO)
def test_reward_rises_under_grpo_on_llava_onevision(modality, small_config, tiny_model_dir, tmp_path):
    """The tiny LLaVA-OneVision over the default image recipe (anyres tiles unpadded, newline features) and over
    generated clips (frames pooled 2 x 2)."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('llava_onevision')}", *IMAGE_AND_VIDEO[modality]
    )


@pytest.mark.parametrize("modality", IMAGE_AND_VIDEO)
def test_reward_rises_under_grpo_on_qwen3_5(modality, small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen3.5 over the default image recipe and over generated clips: Gated DeltaNet layers whose
    convolution window and recurrent state carry each group's shared prompt into its completions."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('qwen3_5')}", *IMAGE_AND_VIDEO[modality],
        "model.min_pixels=4096", "model.max_pixels=16384",  # 16-px patches, as Qwen3-VL's
    )


def test_reward_rises_under_grpo_on_qwen3_vl_moe(small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen3-VL mixture of experts over the default image recipe: deepstack features, routed experts."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('qwen3_vl_moe')}",
        "model.min_pixels=4096", "model.max_pixels=16384",  # 16-px patches
    )


def test_reward_rises_under_grpo_on_qwen3_5_moe(small_config, tiny_model_dir, tmp_path):
    """The tiny Qwen3.5 mixture of experts over the default image recipe: routed experts behind linear attention."""
    assert_reward_rises(
        small_config, tmp_path, f"model.name_or_path={tiny_model_dir('qwen3_5_moe')}",
        "model.min_pixels=4096", "model.max_pixels=16384",  # 16-px patches, as Qwen3-VL's
    )
