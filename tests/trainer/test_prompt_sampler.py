from mmgrpo.trainer.prompt_sampler import PromptSampler


def test_each_epoch_visits_every_prompt_once():
    sampler = PromptSampler(10, seed=3)
    first, second = sampler.take(10), sampler.take(10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new permutation per epoch


def test_resume_continues_the_same_sequence():
    reference = PromptSampler(7, seed=1)
    expected = [reference.take(3) for _ in range(6)]
    interrupted = PromptSampler(7, seed=1)
    got = [interrupted.take(3) for _ in range(4)]
    resumed = PromptSampler(7, seed=1)
    resumed.load_state_dict(interrupted.state_dict())
    got += [resumed.take(3) for _ in range(2)]
    assert got == expected


def test_weighted_mixture_draws_in_proportion_and_resumes():
    weights = [3.0] * 2 + [1.0] * 2  # dataset A (items 0, 1) weighted 3:1 against dataset B (2, 3)
    sampler = PromptSampler(4, seed=0, weights=weights)
    drawn = sampler.take(4000)
    share_a = sum(i < 2 for i in drawn) / len(drawn)
    assert abs(share_a - 0.75) < 0.03
    resumed = PromptSampler(4, seed=0, weights=weights)
    resumed.load_state_dict(sampler.state_dict())
    assert resumed.take(7) == sampler.take(7)
