"""Which parameters ``model.freeze_vision_tower`` / ``freeze_projector`` / ``frozen`` / ``trainable`` freeze,
on every tiny family with a media tower, and the errors that keep a typo from training everything."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from mmgrpo.config import ConfigError, load_config
from mmgrpo.config.schema import LoraConfig, ModelConfig
from mmgrpo.models.freezing import freeze, frozen_parts, mark_unchanging, parameter_counts, unchanging_weights
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.setup import add_lora, load_policy

# The tower and projector of each family as transformers 5 names them in memory.
TOWERS = {
    "qwen2_5_vl": (("model.visual.",), ("model.visual.merger.",)),
    "qwen3_vl": (("model.visual.",), ("model.visual.merger.", "model.visual.deepstack_merger_list.")),
    "qwen3_5": (("model.visual.",), ("model.visual.merger.",)),
    "qwen3_5_moe": (("model.visual.",), ("model.visual.merger.",)),
    "qwen3_vl_moe": (("model.visual.",), ("model.visual.merger.", "model.visual.deepstack_merger_list.")),
    "smolvlm": (("model.vision_model.",), ("model.connector.",)),
    "internvl": (("model.vision_tower.",), ("model.multi_modal_projector.",)),
    "gemma3": (("model.vision_tower.",), ("model.multi_modal_projector.",)),
    "glm4v": (("model.visual.",), ("model.visual.downsample.", "model.visual.merger.")),
    "glm4v_moe": (("model.visual.",), ("model.visual.downsample.", "model.visual.merger.")),
    "glm46v": (("model.visual.",), ("model.visual.downsample.", "model.visual.merger.")),
    "llava_onevision": (("model.vision_tower.",), ("model.multi_modal_projector.", "model.image_newline")),
    "qwen2_audio": (("model.audio_tower.",), ("model.multi_modal_projector.",)),
    # Two towers; each projects into the language model's width itself.
    "qwen2_5_omni_thinker": (
        ("model.visual.", "model.audio_tower."),
        ("model.visual.merger.", "model.audio_tower.ln_post.", "model.audio_tower.proj."),
    ),
    "qwen3_omni_moe_thinker": (
        ("model.visual.", "model.audio_tower."),
        ("model.visual.merger.", "model.visual.merger_list.", "model.audio_tower.ln_post.", "model.audio_tower.proj1.",
         "model.audio_tower.proj2."),
    ),
}


@pytest.mark.parametrize("family", TOWERS)
def test_each_family_names_its_tower_and_projector(family, tiny_model_dir):
    model, _ = load_model_and_processor(str(tiny_model_dir(family)))
    names = {name for name, _ in model.named_parameters()}
    tower_prefix, projector_prefix = TOWERS[family]
    tower = frozen_parts(model, ModelConfig(freeze_vision_tower=True)).names
    projector = frozen_parts(model, ModelConfig(freeze_projector=True)).names
    assert tower and all(name.startswith(tower_prefix) for name in tower)
    assert all(any(name.startswith(prefix) for name in tower) for prefix in tower_prefix)  # every tower freezes
    assert projector == {n for n in names if n.startswith(projector_prefix)} != set()
    assert not tower & projector  # the tower is the encoder without its projector
    assert {n for n in names if n.startswith(tower_prefix)} <= tower | projector
    freeze(model, frozen_parts(model, ModelConfig(freeze_vision_tower=True, freeze_projector=True)))
    trainable, frozen = parameter_counts(model)
    encoder = sum(p.numel() for n, p in model.named_parameters() if n.startswith((*tower_prefix, *projector_prefix)))
    assert frozen == encoder and trainable


def test_a_family_without_a_tower_is_refused_by_name():
    model = torch.nn.Linear(2, 2)
    model.config = LlamaConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=1)
    with pytest.raises(ConfigError, match="'llama' family.*names no media tower"):
        frozen_parts(model, ModelConfig(freeze_vision_tower=True))


def test_patterns_freeze_matching_names_and_trainable_keeps_only_its_matches(tiny_qwen25vl):
    model, _ = load_model_and_processor(str(tiny_qwen25vl))
    names = [name for name, _ in model.named_parameters()]
    frozen = frozen_parts(model, ModelConfig(frozen=["model.language_model.layers.0.*", "*.norm.weight"])).names
    assert frozen == {n for n in names if n.startswith("model.language_model.layers.0.") or n.endswith(".norm.weight")}
    kept = frozen_parts(model, ModelConfig(trainable=["model.language_model.layers.1.*"]))
    assert set(names) - kept.names == {n for n in names if n.startswith("model.language_model.layers.1.")}
    both = frozen_parts(model, ModelConfig(trainable=["model.language_model.*"], frozen=["*.layers.1.*"])).names
    assert "model.language_model.layers.0.mlp.up_proj.weight" not in both
    assert "model.language_model.layers.1.mlp.up_proj.weight" in both and "model.visual.merger.ln_q.weight" in both


@pytest.mark.parametrize(
    ("options", "message"),
    [({"frozen": ["model.visual.block.*"]}, "model.frozen pattern 'model.visual.block.\\*' matches no parameter"),
     ({"trainable": ["language_model.*"]}, "model.trainable pattern 'language_model.\\*' matches no parameter"),
     ({"frozen": ["*"]}, "nothing is left to train")],
)
def test_pattern_errors_name_the_pattern(options, message, tiny_qwen25vl):
    model, _ = load_model_and_processor(str(tiny_qwen25vl))
    with pytest.raises(ConfigError, match=message):
        frozen_parts(model, ModelConfig(**options))


@pytest.mark.parametrize(
    "family", ["smolvlm", "internvl", "gemma3", "llava_onevision", "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"]
)
def test_lora_puts_no_adapter_into_a_frozen_tower(family, tiny_model_dir):
    """SmolVLM's and InternVL's vision encoders and the Qwen-Omni audio encoders have q/k/v_proj too: the default
    LoRA targets would adapt them unless frozen."""
    path = tiny_model_dir(family)
    tower_prefix, _ = TOWERS[family]
    # The default pixel budget fits the 14-px Qwen image processors; 16-px patches and SmolVLM's and InternVL's tiles
    # need another.
    budget = [] if family.startswith("qwen2") else ["model.min_pixels=4096", "model.max_pixels=16384"]
    lora = ["lora.enabled=true", "lora.r=2", *budget]

    def adapted_tower_modules(*overrides: str) -> list[str]:
        config = load_config(None, [f"model.name_or_path={path}", *lora, *overrides])
        model, _ = load_policy(config, str(path), torch.device("cpu"))
        trained = [name for name, p in model.named_parameters() if p.requires_grad]
        assert trained and all(".lora_" in name for name in trained)
        return [name for name in trained if name.removeprefix("base_model.model.").startswith(tower_prefix)]

    assert adapted_tower_modules()  # without freezing, the tower gets adapters
    assert not adapted_tower_modules("model.freeze_vision_tower=true")


def test_the_log_says_what_trains_and_what_the_config_froze(tiny_qwen25vl, caplog):
    config = load_config(None, [f"model.name_or_path={tiny_qwen25vl}", "model.freeze_vision_tower=true"])
    with caplog.at_level("INFO", logger="mmgrpo.trainer.setup"):
        model, _ = load_policy(config, str(tiny_qwen25vl), torch.device("cpu"))
    trainable, frozen = parameter_counts(model)
    assert f"{trainable:,} trainable, {frozen:,} frozen" in caplog.text and frozen > 0
    assert "frozen by config: tower model.visual. (projector excepted)" in caplog.text


def test_a_tied_tensor_trains_when_any_of_its_names_is_trainable(tiny_model_dir):
    """Real Qwen2.5-VL 3B ties lm_head to the embeddings: model.trainable naming one name keeps the tensor."""
    model, _ = load_model_and_processor(str(tiny_model_dir("qwen2_5_vl")))
    model.lm_head.weight = model.model.language_model.embed_tokens.weight  # tied, as the 3B checkpoint is
    frozen = frozen_parts(model, ModelConfig(trainable=["model.language_model.*"])).names
    assert "lm_head.weight" not in frozen and "model.language_model.embed_tokens.weight" not in frozen
    frozen = frozen_parts(model, ModelConfig(frozen=["lm_head.*"])).names
    assert {"lm_head.weight", "model.language_model.embed_tokens.weight"} <= frozen


def test_a_push_leaves_out_frozen_weights_only_with_all_their_siblings(tiny_qwen25vl):
    """A frozen tower is left out of weight pushes whole; a frozen q projection beside trainable k and v is sent
    (an engine that fuses q/k/v rebuilds the layer from what it is sent), a whole frozen attention block is not."""
    attention = "model.language_model.layers.0.self_attn."

    def frozen(**options: object) -> tuple[frozenset[str], frozenset[str]]:
        model, _ = load_model_and_processor(str(tiny_qwen25vl))
        parts = frozen_parts(model, ModelConfig(**options))
        freeze(model, parts)
        return parts.names, unchanging_weights(model)

    tower, left_out = frozen(freeze_vision_tower=True)
    assert left_out == tower and tower
    inference_copy, _ = load_model_and_processor(str(tiny_qwen25vl))
    assert unchanging_weights(inference_copy.requires_grad_(False)) == frozenset()  # what changes is not known
    mark_unchanging(inference_copy, tower)  # the rollout worker's copy, told the trainer's
    assert unchanging_weights(inference_copy) == tower
    only_q, left_out = frozen(frozen=[f"{attention}q_proj.*"])
    assert only_q and left_out == frozenset()
    block, left_out = frozen(frozen=[f"{attention}*"])
    assert left_out == block and {name.rsplit(".", 2)[1] for name in block} >= {"q_proj", "k_proj", "v_proj", "o_proj"}


def test_under_lora_a_push_leaves_out_what_no_adapter_changes(tiny_qwen25vl):
    """The merged attention of every adapted layer is sent (its biases with it); the untouched base weights (the
    tower, embeddings, head, norms, MLPs) are not."""
    model, _ = load_model_and_processor(str(tiny_qwen25vl))
    names = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    lora = add_lora(model, LoraConfig(enabled=True, r=4), frozen_parts(model, ModelConfig()))
    left_out = unchanging_weights(lora)
    sent = names - left_out
    assert sent == {name for name in names if ".self_attn." in name and ".language_model." in name}
    assert {"lm_head.weight", "model.language_model.embed_tokens.weight"} <= left_out
    assert any(name.startswith("model.visual.") for name in left_out)
    worker_copy, _ = load_model_and_processor(str(tiny_qwen25vl))  # the merged policy's architecture, plain names
    mark_unchanging(worker_copy, left_out)
    assert unchanging_weights(worker_copy) == left_out
