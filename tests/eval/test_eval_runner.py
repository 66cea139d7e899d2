"""evaluate_policy with a scripted engine: every summary number against a hand computation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from data_recipes.loading import SkippedRow
from eval import EvalOptions, EvalResult, comparison_table, evaluate_policy
from mmgrpo.distributed import Ranks
from mmgrpo.models.batch import PROMPT_TOO_LONG
from mmgrpo.rollout.base import EncodesNothing, SamplingParams
from mmgrpo.types import Completion, Sample
from tasks import get_task

# sample id -> (task, true count, its four completions)
SCRIPT = {
    "q0": ("clevr_count", 1, ["<answer>1</answer>"] * 4),
    "q1": ("clevr_count", 2, ["<answer>3</answer>", "<answer>2</answer>", "2", "<answer>2</answer>"]),
    "q2": ("clevr_count", 3, ["no idea"] * 4),
    "v0": ("video_count", 2, ["<answer>2</answer>", "<answer>5</answer>", "<answer>2</answer>", "<answer>2</answer>"]),
}
MEDIA_COLUMN = {"clevr_count": "image", "video_count": "video"}


class ScriptedEngine(EncodesNothing):
    """Answers each prompt with its scripted completions; a completion without a closing
    answer tag is marked truncated. Records every generate call."""

    def __init__(self, dropped: Sequence[str] = ()) -> None:
        self.dropped = set(dropped)
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, samples, params, group_sizes=None) -> list[list[Completion]]:
        self.calls.append(([sample.id for sample in samples], params))
        return [[] if sample.id in self.dropped else self._group(sample.id, params.n) for sample in samples]

    def update_weights(self, model_or_state_dict) -> None:
        pass

    @staticmethod
    def _group(sample_id: str, n: int) -> list[Completion]:
        texts = SCRIPT[sample_id][2][:n]
        return [Completion(t, token_ids=list(range(len(t))), truncated=not t.endswith("</answer>")) for t in texts]


@pytest.fixture(scope="module")
def tasks():
    return {name: get_task(name) for name in MEDIA_COLUMN}


@pytest.fixture(scope="module")
def samples(tasks) -> list[Sample]:
    rows = {
        sample_id: {"id": sample_id, "problem": "How many objects are there?", "answer": count, MEDIA_COLUMN[task]: f"/media/{sample_id}"}
        for sample_id, (task, count, _) in SCRIPT.items()
    }
    return [tasks[SCRIPT[sample_id][0]].to_sample(row, think=False) for sample_id, row in rows.items()]


def run_scripted(samples, tasks, *, samples_per_item=4, batch_size=64, dropped=(), skipped=()):
    engine = ScriptedEngine(dropped)
    options = EvalOptions(samples=samples_per_item, temperature=1.0, batch_size=batch_size, seed=7, progress=False)
    return engine, evaluate_policy(engine, samples, tasks, options, skipped=list(skipped))


def test_summary_matches_hand_computation(samples, tasks):
    _, result = run_scripted(samples, tasks)
    summary = result.summary()
    # correct completions per item: q0 4/4, q1 2/4 (a bare "2" has no answer tag), q2 0/4, v0 3/4
    assert summary["n"] == 4 and summary["skipped"] == 0
    assert summary["accuracy"] == pytest.approx(2 / 4)  # first completions: q0 and v0 right
    assert summary["pass@1"] == pytest.approx((1 + 0.5 + 0 + 0.75) / 4)
    assert summary["pass@2"] == pytest.approx((1 + (1 - 1 / 6) + 0 + 1) / 4)  # q1: 1 - C(2,2)/C(4,2)
    assert summary["pass@4"] == pytest.approx(3 / 4)
    assert summary["mean@4"] == pytest.approx((1 + 0.5 + 0 + 0.75) / 4)
    assert summary["format_rate"] == pytest.approx((4 + 3 + 0 + 4) / 16)
    assert summary["truncation_rate"] == pytest.approx(5 / 16)
    lengths = [len(text) for _, _, texts in SCRIPT.values() for text in texts]
    assert summary["mean_length"] == pytest.approx(sum(lengths) / len(lengths))
    assert summary["reward/format"] == summary["format_rate"]
    assert summary["reward/count_accuracy"] == pytest.approx((1 + 0.5 + 0 + 0.75) / 4)  # every completion, not the first
    assert summary["clevr_count/accuracy"] == pytest.approx(1 / 3)
    assert summary["video_count/accuracy"] == 1.0
    assert summary["video_count/pass@1"] == pytest.approx(0.75)
    assert summary["accuracy_ci_low"] < summary["accuracy"] < summary["accuracy_ci_high"]


def test_items_keep_parsed_answers_rewards_and_media(samples, tasks):
    _, result = run_scripted(samples, tasks)
    q1 = next(item for item in result.items if item.sample_id == "q1")
    assert q1.media == ["/media/q1"] and q1.answer == 2
    assert [c.parsed_answer for c in q1.completions] == [3, 2, 2, 2]  # read leniently, even untagged
    assert [c.metric for c in q1.completions] == [0.0, 1.0, 0.0, 1.0]  # but scored strictly
    assert [c.rewards["count_accuracy"] for c in q1.completions] == [0.0, 1.0, 0.0, 1.0]
    assert q1.completions[1].reward == pytest.approx(1.0 + 0.1)  # the task's weights: accuracy 1, format 0.1


def test_prompts_go_in_batches_with_per_batch_seeds(samples, tasks):
    engine, _ = run_scripted(samples, tasks, batch_size=3)
    assert [ids for ids, _ in engine.calls] == [["q0", "q1", "q2"], ["v0"]]
    assert [params.seed for _, params in engine.calls] == [7, 8]
    assert all(params.n == 4 and params.temperature == 1.0 for _, params in engine.calls)


def test_dropped_prompts_and_bad_rows_are_skipped_and_counted(samples, tasks):
    bad_row = SkippedRow("r9", "data.jsonl", "missing media", "media/r9.png not found")
    _, result = run_scripted(samples, tasks, dropped=["q2"], skipped=[bad_row])
    summary = result.summary()
    assert summary["n"] == 3 and summary["skipped"] == 2
    assert result.skipped_by_reason() == {"missing media": 1, PROMPT_TOO_LONG: 1}
    assert summary["accuracy"] == pytest.approx(2 / 3)  # a dropped prompt is not scored as a failure


def test_unknown_task_is_a_clear_error(samples, tasks):
    with pytest.raises(KeyError, match="video_count"):
        evaluate_policy(ScriptedEngine(), samples, {"clevr_count": tasks["clevr_count"]}, EvalOptions(progress=False))


def test_greedy_options_refuse_several_samples():
    with pytest.raises(ValueError, match="temperature"):
        EvalOptions(samples=4, temperature=0.0)


def test_result_round_trips_through_json(samples, tasks):
    _, result = run_scripted(samples, tasks, skipped=[SkippedRow("r9", "data.jsonl", "missing media")])
    restored = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert restored == result
    assert restored.summary() == result.summary()


def test_comparison_table_has_a_column_per_model_with_intervals(samples, tasks):
    _, four = run_scripted(samples, tasks)
    _, one = run_scripted(samples, tasks, samples_per_item=1)
    lines = comparison_table({"before GRPO": one, "after GRPO": four}).splitlines()
    assert lines[0] == "| metric | before GRPO | after GRPO |"
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    accuracy_cells = rows["accuracy"].strip("| ").split(" | ")[1:]
    assert len(accuracy_cells) == 2 and all(cell.startswith("0.500 [") for cell in accuracy_cells)
    assert rows["pass@4"].split(" | ")[1] == "-"  # the one-sample result has no pass@4
    assert "clevr_count/accuracy" in rows and "video_count/accuracy" in rows


def test_a_failing_reward_is_named_per_item_and_follows_the_run_policy(samples, tasks, monkeypatch):
    from tasks import REWARDS
    from tasks.reward_calls import RewardFailure, RewardPolicy

    def nan_for_wrong_format(completions, **_):
        return [1.0 if text.endswith("</answer>") else float("nan") for text in completions]

    monkeypatch.setitem(REWARDS._items, "format", nan_for_wrong_format)
    options = EvalOptions(samples=4, temperature=1.0, seed=7, progress=False)
    result = evaluate_policy(ScriptedEngine(), samples, tasks, options)
    failed = {item.sample_id: [(e["reward"], e["completion"], e["kind"]) for e in item.reward_errors] for item in result.items}
    assert failed == {"q0": [], "q1": [("format", 2, "non-finite")], "q2": [("format", i, "non-finite") for i in range(4)],
                      "v0": []}
    assert result.summary()["reward_errors"] == 5
    assert EvalResult.from_dict(json.loads(json.dumps(result.to_dict()))).summary()["reward_errors"] == 5
    with pytest.raises(RewardFailure, match="reward 'format' on sample 'q1'"):
        evaluate_policy(ScriptedEngine(), samples, tasks, options, reward_policy=RewardPolicy(errors="raise"))


def test_completions_cut_at_the_cap_are_warned_per_task(samples, tasks, caplog):
    with caplog.at_level("WARNING", logger="eval.runner"):
        _, result = run_scripted(samples, tasks)
    # clevr_count: 5 of 12 completions lack a closing tag (scripted as cut); video_count: none
    assert result.truncation_warnings() == [
        "clevr_count: 42% of completions stopped at the 256-token cap (more than 10%); their answers may be cut off: "
        "raise eval.max_new_tokens"
    ]
    assert [record.getMessage() for record in caplog.records] == result.truncation_warnings()


def test_embedded_media_are_labelled_by_content_not_as_bytes():
    from eval.runner import media_label

    first, again, other = media_label(b"\x89PNG one"), media_label(b"\x89PNG one"), media_label(b"\x89PNG two")
    assert first.startswith("<bytes sha256:") and first == again != other
    assert media_label("/data/a.png") == "/data/a.png"


def test_a_video_window_is_labelled_with_its_window():
    from eval.runner import media_label
    from processors import VideoSpan

    assert media_label(VideoSpan("/data/a.mp4", 1, 2.5)) == "/data/a.mp4#t=1.0,2.5"
    assert media_label(VideoSpan("/data/a.mp4", 0, 1)) != media_label(VideoSpan("/data/a.mp4", 1, 2))


class LockstepEngine(ScriptedEngine):
    """A scripted engine whose decoding is a collective (ZeRO-3, FSDP2): it encodes (leaving out ``dropped``), and
    records in ``decoded`` the samples of each ``generate`` that decoded anything."""

    lockstep = True

    def __init__(self, dropped: Sequence[str] = ()) -> None:
        super().__init__(dropped)
        self.decoded: list[list[str]] = []

    def encode(self, samples):
        return SimpleNamespace(kept=[i for i, sample in enumerate(samples) if sample.id not in self.dropped], dropped=[])

    def generate(self, samples, params, group_sizes=None, prompts=None) -> list[list[Completion]]:
        if any(sample.id not in self.dropped for sample in samples):
            self.decoded.append([sample.id for sample in samples])
        return super().generate(samples, params, group_sizes)


class AloneRanks(Ranks):
    """Rank ``rank`` of two, each evaluated in this process on its own (its gathers hold its own part only)."""

    def gather(self, value):
        return [value]


@pytest.mark.parametrize("dropped", [(), ("q2",)], ids=["smaller-block", "batch-left-out"])
def test_ranks_decoding_in_lockstep_make_as_many_decoding_calls(samples, tasks, dropped):
    """Under ZeRO-3 or FSDP2 each decoding step is a collective: a rank with a smaller block (here 1 item against 2)
    or a batch its engine could take none of would stop decoding while the other waits in a collective. It decodes
    the first item it can take instead, its outcome discarded."""
    options = EvalOptions(samples=1, temperature=0.0, batch_size=1, max_new_tokens=8, seed=7, progress=False)
    engines = [LockstepEngine(dropped), LockstepEngine(dropped)]
    results = [evaluate_policy(engine, samples[:3], tasks, options, ranks=AloneRanks(rank, 2))
               for rank, engine in enumerate(engines)]
    assert [len(engine.decoded) for engine in engines] == [2, 2]
    assert [[record.sample_id for record in result.items] for result in results] == \
        [["q0", "q1"], [] if dropped else ["q2"]]  # the filler's outcome is not among the results
    assert engines[1].decoded[-1] == ["q0"]  # the first item every rank can take
