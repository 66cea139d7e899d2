"""``mmgrpo sft`` checkpoints every ``checkpoint.every_n_steps`` steps and when stopped, and ``--resume`` ends
where the uninterrupted command ends; a fresh start never overwrites a stopped run's checkpoints."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmgrpo.cli import main
from mmgrpo.inputs import load_samples, media_budgets, task_model_info
from mmgrpo.trainer import sft as sft_module
from mmgrpo.trainer.checkpoint import step_dirs
from mmgrpo.trainer.setup import load_policy
from mmgrpo.trainer.sft import SFTCheckpoints, reference_examples, run_sft

SFT = ("sft.steps=4", "sft.batch_size=4", "sft.micro_batch_size=4", "sft.lr=0.003")


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _stop_at_call(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """SIGINT to this process as SFT step ``call`` reads its batch's completions."""
    real, calls = sft_module.completion_token_ids, []

    def stopping(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == call:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_module, "completion_token_ids", stopping)


def test_a_stopped_sft_command_resumes_to_the_uninterrupted_model(small_config, tmp_path, monkeypatch, capsys):
    recipe = tmp_path / "recipe.yaml"
    small_config(*SFT).save_yaml(recipe)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(["sft", str(recipe), "--out", str(whole)]) == 0
    assert not (whole / "checkpoints").exists() and (whole / "sft_config.yaml").is_file()

    _stop_at_call(monkeypatch, 3)
    assert main(["sft", str(recipe), "--out", str(cut)]) == 130
    assert f"continue with --out {cut} --resume" in capsys.readouterr().err
    assert [path.name for _, path in step_dirs(cut / "checkpoints")] == ["step-2"]
    monkeypatch.undo()

    assert main(["sft", str(recipe), "--out", str(cut)]) == 2  # a fresh start would lose step-2
    assert "holds a stopped SFT run (its step-2): continue it with --resume" in capsys.readouterr().err
    assert main(["sft", str(recipe), "sft.lr=0.01", "--out", str(cut), "--resume"]) == 2
    assert "sft.lr: 0.003 -> 0.01" in capsys.readouterr().err

    assert main(["sft", str(recipe), "--out", str(cut), "--resume"]) == 0
    assert "2 steps" in capsys.readouterr().out  # steps 3 and 4
    expected, got = _weights(whole), _weights(cut)
    assert expected.keys() == got.keys() and all(torch.equal(expected[name], got[name]) for name in expected)
    assert not (cut / "checkpoints").exists()
    assert main(["sft", str(recipe), "--out", str(cut), "--resume"]) == 2
    refused = capsys.readouterr().err
    assert "no SFT checkpoint" in refused and "it holds a finished model" in refused


def test_periodic_sft_checkpoints_resume_exactly(small_config, tmp_path):
    """Saved every 2 of 5 steps and all kept; the model reloaded from step 2 and trained on ends where the whole
    run ends (weights, optimizer, schedule, example order and RNG all restored)."""
    config = small_config(*SFT, "sft.steps=5")
    train_set = load_samples(config.data.train, config.task, Path(config.data.dir), seed=config.data.seed,
                             model=task_model_info(config.model, config.model.name_or_path))
    examples = reference_examples(train_set.samples, train_set.tasks)

    def train(checkpoints: SFTCheckpoints, resume_from: Path | None = None) -> torch.nn.Module:
        model, processor = load_policy(config, config.model.name_or_path, torch.device("cpu"), checkpoint=resume_from)
        run_sft(model, processor, examples, config.sft, budgets=media_budgets(config.model, processor), seed=0,
                progress_bar=False, checkpoints=checkpoints, resume_from=resume_from)
        return model

    whole = train(SFTCheckpoints(tmp_path / "whole", every_n_steps=2, keep_last=None))
    assert [step for step, _ in step_dirs(tmp_path / "whole")] == [2, 4]  # not 5: the finished model is the last
    resumed = train(SFTCheckpoints(tmp_path / "resumed"), resume_from=tmp_path / "whole" / "step-2")
    assert not (tmp_path / "resumed").exists()  # every_n_steps=0: only a stop saves
    for (name, expected), got in zip(whole.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(expected, got), name
