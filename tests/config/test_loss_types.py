"""TRL/ms-swift's ``loss_type`` names and ``importance_sampling_level``, as the objective they stand for here."""

from __future__ import annotations

import pytest

from mmgrpo.config import ConfigError, load_config
from mmgrpo.config.describe import describe_config
from mmgrpo.config.loss_types import LOSS_TYPES


@pytest.mark.parametrize(("loss_type", "objective"), [
    ("grpo", ("vanilla", "seq-mean-token-mean", "grpo")),
    ("bnpo", ("vanilla", "token-mean", "grpo")),
    ("dapo", ("vanilla", "token-mean", "grpo")),
    ("dr_grpo", ("vanilla", "seq-mean-token-sum-norm", "dr_grpo")),
    ("cispo", ("cispo", "token-mean", "grpo")),
    ("sapo", ("sapo", "seq-mean-token-mean", "grpo")),
])
def test_each_loss_type_is_the_objective_it_names(loss_type, objective):
    assert tuple(load_config(None, [f"algo.loss_type={loss_type}"]).algo.objective()) == objective
    assert set(LOSS_TYPES) == {"grpo", "bnpo", "dapo", "dr_grpo", "cispo", "sapo"}


def test_sequence_level_importance_sampling_is_gspo_and_keys_set_by_hand_still_count():
    assert load_config(None, ["algo.importance_sampling_level=sequence"]).algo.objective().policy_loss == "gspo"
    dapo_gspo = load_config(None, ["algo.loss_type=dapo", "algo.importance_sampling_level=sequence"]).algo
    assert tuple(dapo_gspo.objective()) == ("gspo", "token-mean", "grpo")
    by_hand = load_config(None, ["algo.policy_loss=cispo", "algo.loss_agg=seq-mean-token-mean"]).algo
    assert tuple(by_hand.objective()) == ("cispo", "seq-mean-token-mean", "grpo")
    agreeing = load_config(None, ["algo.loss_type=dr_grpo", "algo.loss_agg=seq-mean-token-sum-norm"]).algo
    assert agreeing.objective().loss_agg == "seq-mean-token-sum-norm"


@pytest.mark.parametrize(("overrides", "message"), [
    (["algo.loss_type=ppo"], "algo.loss_type='ppo' is not one of grpo, bnpo, dapo, dr_grpo, cispo, sapo"),
    (["algo.loss_type=dr_grpo", "algo.loss_agg=seq-mean-token-mean"], "sets algo.loss_agg=seq-mean-token-sum-norm"),
    (["algo.loss_type=cispo", "algo.importance_sampling_level=sequence"], "policy_loss cispo has no sequence"),
    (["algo.loss_type=cispo", "algo.dual_clip=3"], "algo.policy_loss=cispo has none to bound"),
    (["algo.policy_loss=gpg", "algo.num_iterations=2"], "gpg has no importance ratio"),
    (["algo.policy_loss=clip_cov", "algo.clip_cov_lb=5", "algo.clip_cov_ub=1"], "clip_cov_lb=5.0 must be below"),
    (["algo.policy_loss=dppo_kl", "algo.dual_clip=3"], "algo.policy_loss=dppo_kl has none to bound"),
    (["algo.policy_loss=dro", "algo.dro_beta=0"], "algo.dro_beta=0"),
    (["algo.policy_loss=kl_cov", "algo.kl_cov_ratio=0"], "algo.kl_cov_ratio=0"),
])
def test_conflicting_or_unknown_names_are_refused_saying_why(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, overrides)


def test_describe_shows_what_each_loss_type_sets():
    text = "".join(describe_config().split())  # wrapped, also at hyphens
    assert "dr_grpo=policy_lossvanilla,loss_aggseq-mean-token-sum-norm,advantage_estimatordr_grpo" in text
