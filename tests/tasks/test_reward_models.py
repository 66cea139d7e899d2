"""Models as rewards: a tiny sequence-classification reward model and a tiny generative judge."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, Qwen2ForSequenceClassification

from mmgrpo.config.schema import RewardModelConfig
from tasks import REWARDS
from mmgrpo.reward_models import RewardModel, judge_score, register_reward_models

COMPLETIONS = ["<answer>3</answer>", "I think there are four.", "<answer>12</answer> because I counted twice", "x"]
PROBLEMS = ["How many circles?", "How many squares are there in the picture?", "Count them.", "How many?"]


def test_classifier_scores_each_completion_as_alone_in_any_batch(tiny_reward_models):
    path = tiny_reward_models["classifier"]
    batched = RewardModel(RewardModelConfig(name="rm", path=str(path), batch_size=3))(COMPLETIONS, PROBLEMS)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    alone = []
    for problem, completion in zip(PROBLEMS, COMPLETIONS):
        chat = [{"role": "user", "content": problem}, {"role": "assistant", "content": completion}]
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        with torch.no_grad():
            alone.append(float(model(**tokenizer(text, return_tensors="pt")).logits[0, 0]))
    assert batched == pytest.approx(alone, abs=1e-5)
    assert len(set(round(score, 6) for score in batched)) == len(batched)  # it reads the texts


def test_the_reward_model_is_frozen_and_scores_without_a_graph(tiny_reward_models):
    reward = RewardModel(RewardModelConfig(name="rm", path=str(tiny_reward_models["classifier"])))
    scores = reward(COMPLETIONS[:2], PROBLEMS[:2])
    model, _ = reward.load()
    assert not any(parameter.requires_grad for parameter in model.parameters()) and not model.training
    assert all(isinstance(score, float) for score in scores)


def test_a_classifier_with_several_labels_scores_the_probability_of_its_label(tiny_reward_models):
    path = tiny_reward_models["classifier"]
    config = AutoModelForSequenceClassification.from_pretrained(path).config
    config.num_labels = 3
    torch.manual_seed(0)
    three = Qwen2ForSequenceClassification(config).eval()
    reward = RewardModel(RewardModelConfig(name="rm3", path=str(path), label=0))
    reward._loaded = (three, AutoTokenizer.from_pretrained(path))
    first = reward(COMPLETIONS, PROBLEMS)
    reward.config = RewardModelConfig(name="rm3", path=str(path))  # default: the last label
    last = reward(COMPLETIONS, PROBLEMS)
    assert all(0 < p < 1 for p in first + last) and first != last


@pytest.mark.parametrize("reply, expected", [
    ("7", 0.7), ("Score: 8/10", 0.8), ("  10 out of 10", 1.0), ("-3", 0.0), ("42", 1.0), ("2.5", 0.25),
])
def test_judge_replies_are_read_as_their_first_number_on_the_scale(reply, expected):
    assert judge_score(reply, 10) == pytest.approx(expected)


def test_a_judge_reply_without_a_number_is_nan():
    assert math.isnan(judge_score("excellent work", 10))


def test_the_judge_is_asked_the_rubric_and_its_reply_is_the_score(tiny_reward_models, monkeypatch):
    path = tiny_reward_models["judge"]
    reward = RewardModel(RewardModelConfig(name="judge", path=str(path), kind="judge",
                                           rubric="Q: {problem} A: {completion} Truth: {answer}. Score?"))
    model, tokenizer = reward.load()
    asked = []
    replies = iter(["7", "no idea"])

    def generate(input_ids, attention_mask, **kwargs):  # the tiny judge's own replies are random text
        asked.extend(tokenizer.batch_decode(input_ids, skip_special_tokens=True))
        reply = torch.tensor([tokenizer(next(replies))["input_ids"]])
        return torch.cat([input_ids, reply.expand(len(input_ids), -1)], dim=1)

    monkeypatch.setattr(model, "generate", generate)
    reward.config = RewardModelConfig(name="judge", path=str(path), kind="judge", batch_size=1,
                                      rubric=reward.config.rubric)
    scores = reward(COMPLETIONS[:2], PROBLEMS[:2], answer=[3, 4])
    assert scores[0] == pytest.approx(0.7) and math.isnan(scores[1])
    assert "Q: How many circles? A: <answer>3</answer> Truth: 3. Score?" in asked[0]


def test_the_tiny_judge_generates_greedily_and_deterministically(tiny_reward_models):
    reward = RewardModel(RewardModelConfig(name="judge", path=str(tiny_reward_models["judge"]), kind="judge",
                                           max_new_tokens=4))
    first, second = reward(COMPLETIONS, PROBLEMS), reward(COMPLETIONS, PROBLEMS)
    assert [str(v) for v in first] == [str(v) for v in second]
    assert all(math.isnan(v) or 0 <= v <= 1 for v in first)


def test_names_register_once_and_never_shadow_a_reward(tiny_reward_models):
    config = RewardModelConfig(name="tiny_rm_registered", path=str(tiny_reward_models["classifier"]))
    assert register_reward_models([config]) == ["tiny_rm_registered"]
    assert register_reward_models([config]) == ["tiny_rm_registered"]  # the same again: a no-op
    assert isinstance(REWARDS.get("tiny_rm_registered"), RewardModel)
    with pytest.raises(ValueError, match="'format' is already a reward"):
        register_reward_models([RewardModelConfig(name="format", path=str(tiny_reward_models["classifier"]))])


def test_a_vlm_judge_is_shown_each_samples_media_before_the_rubric(tiny_qwen25vl, tmp_path, monkeypatch):
    from PIL import Image

    from mmgrpo.types import Completion, Sample
    from tasks import reward_fields

    image = tmp_path / "scene.png"
    Image.new("RGB", (56, 56), (200, 30, 30)).save(image)
    sample = Sample(id="s", task="clevr_count", answer=3, messages=[
        {"role": "user", "content": [{"type": "image", "image": str(image)}, {"type": "text", "text": "How many?"}]}])
    media = reward_fields([sample])["media"]
    assert media == [[{"type": "image", "image": str(image)}]]
    reward = RewardModel(RewardModelConfig(name="vlm_judge", path=str(tiny_qwen25vl), kind="judge", max_new_tokens=4))

    missing = [{"type": "image", "image": str(tmp_path / "gone.png")}]
    scores = reward(COMPLETIONS[:2], PROBLEMS[:2], answer=[3, 4], media=[media[0], missing])
    assert (math.isnan(scores[0]) or 0 <= scores[0] <= 1) and math.isnan(scores[1])  # a bad image: no verdict

    shown = []

    def generate(samples, params, *args, **kwargs):  # the tiny VLM's replies are random text
        shown.extend(samples)
        assert params.temperature == 0 and params.max_new_tokens == 4
        return [[Completion(text="9 of 10", token_ids=[])] for _ in samples]

    monkeypatch.setattr(reward._engine, "generate", generate)
    assert reward(COMPLETIONS[:1], PROBLEMS[:1], answer=[3], media=media) == [pytest.approx(0.9)]
    content = shown[0].messages[0]["content"]
    assert content[0] == {"type": "image", "image": str(image)}
    assert "Question: How many circles?" in content[1]["text"] and COMPLETIONS[0] in content[1]["text"]


def vlm_chats(family: str, count: int) -> tuple[list[str], list[str], list[list[dict]]]:
    """(completions, problems, media): ``count`` rows, each with its own image (or audio clip)."""
    from tests.rollout.test_families import AUDIO_FAMILIES, media_part

    modality = "audio" if family in AUDIO_FAMILIES else "image"
    media = [[media_part(modality, 56 * (1 + row % 2), seed=row)] for row in range(count)]
    return COMPLETIONS[:count], PROBLEMS[:count], media


@pytest.mark.parametrize(
    "family",
    ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "smolvlm", "internvl", "gemma3", "glm4v", "llava_onevision",
     "qwen2_audio", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"],
)
def test_a_vlm_classifier_scores_the_last_token_of_the_chat_with_its_media(family, tiny_vlm_reward_model):
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen2AudioForConditionalGeneration

    path = tiny_vlm_reward_model(family)
    completions, problems, media = vlm_chats(family, 3)
    batched = RewardModel(RewardModelConfig(name="vlm_rm", path=str(path), batch_size=3))(
        completions, problems, media=media)

    # The reference: transformers alone, one conversation at a time, its own positions and padding-free.
    model_class = Qwen2AudioForConditionalGeneration if family == "qwen2_audio" else AutoModelForImageTextToText
    model = model_class.from_pretrained(path).eval()
    processor = AutoProcessor.from_pretrained(path)
    head = load_file(str(path / "value_head.safetensors"))
    alone = []
    for parts, problem, completion in zip(media, problems, completions):
        chat = [{"role": "user", "content": [*parts, {"type": "text", "text": problem}]},
                {"role": "assistant", "content": [{"type": "text", "text": completion}]}]
        text = processor.apply_chat_template(chat, tokenize=False)
        part = parts[0]
        kwargs = ({"audio": [part["audio"][0]], "sampling_rate": part["audio"][1]} if part["type"] == "audio"
                  else {"images": [part["image"]]})
        bos = processor.tokenizer.bos_token  # a template writing it (Gemma's): not added again, as transformers does
        encoded = processor(text=[text], return_tensors="pt", add_special_tokens=not (bos and text.startswith(bos)),
                            **kwargs)
        with torch.no_grad():
            hidden = model.model(**encoded).last_hidden_state[0, -1]
        alone.append(float(hidden @ head["v_head.summary.weight"][0] + head["v_head.summary.bias"][0]))
    assert batched == pytest.approx(alone, abs=1e-4)
    assert len({round(score, 5) for score in batched}) == len(batched)


def test_a_vlm_classifier_reads_the_media_and_scores_bad_media_as_no_verdict(tiny_vlm_reward_model, tmp_path):
    reward = RewardModel(RewardModelConfig(name="vlm_rm", path=str(tiny_vlm_reward_model()), batch_size=4))
    completions, problems, media = vlm_chats("qwen2_5_vl", 2)
    same_text_other_image = reward([completions[0]] * 2, [problems[0]] * 2, media=[media[0], media[1]])
    assert same_text_other_image[0] != pytest.approx(same_text_other_image[1], abs=1e-4)

    missing = [{"type": "image", "image": str(tmp_path / "gone.png")}]
    scores = reward(completions, problems, media=[missing, media[1]])
    assert math.isnan(scores[0]) and scores[1] == pytest.approx(reward(completions[1:], problems[1:], media=media[1:])[0],
                                                                 abs=1e-5)
    model, _ = reward.load()
    assert not any(p.requires_grad for p in [*model.parameters(), *reward._value_head.parameters()])


def test_a_vlm_conversation_longer_than_max_length_is_no_verdict_not_cut(tiny_vlm_reward_model):
    completions, problems, media = vlm_chats("qwen2_5_vl", 2)
    reward = RewardModel(RewardModelConfig(name="vlm_rm", path=str(tiny_vlm_reward_model()), max_length=40))
    long_completion = "x " * 200
    scores = reward([completions[0], long_completion], problems, media=media)
    assert math.isnan(scores[1])


def test_a_vlm_reward_model_without_its_value_head_is_named(tiny_model_dir):
    reward = RewardModel(RewardModelConfig(name="vlm_rm", path=str(tiny_model_dir("qwen2_5_vl"))))
    with pytest.raises(FileNotFoundError, match="value_head.safetensors"):
        reward.load()


def test_a_value_head_of_the_wrong_shape_or_layout_is_refused(tmp_path):
    from safetensors.torch import save_file

    from mmgrpo.models.value_head import load_value_head

    save_file({"score.weight": torch.ones(2, 8)}, str(tmp_path / "value_head.safetensors"))
    assert load_value_head(tmp_path, 8).out_features == 2  # score.weight: transformers' head name, two labels
    with pytest.raises(ValueError, match="hidden size is 16"):
        load_value_head(tmp_path, 16)
    save_file({"a.weight": torch.ones(1, 8), "b.weight": torch.ones(1, 8)}, str(tmp_path / "value_head.safetensors"))
    with pytest.raises(ValueError, match="one linear layer"):
        load_value_head(tmp_path, 8)


def test_a_checkpoint_without_the_kinds_weights_is_refused_not_scored_at_random(tiny_reward_models):
    judge_as_classifier = RewardModel(RewardModelConfig(name="rm", path=str(tiny_reward_models["judge"])))
    with pytest.raises(ValueError, match=r"has no weights for \['score.weight'\] of Qwen2ForSequenceClassification"):
        judge_as_classifier.load()
