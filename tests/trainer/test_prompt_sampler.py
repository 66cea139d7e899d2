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
