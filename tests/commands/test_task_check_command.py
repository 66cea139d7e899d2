"""``mmgrpo task check``: a task repository's CI step, on the command line."""

from __future__ import annotations

from pathlib import Path

from mmgrpo.cli import main

PLANTED = '''
from tasks import register_reward, register_task
from tasks.clevr_count import ClevrCountTask


@register_reward("planted_unclosed_raises")
def unclosed_raises(completions, **fields):
    return [float(text.count("<answer>") != text.count("</answer>") and 1 / 0) for text in completions]


@register_reward("planted_pays_the_echo")
def pays_the_echo(completions, problem, **fields):
    return [1.0 if question.split("?")[0] in text else 0.0 for text, question in zip(completions, problem)]


@register_task("planted_counting")
class PlantedCounting(ClevrCountTask):
    default_rewards = {"count_accuracy": 1.0, "planted_unclosed_raises": 0.1, "planted_pays_the_echo": 1.0}
'''


def test_task_check_reports_a_reward_that_raises_and_one_that_pays_an_echo(tmp_path: Path, capsys) -> None:
    plugin = tmp_path / "planted.py"
    plugin.write_text(PLANTED)
    data = tmp_path / "data"
    assert main(["data", "make", "--recipe", "clevr_count", "--n", "10", "--out", str(data)]) == 0
    capsys.readouterr()

    status = main(["task", "check", "planted_counting", "--plugin", str(plugin), "--data", str(data), "--rows", "3"])

    out = capsys.readouterr().out
    assert status == 1, out
    raised = [line for line in out.splitlines() if "raised" in line]
    assert raised and all("planted_unclosed_raises" in out for _ in raised) and "ZeroDivisionError" in out
    assert "unclosed" in out  # the hostile input that did it is named
    assert "hackable" in out and "echo" in out and "planted_pays_the_echo" in out
    assert out.strip().splitlines()[-1].startswith("FAILED")


def test_task_check_passes_a_built_in_task(tmp_path: Path, capsys) -> None:
    status = main(["task", "check", "clevr_count", "--rows", "3", f"log.output_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.strip().splitlines()[-1] == "OK: no findings"
