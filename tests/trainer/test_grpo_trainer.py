"""The GRPO trainer end to end on the tiny Qwen2.5-VL: it learns, resumes exactly, and its options run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForImageTextToText

from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.trainer.checkpoint import latest_checkpoint
from mmgrpo.trainer.grpo import GRPOTrainer
from mmgrpo.run_files import read_metrics

from tests.training import DENSE_REWARD, build_trainer_inputs, interrupt_step, reward_at_start_and_end


def train(config, run_dir: Path, *, resume: bool = False, resume_from: Path | None = None) -> GRPOTrainer:
    checkpoint = resume_from or (latest_checkpoint(run_dir / "checkpoints") if resume else None)
    torch.manual_seed(config.seed)  # LoRA adapters are initialised from it
    model, processor, train_set = build_trainer_inputs(config, run_dir, checkpoint=checkpoint)
    torch.manual_seed(config.seed)
    trainer = GRPOTrainer(
        config, run_dir, model, processor, train_set, resume_from=checkpoint,
        reference_source=config.model.name_or_path,  # the initial policy: the model it loads
    )
    trainer.train()
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("policy_loss", [
    (),
    ("algo.policy_loss=gspo", "algo.eps_low=3e-4", "algo.eps_high=4e-4", "algo.loss_agg=seq-mean-token-mean"),
    ("algo.policy_loss=cispo", "algo.eps_low=1", "algo.eps_high=0.28", "algo.entropy_coeff=0.001"),
    ("algo.loss_type=sapo",),
    ("algo.policy_loss=gpg",),
    ("algo.policy_loss=geo_mean", "algo.eps_low=0.4", "algo.eps_high=0.4", "algo.loss_agg=seq-mean-token-mean"),
    ("algo.policy_loss=dppo_tv", "algo.eps_low=0.15", "algo.eps_high=0.15"),
    ("algo.policy_loss=dppo_kl", "algo.eps_low=0.05", "algo.eps_high=0.05", "algo.num_iterations=2"),
    ("algo.policy_loss=dro", "algo.dro_beta=0.05"),
    ("algo.policy_loss=clip_cov", "algo.clip_cov_ratio=0.05", "algo.clip_cov_lb=0", "algo.num_iterations=2"),
    ("algo.policy_loss=kl_cov", "algo.kl_cov_ratio=0.05"),
], ids=["vanilla", "gspo", "cispo-entropy", "sapo", "gpg", "geo_mean", "dppo_tv", "dppo_kl-2-iterations", "dro",
        "clip_cov-2-iterations", "kl_cov"])
def test_reward_rises_under_grpo(small_config, tmp_path, policy_loss):
    """Fails if the policy-gradient sign is flipped or advantages are zeroed (reward then falls or stays flat), with
    PPO's clip, GSPO (its paper's clip range), CISPO with an entropy bonus and SAPO (TRL's name)."""
    config = small_config("train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8", *policy_loss)
    train(config, tmp_path / "run")
    first, last = reward_at_start_and_end(tmp_path / "run")
    assert last > first + 0.25, f"reward did not rise: first steps {first:.3f}, last steps {last:.3f}"


@pytest.mark.slow
@pytest.mark.parametrize("estimator", [
    ("algo.advantage_estimator=rloo",),
    ("algo.advantage_estimator=reinforce_pp",),
    ("algo.advantage_estimator=grpo_passk",),
    ("algo.advantage_estimator=opo",),
    ("algo.advantage_estimator=gpg",),
    ("algo.advantage_estimator=gdpo", "task.rewards={share_of_threes: 1.0, text_length: 0.1}"),
    ("algo.advantage_estimator=remax", "train.lr=0.05"),
    ("algo.advantage_estimator=optimal_token_baseline", "algo.num_iterations=2"),
], ids=["rloo", "reinforce_pp", "grpo_passk", "opo", "gpg", "gdpo-two-rewards", "remax",
        "optimal_token_baseline-2-iterations"])
def test_reward_rises_under_each_advantage_estimator(small_config, tmp_path, estimator):
    """Fails if an estimator's sign is flipped or its advantages are zeroed."""
    config = small_config("train.steps=40", "rollout.prompts_per_step=4", "rollout.num_generations=8", *estimator)
    train(config, tmp_path / "run")
    first, last = reward_at_start_and_end(tmp_path / "run", key="reward/share_of_threes")
    assert last > first + 0.25, f"reward did not rise: first steps {first:.3f}, last steps {last:.3f}"
    if "remax" in estimator[0]:  # every group had its greedy baseline, which improves with the policy
        rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
        assert all(row["reward/greedy_frac"] == 1.0 for row in rows)
        first_greedy, last_greedy = reward_at_start_and_end(tmp_path / "run", key="reward/greedy")
        assert last_greedy > first_greedy


@pytest.mark.parametrize("tuning", [(), ("lora.enabled=true", "lora.r=4")], ids=["full", "lora"])
def test_ctrl_c_saves_and_resume_continues_exactly(small_config, tmp_path, monkeypatch, tuning):
    """With a KL reference (beta > 0), as every real-model recipe trains: with full fine-tuning
    the resumed run must rebuild the reference from the initial policy, not the checkpoint."""
    config = small_config("train.steps=4", "checkpoint.every_n_steps=0", "algo.beta=0.5", DENSE_REWARD, *tuning)
    full = train(config, tmp_path / "full")

    restore_step = interrupt_step(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "half")
    assert latest_checkpoint(tmp_path / "half" / "checkpoints").name == "step-2"
    restore_step()
    resumed = train(config, tmp_path / "half", resume=True)

    full_rows = read_metrics(tmp_path / "full" / "metrics.jsonl")
    resumed_rows = read_metrics(tmp_path / "half" / "metrics.jsonl")
    assert [r["step"] for r in resumed_rows] == [1, 2, 3, 4]
    assert full_rows[2]["kl"] > 1e-4  # the policy has moved from the reference by step 3
    for a, b in zip(full_rows, resumed_rows):
        for key in ("reward/total", "loss", "grad_norm", "length/mean", "entropy", "kl"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), (a["step"], key)
    for (name, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-6), name


def test_checkpoint_loads_in_plain_transformers(small_config, tmp_path):
    trainer = train(small_config("train.steps=1"), tmp_path / "run")
    checkpoint = latest_checkpoint(tmp_path / "run" / "checkpoints")
    reloaded = AutoModelForImageTextToText.from_pretrained(checkpoint)
    for (name, p), (_, q) in zip(trainer.model.named_parameters(), reloaded.named_parameters()):
        assert torch.equal(p.detach(), q), name


def test_lora_with_kl_to_adapter_free_base(small_config, tmp_path):
    config = small_config("lora.enabled=true", "lora.r=4", "algo.beta=0.04", "train.steps=2", "train.precision=bf16",
                          DENSE_REWARD)
    trainer = train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert trainer.reference.module is trainer.model  # no second copy: adapters are switched off instead
    assert all(r["kl"] >= 0 for r in rows) and rows[-1]["kl"] > 0  # the policy moved away from the base
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    reloaded, _ = load_model_and_processor(latest_checkpoint(tmp_path / "run" / "checkpoints"))
    saved = dict(reloaded.named_parameters())
    assert all(torch.equal(p.detach(), saved[n]) for n, p in trainer.model.named_parameters() if "lora_" in n)



@pytest.mark.parametrize("tuning", [(), ("lora.enabled=true", "lora.r=4", "algo.policy_loss=kl_cov"),
                                    ("algo.is_correction=tis",)], ids=["full", "lora-kl_cov", "tis"])
def test_the_optimal_token_baselines_forward_is_the_updates_old_log_probs(small_config, tmp_path, monkeypatch, tuning):
    """Two iterations need the policy's log-probs before the update: the token statistics' forward gave them (with
    LoRA too, whose adapters that forward runs with). Under TIS its weights reach the baseline."""
    import mmgrpo.algos.token_baseline as token_baseline
    import mmgrpo.trainer.update as update

    calls, weighted = [], []
    real, baseline = update.batch_logprobs, token_baseline.optimal_token_baseline
    monkeypatch.setattr(update, "batch_logprobs", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    monkeypatch.setattr(token_baseline, "optimal_token_baseline", lambda *args, **kwargs: weighted.append(
        kwargs["importance_weights"] is not None) or baseline(*args, **kwargs))
    config = small_config("train.steps=2", "algo.advantage_estimator=optimal_token_baseline", "algo.num_iterations=2",
                          DENSE_REWARD, *tuning)
    train(config, tmp_path / "run")
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(rows) == 2 and all(row["advantage/abs_max"] > 0 for row in rows)
    assert calls == []
    assert weighted == [("algo.is_correction=tis",) == tuning] * 2


def test_the_engine_is_told_before_each_update_and_given_the_weights_after(small_config, tmp_path, monkeypatch):
    """A colocated engine gives its memory back between ``before_update`` and the push (vLLM sleep level 2): each
    step calls them around its update, in that order, the push last."""
    import mmgrpo.trainer.grpo as grpo
    from mmgrpo.rollout.hf import HFEngine

    events = []
    update = grpo.policy_update
    monkeypatch.setattr(HFEngine, "before_update", lambda self: events.append("before_update"))
    monkeypatch.setattr(HFEngine, "update_weights", lambda self, model: events.append("push"))
    monkeypatch.setattr(grpo, "policy_update", lambda *args: events.append("update") or update(*args))
    train(small_config("train.steps=2"), tmp_path / "run")
    assert events == ["before_update", "update", "push"] * 2
