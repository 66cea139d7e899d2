"""The data a run report is built from: smoothing, panels, config changes, alerts, gallery, eval changes, media."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from mmgrpo.config.run_sections import AlertsConfig
from mmgrpo.reports.alerts import StepMonitor, config_alerts, find_alerts
from mmgrpo.reports.curves import Panel, ema, panel_keys, series, smoothing_weight
from mmgrpo.reports.gallery import changed_answers, gallery_groups
from mmgrpo.reports.run_data import config_diff, flatten
from mmgrpo.pagekit.thumbnails import thumbnail


def test_ema_matches_hand_computation_and_keeps_the_first_point():
    assert ema([1.0, 3.0], 0.5) == pytest.approx([1.0, (0.5 * 1 + 3) / 1.5])  # bias-corrected weights 0.5, 1
    assert ema([2.0, 2.0, 2.0], 0.9) == pytest.approx([2.0, 2.0, 2.0])
    assert ema([1.0, 5.0], 0.0) == [1.0, 5.0]
    with pytest.raises(ValueError, match="smoothing weight"):
        ema([1.0], 1.0)


def test_smoothing_window_is_about_five_percent_of_the_run():
    assert smoothing_weight(10) == 0.0
    assert smoothing_weight(200) == pytest.approx(0.9)  # a 10-point window


def test_panel_keys_expand_reward_components_without_totals_spreads_or_error_counts():
    rows = [{"step": 1, "reward/total": 1.0, "reward/format": 0.5, "reward/format_std": 0.1, "reward/format/errors": 0,
             "reward/count_accuracy": 0.2, "kl": float("nan")}]
    assert panel_keys(Panel("r", ("reward/*",)), rows) == ["reward/count_accuracy", "reward/format"]
    assert panel_keys(Panel("kl", ("kl",)), rows) == []  # never a finite number
    assert series([{"step": 1, "kl": 0.1}, {"step": 2}, {"step": 3, "kl": 0.3}], "kl") == ([1.0, 3.0], [0.1, 0.3])


def test_config_changes_are_the_run_keys_that_differ_from_the_defaults():
    defaults = flatten({"train": {"lr": 1e-3, "steps": 10}, "log": {"alerts": {"kl_max": 1.0}}})
    run = flatten({"train": {"lr": 5e-4, "steps": 10}, "old": {"key": 1}})  # log.alerts added after the run
    assert config_diff(defaults, run) == [("old.key", None, 1), ("train.lr", 1e-3, 5e-4)]


def test_each_alert_fires_once_at_the_step_its_rule_is_met():
    rules = AlertsConfig(kl_max=0.5, entropy_drop=0.5, zero_variance_steps=2, truncation_max=0.5)
    rows = [
        {"step": 1, "loss": 1.0, "grad_norm": 1.0, "kl": 0.1, "entropy": 2.0, "zero_variance_frac": 1.0},
        {"step": 2, "loss": 1.0, "grad_norm": 1.0, "kl": 0.6, "entropy": 1.5, "zero_variance_frac": 0.5},
        {"step": 3, "loss": 1.0, "grad_norm": 1.0, "kl": 0.9, "entropy": 0.9, "zero_variance_frac": 1.0},
        {"step": 4, "loss": math.nan, "grad_norm": 1.0, "kl": 0.1, "entropy": 0.8, "zero_variance_frac": 1.0,
         "truncation_rate": 0.75},
    ]
    fired = [(alert.step, alert.kind) for alert in find_alerts(rows, rules)]
    assert fired == [(2, "kl"), (3, "entropy"), (4, "nan"), (4, "zero_variance"), (4, "truncation")]
    monitor = StepMonitor(rules)
    assert monitor.observe(1, {"grad_norm": math.inf}) and not monitor.observe(2, {"grad_norm": math.inf})


def test_a_run_with_the_unsafe_code_sandbox_carries_a_banner(tmp_path):
    from mmgrpo.reports.html import render
    from mmgrpo.reports.run_data import RunData

    unsafe = {"task": {"name": "code", "options": {"sandbox": {"backend": "process"}}}}
    assert config_alerts({"task": {"name": "code", "options": {"sandbox": {"wall_seconds": 5}}}}) == []
    run = RunData(name="r", path=tmp_path, config=unsafe, summary={}, rows=[], completions=[])
    assert '<div class="alert"><b>r:</b> UNSAFE code sandbox' in render([run])


def _record(step: int, sample: str, reward: float, correct: bool, **extra) -> dict:
    return {"step": step, "sample_id": sample, "prompt": "How many?", "answer": 3, "media": {},
            "completion": f"<answer>{reward}</answer>", "reward": reward, "rewards": {"format": 1.0},
            "advantage": reward - 0.5, "correct": correct, "truncated": False, **extra}


def test_gallery_groups_a_steps_prompts_and_marks_best_and_worst():
    records = [_record(step, f"s{i}", r, r > 0.5) for step in (10, 20, 30, 40) for i in range(2) for r in (0.2, 0.9, 0.1)]
    groups = gallery_groups(records, steps_shown=3)
    assert sorted({g.step for g in groups}) == [10, 30, 40]  # first, last and evenly between
    group = groups[0]
    assert (group.sample_id, len(group.completions), group.best, group.worst, group.any_correct) == ("s0", 3, 1, 2, True)
    assert group.rewards_vary and not gallery_groups([_record(1, "s", 0.0, False)] * 3, steps_shown=1)[0].rewards_vary


def test_changed_answers_lists_fixed_ones_first():
    def evaluation(metrics: dict[str, float]) -> dict:
        return {"items": [{"sample_id": sid, "task": "t", "answer": 1, "media": [], "prompt": f"how many {sid}?",
                           "completions": [{"text": f"{sid}:{metric}", "metric": metric}]} for sid, metric in metrics.items()]}

    before, after = evaluation({"a": 1.0, "b": 0.0, "c": 0.0}), evaluation({"a": 0.0, "b": 1.0, "c": 0.0})
    changes = changed_answers(before, after)
    assert [(c.sample_id, c.now_correct, c.before, c.after, c.prompt) for c in changes] == [
        ("b", True, "b:0.0", "b:1.0", "how many b?"), ("a", False, "a:1.0", "a:0.0", "how many a?")]


def test_thumbnails_inline_images_video_frames_and_audio_waveforms(tmp_path, video_file, audio_file, tone):
    image = tmp_path / "red.png"
    Image.new("RGB", (400, 200), "red").save(image)
    assert thumbnail("image", str(image)).startswith('<img class="media"')
    assert 'src="data:image/jpeg;base64,' in thumbnail("video", str(video_file()))
    waveform = thumbnail("audio", str(audio_file(tone(440, 0.5, 16000), 16000)))
    assert waveform.startswith("<svg") and "<polygon" in waveform
    assert thumbnail("image", str(tmp_path / "gone.png")) is None
    assert thumbnail("audio", str(image)) is None  # not audio: unreadable, no exception
    assert np.asarray(Image.open(image)).shape == (200, 400, 3)  # the source is left as it was
