"""report.html of a real (tiny) run: what the trainer logs for it, the alerts it raises, the page a
browser shows, and `mmgrpo report` comparing runs."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from mmgrpo.cli import main
from mmgrpo.reports.html import REPORT_FILE
from mmgrpo.run_files import read_metrics
from mmgrpo.trainer.pipeline import run_training
from tests.browser import needs_chromium, opened_page

ARTIFACTS = Path(__file__).resolve().parents[2] / ".ci" / "artifacts"  # screenshots CI keeps


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_qwen25vl, digit_reward_plugin) -> Path:
    """A 4-step run with evaluations before and after, completions logged every step."""
    from mmgrpo.config import load_config

    root = tmp_path_factory.mktemp("report_run")
    config = load_config(None, [
        f"model.name_or_path={tiny_qwen25vl}", f"log.output_dir={root / 'runs'}", "log.run_name=run",
        "log.progress_bar=false", "log.tensorboard=false", f"data.dir={root / 'data'}",
        "data.train.0.recipe_args={n: 40, test_fraction: 0.2}", "data.test.0.recipe_args={n: 40, test_fraction: 0.2}",
        f"task.reward_plugins=[{digit_reward_plugin}]", "task.rewards={share_of_threes: 1.0, format: 0.1}",
        "rollout.prompts_per_step=2", "rollout.num_generations=4", "rollout.max_new_tokens=6",
        "train.micro_batch_size=8", "train.steps=4", "train.lr=0.01", "sft.enabled=false",
        "checkpoint.every_n_steps=0", "eval.limit=6", "log.log_completions_every=1", "log.completions_per_log=100",
        "log.report_every_n_steps=2", "log.alerts.truncation_max=0.01",
    ])
    run_training(config)
    return root / "runs" / "run"


def test_completion_logs_carry_what_the_gallery_shows(finished_run):
    records = read_metrics(finished_run / "completions.jsonl")
    assert {record["step"] for record in records} == {1, 2, 3, 4}
    first = records[0]
    assert first["prompt"] and Path(first["media"]["image"][0]).is_file()
    assert set(first["rewards"]) == {"share_of_threes", "format"} and isinstance(first["correct"], bool)
    step_one = [record for record in records if record["step"] == 1]
    assert sum(record["advantage"] for record in step_one) == pytest.approx(0.0, abs=1e-5)  # GRPO: zero mean per group


def test_the_run_writes_report_html_and_links_it_from_report_md(finished_run):
    page = (finished_run / REPORT_FILE).read_text()
    assert page.count('class="card"') == 2 * 4  # 2 prompts x 4 logged steps
    assert page.count('src="data:image/jpeg;base64,') >= 8  # each card's image, inlined
    assert "completions hit the length cap" in page  # the alert set off by log.alerts.truncation_max
    assert "Held-out evaluations" in page and "before GRPO" in page
    assert "(report.html)" in (finished_run / "report.md").read_text()


def test_an_alert_is_logged_when_it_fires(small_config, tmp_path, caplog):
    from tests.trainer.test_grpo_trainer import train

    with caplog.at_level(logging.WARNING, logger="mmgrpo.trainer.grpo"):
        train(small_config("train.steps=2", "log.alerts.truncation_max=0.01"), tmp_path / "run")
    messages = [record.getMessage() for record in caplog.records if "length cap" in record.getMessage()]
    assert len(messages) == 1 and messages[0].startswith("step ")


def test_report_command_compares_runs(finished_run, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(finished_run, other)
    assert main(["report", str(finished_run), str(other)]) == 0
    page = (finished_run / "compare.html").read_text()
    assert f"{finished_run.name}: reward/total" in page and "other: reward/total" in page  # curves overlaid
    galleries = page.split("<section class='gallery'")[1:]  # one per run, each with its own cards
    assert [gallery.count('class="card"') for gallery in galleries] == [2 * 4, 2 * 4]
    assert f"Sample gallery ({finished_run.name})" in galleries[0] and "Sample gallery (other)" in galleries[1]
    assert f"Held-out evaluations ({finished_run.name})" in page and "Held-out evaluations (other)" in page
    assert main(["report", str(tmp_path / "missing")]) == 2  # a clear one-line error, no traceback


@needs_chromium
def test_report_html_loads_in_a_browser_without_errors_and_shows_the_gallery(finished_run):
    with opened_page(finished_run / REPORT_FILE, viewport={"width": 1400, "height": 2000}) as (page, errors):
        loaded = page.eval_on_selector_all("#gallery-0 img.media", "images => images.map(i => i.complete && i.naturalWidth)")
        page.select_option("#gallery-0 .step-filter", "2")
        shown = page.eval_on_selector_all("#gallery-0 .card", "cards => cards.filter(c => c.style.display !== 'none').length")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert errors == []
    assert len(loaded) >= 8 and all(width > 0 for width in loaded)
    assert shown == 2  # the step filter leaves step 2's two prompts


def test_the_report_is_built_once_at_the_end_of_a_run(small_config, monkeypatch):
    from mmgrpo.trainer import grpo, pipeline

    refreshed = []
    for module in (grpo, pipeline):
        real = module.refresh_report
        monkeypatch.setattr(module, "refresh_report", lambda run_dir, alerts, real=real: refreshed.append(1) or real(run_dir, alerts))
    run_training(small_config("train.steps=4", "log.report_every_n_steps=2", "sft.enabled=false",
                              "eval.before=false", "eval.after=false"))
    assert len(refreshed) == 2  # after step 2, and once at the end (not again after step 4)
