"""The tools' schemas reach the prompt through the model's chat template (``tools=``): from ``rollout.tools``, or
a dataset row's own ``tools`` field (a bad one skips the row, naming the field); the prompt cache tells prompts
with other schemas apart."""

from __future__ import annotations

import json

import pytest

from mmgrpo.config.loading import apply_overrides
from mmgrpo.config.schema import DatasetConfig, TaskConfig
from mmgrpo.inputs import load_samples, task_samples
from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.prompt_cache import PromptCache
from mmgrpo.types import Sample
from tasks import get_task
from tasks.base import ModelInfo
from tasks.tools import TOOLS

ZOOM = TOOLS.get("zoom_in").spec()
CALCULATOR = TOOLS.get("calculator").spec()


def row(**fields: object) -> dict:
    return {"id": "r1", "problem": "What is 2 + 3?", "answer": "5", **fields}


def test_configured_tools_go_into_each_sample_and_a_rows_own_tools_win():
    task = get_task("math")
    bare = [CALCULATOR["function"]]  # {"name", "description", "parameters"}, as many datasets hold them
    rows = [row(), row(id="r2", tools=json.dumps([CALCULATOR])), row(id="r3"), row(id="r4", tools=bare)]
    samples, rejected = task_samples(task, rows, "rows.jsonl", think=True, tools=[ZOOM])
    assert not rejected
    assert [sample.tools for sample in samples] == [[ZOOM], [CALCULATOR], [ZOOM], [CALCULATOR]]


def test_a_run_without_tools_reads_no_rows_tools():
    """Tools off (or their schemas): a row's ``tools`` field, valid or not, changes nothing and skips nothing."""
    samples, rejected = task_samples(get_task("math"), [row(tools=[CALCULATOR]), row(id="r2", tools="[not json")],
                                     "rows.jsonl", think=True)
    assert not rejected and [sample.tools for sample in samples] == [[], []]


@pytest.mark.parametrize(("tools", "reason"), [
    ("[not json", "not JSON"),
    ({"type": "function"}, "must be a list"),
    (["calculator"], "item 0 is not"),
    ([{"type": "function", "function": {"description": "no name"}}], "item 0 is not"),
])
def test_a_rows_bad_tools_skip_it_naming_the_field(tools, reason):
    samples, rejected = task_samples(get_task("math"), [row(tools=tools), row(id="ok")], "rows.jsonl", think=True,
                                     tools=[ZOOM])
    assert [sample.id for sample in samples] == ["ok"]
    (skipped,) = rejected
    assert (skipped.row_id, skipped.source) == ("r1", "rows.jsonl") and "tools" in skipped.reason
    assert reason in skipped.detail


def test_the_schemas_are_rendered_by_a_template_with_a_tools_block(tiny_model_dir):
    _, processor = load_model_and_processor(tiny_model_dir("qwen3_vl"), dtype="float32")
    sample = get_task("math").to_sample(row(), tools=[ZOOM, CALCULATOR])
    with_tools = build_prompt_batch(processor, [sample], {}, family="qwen3_vl")
    without = build_prompt_batch(processor, [Sample(sample.id, sample.task, sample.messages)], {}, family="qwen3_vl")
    text = with_tools.prepared[0].text
    assert '"name": "zoom_in"' in text and '"name": "calculator"' in text and "<tool_call>" in text
    assert "<tools>" not in without.prepared[0].text
    assert with_tools.input_ids.shape[1] > without.input_ids.shape[1]
    assert text.endswith(without.prepared[0].text)  # the conversation follows the tools' system turn unchanged


def test_a_system_message_of_parts_goes_before_the_tools(tiny_model_dir):
    _, processor = load_model_and_processor(tiny_model_dir("qwen3_vl"), dtype="float32")
    system = {"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]}
    sample = get_task("math").to_sample(row(), tools=[ZOOM])
    sample = Sample(sample.id, sample.task, [system, *sample.messages], tools=sample.tools)
    text = build_prompt_batch(processor, [sample], {}, family="qwen3_vl").prepared[0].text
    assert text.index("Answer briefly.") < text.index("# Tools") and text.count("<|im_start|>system") == 1


def test_a_template_without_a_tools_block_renders_the_prompt_as_before(tiny_model_dir):
    _, processor = load_model_and_processor(tiny_model_dir("qwen2_5_vl"), dtype="float32")
    sample = get_task("math").to_sample(row(), tools=[ZOOM])
    plain = Sample(sample.id, sample.task, sample.messages)
    assert (build_prompt_batch(processor, [sample], {}, family="qwen2_5_vl").prepared[0].text
            == build_prompt_batch(processor, [plain], {}, family="qwen2_5_vl").prepared[0].text)


def test_the_prompt_cache_keys_prompts_with_other_tools_apart(tiny_model_dir, tmp_path):
    _, processor = load_model_and_processor(tiny_model_dir("qwen3_vl"), dtype="float32")
    cache = PromptCache(tmp_path, max_bytes=1 << 20)
    task = get_task("math")
    keys = {cache.key(processor, task.to_sample(row(), tools=tools), {}, "qwen3_vl")
            for tools in ([], [ZOOM], [CALCULATOR])}
    assert len(keys) == 3


def test_rollout_tools_reach_the_loaded_samples_unless_turned_off(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row()) + "\n")
    for overrides, expected in (([], [ZOOM]), (["rollout.tool_schemas=false"], [])):
        config = apply_overrides({"rollout": {"tools": ["zoom_in"], "max_turns": 2}}, overrides)
        loaded = load_samples([DatasetConfig(path=str(rows), task="math")], TaskConfig(), tmp_path, seed=0,
                              model=ModelInfo(), tools=config.rollout.prompt_tools)
        assert [sample.tools for sample in loaded.samples] == [expected]


def test_an_sft_file_keeps_the_tools_its_prompts_held(tmp_path):
    """``mmgrpo reject`` writes each kept row's ``tools``; ``mmgrpo sft --data`` prompts with them again."""
    from mmgrpo.trainer.sft import load_sft_file

    messages = [{"role": "user", "content": "2 + 3?"}]
    good, bad = tmp_path / "kept.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps({"id": "a", "messages": messages, "completion": "5", "tools": [ZOOM]}) + "\n"
                    + json.dumps({"id": "b", "messages": messages, "completion": "5"}) + "\n")
    assert [example.sample.tools for example in load_sft_file(good)] == [[ZOOM], []]
    bad.write_text(json.dumps({"id": "a", "messages": messages, "completion": "5", "tools": ["zoom_in"]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl, line 1: field tools: item 0 is not"):
        load_sft_file(bad)
