"""What the vLLM engine sends and checks, without vLLM: requests from prepared prompts, the prompt-id guard."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from mmgrpo.models.batch import build_prompt_batch
from mmgrpo.config.vllm_section import VLLMConfig
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.rollout.vllm import PromptMismatchError, VLLMEngine, check_prompt_ids, engine_model_dir, vllm_request
from mmgrpo.rollout.weight_broadcast import refuse_unpacked_cpu_experts
from mmgrpo.types import Sample
from processors import AudioClip, VideoBudget, VideoClip, VideoSpan


def test_requests_carry_the_rendered_prompt_and_the_loaded_media(policy, samples) -> None:
    model, processor = policy
    prompts = build_prompt_batch(processor, samples, family=model.config.model_type)
    requests = [vllm_request(prompt) for prompt in prompts.prepared]
    assert [r["prompt"] for r in requests] == [p.text for p in prompts.prepared]
    assert all(r["prompt"].count("<|image_pad|>") == 1 for r in requests)
    # the image our budgets resized, not the original: vLLM's processor must not resize it again
    assert [r["multi_modal_data"]["image"].size for r in requests] == [
        p.media["image"][0].size for p in prompts.prepared
    ]


def test_video_and_audio_items_carry_what_vllm_needs() -> None:
    from mmgrpo.rollout.vllm import vllm_media_item

    clip = VideoClip(np.zeros((4, 28, 28, 3), np.uint8), [0.0, 1.0, 2.5, 3.5], 1.0, "clip", [0, 2, 5, 7], 2.0, 8)
    frames, metadata = vllm_media_item(clip)
    assert frames is clip.frames and metadata["frames_indices"] == [0, 2, 5, 7]
    assert (metadata["fps"], metadata["total_num_frames"], metadata["do_sample_frames"]) == (2.0, 8, False)
    audio = AudioClip(np.zeros(1600, np.float32), 16_000, "beep")
    samples, rate = vllm_media_item(audio)
    assert samples is audio.samples and rate == 16_000


def test_a_video_window_reaches_the_engine_as_the_frames_the_trainer_encodes(policy) -> None:
    """The engine is sent the clip the batch builder loaded: a window's frames only, never the file anew."""
    model, processor = policy
    frames = np.stack([np.full((28, 28, 3), 20 * index, np.uint8) for index in range(8)])  # 4 s at 2 fps
    content = [{"type": "video", "video": VideoSpan(frames, 2.0, 3.5)}, {"type": "text", "text": "What moves?"}]
    sample = Sample(id="w", task="test", messages=[{"role": "user", "content": content}])
    budgets = {"video": VideoBudget(fps=2.0, min_pixels=28 * 28, max_pixels=28 * 28)}
    (prompt,) = build_prompt_batch(processor, [sample], budgets, family=model.config.model_type).prepared
    sent, metadata = vllm_request(prompt)["multi_modal_data"]["video"]
    assert sent is prompt.media["video"][0].frames
    assert metadata["frames_indices"] == [4, 5, 6, 7] and sent[:, 0, 0, 0].tolist() == [80, 100, 120, 140]


def test_a_prompt_tokenised_differently_by_the_engine_is_an_error_naming_the_sample(policy, samples) -> None:
    model, processor = policy
    prompts = build_prompt_batch(processor, samples, family=model.config.model_type)
    ours = prompts.input_ids[1][prompts.attention_mask[1].bool()].tolist()
    check_prompt_ids(prompts, 1, ours)
    shifted = ours[:5] + [ours[5] + 1] + ours[6:]
    with pytest.raises(PromptMismatchError, match=r"sample 'b'.*first difference at position 5"):
        check_prompt_ids(prompts, 1, shifted)
    with pytest.raises(PromptMismatchError, match="vLLM's prompt has"):
        check_prompt_ids(prompts, 1, ours[:-1])


def test_request_seeds_of_nearby_calls_and_rows_land_far_apart() -> None:
    from mmgrpo.rollout.vllm import request_seed

    # vLLM seeds sample i of a request with seed + i: requests must not sit within n of each other
    seeds = sorted(request_seed(step, row) for step in range(50) for row in range(32))
    assert min(b - a for a, b in zip(seeds, seeds[1:])) > 64
    assert request_seed(3, 1) == request_seed(3, 1) and all(0 <= s < 2**31 for s in seeds)


def test_media_cross_the_wire_unchanged() -> None:
    from PIL import Image

    from mmgrpo.rollout.vllm_server import decode_media, encode_media

    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (28, 56, 3), dtype=np.uint8))
    assert np.array_equal(np.asarray(decode_media(encode_media(image))), np.asarray(image))
    clip = VideoClip(rng.integers(0, 256, (4, 28, 28, 3), dtype=np.uint8), [0.0, 1.0, 2.5, 3.5], 1.0, "c", [0, 2, 5, 7],
                     2.0, 8)
    back = decode_media(encode_media(clip))
    assert np.array_equal(back.frames, clip.frames) and back.frame_indices == clip.frame_indices
    assert (back.fps, back.source_fps, back.total_frames, back.timestamps) == (1.0, 2.0, 8, clip.timestamps)
    audio = AudioClip(rng.standard_normal(1600).astype(np.float32), 16_000, "beep")
    again = decode_media(encode_media(audio))
    assert np.array_equal(again.samples, audio.samples) and again.sample_rate == 16_000


def test_an_unreachable_server_is_a_clear_error(policy) -> None:
    import socket

    from mmgrpo.rollout.vllm_server import ServerError, VLLMServerEngine

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ServerError, match=rf"no vLLM server answered at http://127.0.0.1:{port}/health.*rollout-serve"):
        VLLMServerEngine(*policy, url=f"http://127.0.0.1:{port}", wait_s=0.5)


class FakeRanks:
    """A two-rank back end stand-in: records the gather and the barrier."""

    def __init__(self, main: bool, state: dict) -> None:
        self.state, self.calls, self.shards_weights = state, [], True
        self.ranks = SimpleNamespace(world_size=2, is_main_process=main, barrier=lambda: self.calls.append("barrier"))

    def whole_weights(self, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, Any]]:
        self.calls.append("gather")
        yield from ((name, value) for name, value in self.state.items() if name not in skip)  # every rank draws all


@pytest.mark.parametrize("main", [True, False])
def test_on_several_ranks_the_main_process_alone_pushes_gathered_weights(policy, tmp_path, monkeypatch, main) -> None:
    from mmgrpo.rollout.vllm_server import VLLMServerEngine

    posted = []
    monkeypatch.setattr(VLLMServerEngine, "_wait_until_healthy", lambda self, wait_s: None)
    monkeypatch.setattr(VLLMServerEngine, "_check_engine", lambda self, dtype: None)
    monkeypatch.setattr(VLLMServerEngine, "_post", lambda self, route, payload: posted.append((route, payload)))
    model, processor = policy
    ranks = FakeRanks(main, {name: tensor.clone() for name, tensor in model.state_dict().items()})
    tower = frozenset(name for name in ranks.state if name.startswith("model.visual."))
    engine = VLLMServerEngine(model, processor, url="http://server", weights_dir=tmp_path, backend=ranks,
                              unchanging=tower)
    assert ranks.calls == ["gather", "barrier"]  # every rank gathers (a collective) and waits
    if main:
        assert posted == [("/mmgrpo/update_weights", {"path": str(tmp_path.resolve()), "partial": False})]
        assert len(load_file(tmp_path / "model.safetensors")) == len(ranks.state)
    else:
        assert posted == [] and not (tmp_path / "model.safetensors").exists()
    engine.update_weights(model)  # the server holds every weight now: the tower stays out
    assert ranks.calls[2:] == ["gather", "barrier"]
    if main:
        assert posted[1] == ("/mmgrpo/update_weights", {"path": str(tmp_path.resolve()), "partial": True})
        assert tower and len(load_file(tmp_path / "model.safetensors")) == len(ranks.state) - len(tower)


@pytest.mark.parametrize(
    ("info", "message"),
    [({"dtype": "bfloat16", "logprobs_mode": "raw_logprobs"}, "it runs bfloat16 and the policy float32 "
      r"\(start it with --dtype float32\)"),
     ({"dtype": "float32", "logprobs_mode": "processed_logprobs"}, "reports processed_logprobs, not raw_logprobs")],
)
def test_a_server_whose_logprobs_cannot_match_is_refused(policy, monkeypatch, info, message) -> None:
    import io
    import json

    from mmgrpo.rollout import vllm_server
    from mmgrpo.rollout.vllm_server import ServerError, VLLMServerEngine

    monkeypatch.setattr(VLLMServerEngine, "_wait_until_healthy", lambda self, wait_s: None)
    monkeypatch.setattr(vllm_server.urllib.request, "urlopen",
                        lambda url, timeout: io.BytesIO(json.dumps(info).encode()))
    with pytest.raises(ServerError, match=message):
        VLLMServerEngine(*policy, url="http://server")


def test_a_checkpoint_holding_the_trainers_state_reaches_vllm_without_it(tmp_path) -> None:
    """vLLM loads every *.safetensors file of a folder without an index: a resumed run's policy folder (a
    checkpoint, trainer_state.safetensors beside the model's) failed to start the engine ("no module or
    parameter named '0'")."""
    checkpoint = tmp_path / "step-1"
    checkpoint.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "trainer_state.safetensors", "trainer_state.json"):
        (checkpoint / name).write_text(name)
    engine_dir = engine_model_dir(checkpoint)
    assert sorted(path.name for path in engine_dir.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "trainer_state.json"]
    assert (engine_dir / "model.safetensors").read_text() == "model.safetensors"
    assert engine_model_dir(checkpoint) == engine_dir  # a second engine names the same folder: one vllm.LLM
    (checkpoint / "trainer_state.safetensors").unlink()
    assert engine_model_dir(checkpoint) == checkpoint  # a plain model folder is used as it is


def test_a_tied_head_is_sent_once_under_the_embeddings_name() -> None:
    """vLLM ties the head itself; weights arrive one at a time (gathered from shards), so the tie is known from
    the module, not from shared storage."""
    import torch

    from mmgrpo.rollout.vllm import checkpoint_named

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens, self.lm_head = torch.nn.Embedding(4, 2), torch.nn.Linear(2, 4, bias=False)
            self.lm_head.weight = self.embed_tokens.weight

    model = Tied()
    gathered = ((name, tensor.clone()) for name, tensor in model.state_dict().items())  # no shared storage left
    assert [name for name, _ in checkpoint_named(model, gathered)] == ["embed_tokens.weight"]


def test_an_engines_own_weights_folder_goes_with_it(policy, monkeypatch) -> None:
    """Without rollout.vllm.weights_dir an engine pushes through a temporary folder of its own (a whole model per
    push), which is removed when the engine is: none is left behind per engine built."""
    import gc

    from mmgrpo.rollout.vllm_server import VLLMServerEngine

    monkeypatch.setattr(VLLMServerEngine, "_wait_until_healthy", lambda self, wait_s: None)
    monkeypatch.setattr(VLLMServerEngine, "_check_engine", lambda self, dtype: None)
    monkeypatch.setattr(VLLMServerEngine, "_post", lambda self, route, payload: None)
    model, processor = policy
    engine = VLLMServerEngine(model, processor, url="http://server")
    folder = engine.weights_dir
    assert (folder / "model.safetensors").is_file()  # the first push
    del engine
    gc.collect()
    assert not folder.exists()


@pytest.mark.parametrize("family", ["glm4v_moe", "glm46v", "qwen3_5_moe", "qwen3_vl_moe", "qwen3_omni_moe_thinker"])
def test_a_mixture_of_experts_is_refused_on_cpu_before_any_engine_is_built(family, tiny_model_dir, monkeypatch) -> None:
    """vLLM's CPU build loads GLM-4.5V's tiny with the trainer's log-probs (1e-6), but its in-place weight reload
    leaves the experts' weights unpacked for its kernel (measured: 3e-2 apart afterwards); the colocated engine is
    refused with the way out before vLLM is even imported (this environment has none)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a machine with GPUs
    model, processor = load_model_and_processor(tiny_model_dir(family))
    with pytest.raises(NotImplementedError, match="rollout.engine=hf"):
        VLLMEngine(model, processor, options=VLLMConfig(), max_model_len=1024)


def test_a_server_worker_refuses_to_reload_experts_on_cpu_only() -> None:
    """The same refusal where a vLLM server's worker reloads: a fused-experts layer (vLLM's ``w13_weight``) on CPU."""
    experts = torch.nn.Module()
    experts.w13_weight = torch.nn.Parameter(torch.zeros(2, 4, 3))
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), experts)
    with pytest.raises(NotImplementedError, match="mixture-of-experts"):
        refuse_unpacked_cpu_experts(model, torch.device("cpu"))
    refuse_unpacked_cpu_experts(model, torch.device("cuda"))  # vLLM's GPU kernels take the weights as loaded
    refuse_unpacked_cpu_experts(torch.nn.Sequential(torch.nn.Linear(3, 3)), torch.device("cpu"))
