"""The GRPO objective's config section (``algo``): advantages, the policy loss, clipping, KL and DAPO extras."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mmgrpo.config.fields import option
from mmgrpo.config.loss_types import LOSS_TYPES, SEQUENCE_LEVEL, Objective, describe_loss_types


@dataclass
class AlgoConfig:
    """The GRPO objective: advantages, clipping, KL, loss aggregation and DAPO extras."""

    advantage_estimator: str = option(
        "grpo", "Registered estimator (mmgrpo.algos): grpo, dr_grpo, rloo, reinforce_pp (group-centred, whitened "
        "over the batch's tokens), grpo_passk (Pass@k: only each group's best gets its margin over the runner-up), "
        "opo (length-weighted group-mean baseline), gpg (group-centred x batch size / rewarded count), gdpo (each "
        "task reward GRPO-normalised on its own, then weighted, summed and whitened), remax (reward minus that of the "
        "prompt's greedy completion, one extra greedy sample per prompt on any engine), optimal_token_baseline (a "
        "baseline per token position from the group's returns weighted by each path's variance so far; one forward "
        "of the policy before the update, reused as the old log-probs)."
    )
    scale_std: bool = option(True, "Divide advantages by the reward std (GRPO). Dr. GRPO: false (mean-centred only).")
    scale: Literal["group", "batch"] = option(
        "group", "Std over each group (GRPO) or the whole batch (TRL's scale_rewards='batch')."
    )
    advantage_eps: float = option(1e-4, "Added to the std before dividing (TRL: 1e-4).", gt=0)
    process_reward_weight: float = option(
        1.0, "Process supervision: a token's advantage = its completion's outcome advantage + this x the sum of "
        "the group-normalised step rewards from it onward (DeepSeekMath); used when a reward returns steps. "
        "0 ignores steps.", ge=0
    )
    num_iterations: int = option(1, "mu: policy updates per rollout batch (DeepSeekMath: 1).", ge=1)
    policy_loss: str = option(
        "vanilla", "Policy-gradient surrogate (mmgrpo.algos.surrogates): vanilla (PPO clip per token), gspo "
        "(GSPO's clipped sequence ratio; paper: eps_low 3e-4, eps_high 4e-4, beta 0), gspo_token (GSPO-token: "
        "token-level advantages allowed), cispo (clipped importance weight, no clipped gradient; paper: eps_low 1), "
        "sapo (a soft sigmoid gate in place of the clip: algo.sapo_tau_pos, algo.sapo_tau_neg), gpg (the plain policy "
        "gradient -A log pi, no ratio), geo_mean (GMPO: geometric mean of the clipped token ratios; eps_low/eps_high "
        "then bound the log-ratio, paper 0.4), dppo_tv / dppo_kl (DPPO: a token's truncated policy gradient stops "
        "once its probability moved past a divergence threshold, eps_low/eps_high then being the total-variation or "
        "binary-KL thresholds; paper: TV 0.15, KL 0.05), dro (policy gradient minus algo.dro_beta/2 x the squared "
        "log-ratio), clip_cov / kl_cov (PPO clip, or the plain ratio, with the tokens of high log-prob/advantage "
        "covariance detached or KL-penalised: algo.clip_cov_*, algo.kl_cov_*; arXiv 2505.22617).",
    )
    sapo_tau_pos: float = option(1.0, "SAPO's gate temperature for positive advantages (paper: 1.0).", gt=0)
    sapo_tau_neg: float = option(
        1.05, "SAPO's gate temperature for negative advantages (paper: 1.05; larger fades their updates faster).", gt=0
    )
    dppo_ratio_cap: float = option(
        20.0, "DPPO's cap on the importance weight of a token's policy gradient (verl's clip_ratio_c: 20).", gt=0
    )
    dro_beta: float = option(0.05, "DRO's weight on the squared token log-ratio (Richemond et al. 2024).", gt=0)
    clip_cov_ratio: float = option(
        2e-4, "Clip-Cov: share of a micro-batch's tokens detached at random among those of covariance in "
        "(clip_cov_lb, clip_cov_ub) (paper: 2e-4).", gt=0, le=1
    )
    clip_cov_lb: float = option(1.0, "Clip-Cov: lower covariance bound of the tokens it may detach (paper: 1).")
    clip_cov_ub: float = option(5.0, "Clip-Cov: upper covariance bound of the tokens it may detach (paper: 5).")
    kl_cov_ratio: float = option(
        2e-4, "KL-Cov: share of a micro-batch's tokens, those of largest covariance, that get the KL penalty "
        "(paper: 2e-4; 2e-3 at 7B).", gt=0, le=1
    )
    kl_cov_coef: float = option(1.0, "KL-Cov: weight of the |log-ratio| penalty (paper and verl: 1).", ge=0)
    eps_low: float = option(0.2, "Lower clip range: ratio >= 1 - eps_low (PPO/GRPO: 0.2; 1 = no lower bound).",
                            gt=0, le=1)
    eps_high: float = option(
        0.2, "Upper clip range: ratio <= 1 + eps_high (GRPO 0.2; DAPO clip-higher uses 0.28).", gt=0
    )
    dual_clip: float | None = option(
        None, "Dual-clip bound c for negative advantages (Ye et al. 2020 use 3.0); None = off.", gt=1
    )
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = option(
        "token-mean",
        "token-mean (DAPO), seq-mean-token-mean (original GRPO), seq-mean-token-sum-norm "
        "(Dr. GRPO: divides by rollout.max_new_tokens).",
    )
    entropy_coeff: float = option(
        0.0, "Entropy bonus: the loss subtracts this x the policy's token entropy, aggregated as the loss is "
        "(verl's entropy_coeff; 0 = off, the entropy is still logged).",
    )
    beta: float = option(
        0.0, "KL penalty weight. 0 skips the reference model (DAPO, Dr. GRPO); DeepSeekMath used 0.04.", ge=0
    )
    kl_estimator: Literal["k1", "k2", "k3"] = option(
        "k3", "Per-token KL estimator (DeepSeekMath: k3, unbiased and low variance)."
    )
    kl_clamp: float | None = option(
        10.0, "Clamp the log-ratio logp - ref_logp to [-c, c] before the KL estimator (verl: 10); None = off.", gt=0
    )
    is_correction: Literal["none", "tis", "mis"] = option(
        "none", "Importance sampling against the rollout engine's log-probs: tis = weight each token's loss by "
        "min(pi_trainer / pi_sampler, is_cap) (Yao et al. 2025); mis = drop the tokens whose ratio exceeds is_cap "
        "(Liu et al. 2025; one more forward per step when algo.num_iterations is 1).",
    )
    is_level: Literal["token", "sequence"] = option(
        "token", "Ratio per token, or per completion (the product of its token ratios) for all its tokens."
    )
    is_cap: float = option(2.0, "The cap C of algo.is_correction (TIS papers: 2).", gt=0)
    dynamic_sampling: bool = option(
        False, "DAPO dynamic sampling: drop groups whose rewards are all equal and resample."
    )
    max_resample_rounds: int = option(3, "Most extra rollout rounds to refill the batch under dynamic_sampling.", ge=0)
    overlong_buffer: int = option(
        0, "DAPO soft overlong punishment: last tokens before max_new_tokens where the penalty ramps up; 0 = off.", ge=0
    )
    overlong_penalty: float = option(
        1.0, "Penalty at max_new_tokens, reached linearly over overlong_buffer (DAPO: 1.0).", ge=0
    )
    mask_truncated: bool = option(False, "Exclude truncated completions from the loss (DAPO overlong filtering).")
    dynamic_group_size: bool = option(
        False, "Adapt G per prompt from its recent reward variance, within [group_size_min, group_size_max]."
    )
    group_size_min: int = option(4, "Smallest G under dynamic_group_size.", ge=2)
    group_size_max: int = option(16, "Largest G under dynamic_group_size.", ge=2)
    loss_type: str | None = option(
        None, "TRL/ms-swift's loss_type, setting policy_loss, loss_agg and advantage_estimator (each left at its "
        f"default or set to the same): {describe_loss_types()}. None = those keys as set.",
    )
    importance_sampling_level: Literal["token", "sequence"] = option(
        "token", "TRL's switch: sequence = the ratio of the whole completion (policy_loss vanilla becomes gspo, GSPO)."
    )

    def objective(self) -> Objective:
        """The policy loss, aggregation and advantage estimator the run trains with (``loss_type`` and
        ``importance_sampling_level`` applied)."""
        objective = LOSS_TYPES.get(self.loss_type or "", Objective(self.policy_loss, self.loss_agg,
                                                                 self.advantage_estimator))
        if self.importance_sampling_level == "sequence":
            objective = objective._replace(policy_loss=SEQUENCE_LEVEL.get(objective.policy_loss,
                                                                          objective.policy_loss))
        return objective
