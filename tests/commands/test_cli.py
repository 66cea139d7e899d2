"""The ``mmgrpo`` dispatcher and flags across commands.

Errors about the user's inputs (missing model, plugin, split or checkpoint) end in one
``mmgrpo <command>: error: ...`` line and a non-zero status; ``--debug`` shows the
traceback; a command's own status (130/143 after an interrupt) passes through.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import mmgrpo.commands.config
from data_recipes.make import make_dataset
from mmgrpo.cli import main
from mmgrpo.models.loading import ModelLoadError


@pytest.fixture(scope="module")
def counting_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated counting dataset: 3 train + 3 test rows, images under media/."""
    folder = tmp_path_factory.mktemp("counting")
    make_dataset("clevr_count", 6, folder, seed=0, test_fraction=0.5)
    return folder


def eval_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval", "--model", str(model), "--data", str(data), "--task", "clevr_count", "--limit", "2",
        "--max-new-tokens", "4", "--out", str(out), "log.progress_bar=false", *extra,
    ]


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The last line on stderr, after checking no traceback was printed."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


def test_a_missing_model_is_one_line_and_status_2(tmp_path, counting_data, capsys) -> None:
    missing = tmp_path / "no-model"
    assert main(eval_args(missing, counting_data, tmp_path / "out")) == 2
    assert error_line(capsys) == (
        f"mmgrpo eval: error: {missing}: no such checkpoint directory"
    )


def test_debug_shows_the_traceback(tmp_path, counting_data) -> None:
    missing = tmp_path / "no-model"
    with pytest.raises(ModelLoadError, match="no such checkpoint directory"):
        main(eval_args(missing, counting_data, tmp_path / "out", "--debug"))
    with pytest.raises(ModelLoadError):  # before the command name too
        main(["--debug", *eval_args(missing, counting_data, tmp_path / "out")])


def test_a_missing_reward_plugin_is_one_line(tmp_path, tiny_qwen25vl, counting_data, capsys) -> None:
    plugin = tmp_path / "my_rewards.py"
    assert main(eval_args(tiny_qwen25vl, counting_data, tmp_path / "out", f"task.reward_plugins=[{plugin}]")) != 0
    line = error_line(capsys)
    assert line.startswith("mmgrpo eval: ") and str(plugin) in line


def test_a_dataset_without_the_split_is_one_line(tmp_path, tiny_qwen25vl, counting_data, capsys) -> None:
    train_only = tmp_path / "train_only"
    train_only.mkdir()
    shutil.copy(counting_data / "train.jsonl", train_only / "train.jsonl")
    assert main(eval_args(tiny_qwen25vl, train_only, tmp_path / "out")) == 2
    assert error_line(capsys).startswith(f"mmgrpo eval: error: no data files for split 'test' in {train_only}")


def test_resuming_without_a_checkpoint_is_one_line(tmp_path, tiny_qwen25vl, capsys) -> None:
    status = main([
        "train", f"model.name_or_path={tiny_qwen25vl}", f"log.output_dir={tmp_path}", "log.run_name=fresh",
        f"data.dir={tmp_path / 'data'}", "data.train.0.recipe_args={n: 10}", "data.test.0.recipe_args={n: 10}",
        "sft.enabled=false", "eval.before=false", "eval.after=false", "log.progress_bar=false", "--resume",
    ])
    assert status != 0
    line = error_line(capsys)
    assert line.startswith("mmgrpo train: ") and "checkpoint" in line


@pytest.mark.parametrize(("outcome", "status"), [(143, 143), (KeyboardInterrupt(), 130)])
def test_command_status_passes_through(monkeypatch, capsys, outcome, status) -> None:
    def run(_args):  # noqa: ANN001, ANN202
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(mmgrpo.commands.config, "run", run)
    assert main(["config"]) == status


def test_eval_media_root_finds_images_kept_apart(tmp_path, tiny_qwen25vl, counting_data, capsys) -> None:
    """VLM-R1 layout: annotations in one folder, the images they name relatively in another."""
    annotations = tmp_path / "annotations"
    annotations.mkdir()
    shutil.copy(counting_data / "test.jsonl", annotations / "test.jsonl")
    assert main(eval_args(tiny_qwen25vl, annotations, tmp_path / "without")) == 2
    assert "no usable rows" in error_line(capsys)

    out = tmp_path / "with"
    assert main(eval_args(tiny_qwen25vl, annotations, out, "--media-root", str(counting_data))) == 0
    (entry,) = json.loads((out / "results.json").read_text())["models"].values()
    assert entry["datasets"]["clevr_count"]["items"] == 2 and entry["skipped"]["count"] == 0


def test_eval_media_root_needs_data(capsys) -> None:
    assert main(["eval", "--media-root", "images"]) == 2
    assert "--media-root applies to --data" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["train", "r.yaml", "--resume", "seed=7"], ["train", "r.yaml", "seed=7", "--resume"]],
)
def test_overrides_after_a_flag_join_the_other_overrides(argv) -> None:
    from mmgrpo.cli import _parse, build_parser

    args = _parse(build_parser(), argv)
    assert args.overrides == ["seed=7"] and args.resume is True


def test_an_unknown_flag_is_still_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--no-such-flag", "seed=7"])
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


# command -> (a bad argument, a bad key, a bad value): each must end in "mmgrpo <command>: error: ..." (or
# "mmgrpo <command> <action>: error: ...") and exit 2.
# Commands without KEY=VALUE overrides get a KEY=VALUE they do not take as their bad key, and a bad flag value.
BAD_INPUTS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "train": (["--no-such-flag"], ["algo.bta=1"], ["train.steps=many"]),
    "sft": (["--out", "x", "--no-such-flag"], ["--out", "x", "sft.step=3"], ["--out", "x", "sft.lr=-1"]),
    "reject": (["--out", "x", "--no-such-flag"], ["--out", "x", "rollout.temp=1"], ["--out", "x", "--threshold", "high"]),
    "rollout-serve": (["--no-such-flag"], ["--model", "m", "rollout.x=1"], ["--model", "m", "--port", "port"]),
    "eval": (["--no-such-flag"], ["eval.limt=3"], ["eval.samples=0"]),
    "data": (["make", "--no-such-flag"], ["make", "--recipe", "clevr_count", "--out", "x", "data.n=3"],
             ["make", "--recipe", "clever_count", "--out", "x"]),
    "config": (["--no-such-flag"], ["model.nme=x"], ["algo.beta=minus"]),
    "sweep": (["--no-such-flag"], ["--space", "s.yaml", "algo.bta=1"], ["--space", "s.yaml", "--trials", "none"]),
    "report": (["--no-such-flag"], ["runs/x", "log.x=1"], ["/no/such/run/folder"]),
    "models": (["make-tiny", "--no-such-flag"], ["list", "model.x=1"], ["make-tiny", "--family", "nope", "--out", "x"]),
    "task": (["new", "t", "--no-such-flag"], ["new", "t", "--modality", "image", "task.x=1"],
             ["new", "x-y", "--modality", "image", "--out", "."]),
}


def test_every_command_is_covered() -> None:
    from mmgrpo.cli import COMMANDS

    assert set(BAD_INPUTS) == set(COMMANDS)


@pytest.mark.parametrize("kind", ["argument", "key", "value"])
@pytest.mark.parametrize("command", sorted(BAD_INPUTS))
def test_a_bad_argument_key_or_value_is_one_error_line_and_status_2(command, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("train.lr: {type: log_uniform, low: 1.0e-5, high: 1.0e-3}\n")
    argv = [command, *BAD_INPUTS[command][["argument", "key", "value"].index(kind)]]
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's own errors
        status = stop.code
    err = capsys.readouterr().err
    assert status == 2, (argv, err)
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and re.match(rf"mmgrpo {command}( [\w-]+)?: error: ", errors[0]), (argv, err)
    assert not any(tmp_path.glob("x*")), "nothing is written for a bad input"
