"""``mmgrpo models``: make-tiny writes a loadable checkpoint; list shows families and options."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoConfig

from mmgrpo.cli import main
from mmgrpo.models.loading import load_model_and_processor


def test_make_tiny_applies_seed_and_options(tmp_path: Path, tiny_qwen25vl: Path) -> None:
    out = tmp_path / "tiny"
    assert main(["models", "make-tiny", "--family", "qwen2_5_vl", "--out", str(out), "--seed", "0"]) == 0
    assert (out / "model.safetensors").read_bytes() == (tiny_qwen25vl / "model.safetensors").read_bytes()

    resized = tmp_path / "resized"
    argv = ["models", "make-tiny", "--family", "qwen2_5_vl", "--out", str(resized), "--set", "num_layers=1"]
    assert main(argv) == 0
    assert AutoConfig.from_pretrained(resized).text_config.num_hidden_layers == 1

    for_vllm = tmp_path / "vllm"
    argv = ["models", "make-tiny", "--family", "qwen2_5_vl", "--out", str(for_vllm), "--vllm-cpu", "--set", "num_layers=1"]
    assert main(argv) == 0
    text = AutoConfig.from_pretrained(for_vllm).text_config
    assert text.hidden_size // text.num_attention_heads == 32 and text.num_hidden_layers == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--family", "qwen2_5vl"], "unknown tiny model family 'qwen2_5vl'. Did you mean 'qwen2_5_vl'"),
        (["--family", "qwen2_5_vl", "--set", "hidden_size"], "--set expects NAME=INT, got 'hidden_size'"),
        (["--family", "qwen2_5_vl", "--set", "width=3"], "unknown tiny-model option"),
        (["--family", "qwen2_5_vl", "--shape", "qwen3b"], "unknown --shape 'qwen3b'; known: qwen2_5_vl_3b"),
        (["--family", "qwen2_5_vl", "--set", "embedding_rows=10"], "embedding_rows=10 is below the tokenizer's"),
    ],
)
def test_bad_arguments_exit_2_with_the_reason(tmp_path: Path, capsys, extra: list[str], message: str) -> None:
    assert main(["models", "make-tiny", "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_list_shows_families_and_options(capsys) -> None:
    assert main(["models", "list"]) == 0
    printed = capsys.readouterr().out
    from mmgrpo.models.compat import omni_thinker_holds_towers

    families = ("qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "smolvlm", "internvl", "gemma3",
                "glm4v", "glm4v_moe", "glm46v", "llava_onevision", "qwen2_audio")
    for name in (*families, "hidden_size", "max_pixels", "embedding_rows", "qwen2_5_vl_3b"):
        assert name in printed
    for thinker in ("qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"):  # refused at load where it holds no towers
        assert (thinker in printed) == omni_thinker_holds_towers(thinker)


def test_a_real_shape_keeps_its_widths_and_vocabulary_and_the_set_options_override_it(tmp_path: Path) -> None:
    """``--shape``: Qwen2.5-VL-3B's widths and 151,936 embedding rows (the local tokenizer uses the first); here made
    narrower with ``--set`` for speed, which must win over the shape. The head has a row per embedding."""
    out = tmp_path / "shaped"
    argv = ["models", "make-tiny", "--family", "qwen2_5_vl", "--out", str(out), "--shape", "qwen2_5_vl_3b",
            "--set", "hidden_size=64", "--set", "intermediate_size=64", "--set", "num_heads=2", "--set", "num_kv_heads=1",
            "--set", "vision_hidden_size=32", "--set", "vision_intermediate_size=32", "--set", "vision_heads=2",
            "--set", "embedding_rows=20000"]
    assert main(argv) == 0
    config = AutoConfig.from_pretrained(out)
    text = config.text_config
    assert (text.vocab_size, text.hidden_size, text.num_hidden_layers, text.tie_word_embeddings) == (20000, 64, 2, True)
    model, processor = load_model_and_processor(out)
    head = model.get_output_embeddings().weight
    assert head.shape[0] == 20000 > len(processor.tokenizer)
    assert head.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # 3B ties them
    assert processor.image_processor.size["longest_edge"] == 448 * 448  # the budget of 256 merged tokens
