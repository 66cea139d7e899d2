"""`mmgrpo rollout-serve` + rollout.engine=vllm_server: sample, push weights, sample again, stop.

Needs vLLM (the server runs vLLM's OpenAI server with mmgrpo's endpoint plugin); .ci/run runs
this file in the CPU vLLM environment. The server starts once for the module (~30 s on CPU).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from mmgrpo.models.batch import PreparedPrompt
from mmgrpo.models.loading import load_model_and_processor
from mmgrpo.models.tiny import VLLM_CPU_TINY_OPTIONS
from mmgrpo.rollout import SamplingParams
from mmgrpo.rollout.vllm_server import _generate_one, encode_prompt
from mmgrpo.types import Sample

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vLLM is not installed here: scripts/vllm_cpu_env.sh builds the CPU environment .ci/run tests it in",
)

SERVER_START_S = 180
SAMPLED = SamplingParams(n=4, temperature=1.0, max_new_tokens=8, seed=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """(url, model dir, the server process) of a running `mmgrpo rollout-serve`; stopped at the end."""
    model_dir = tiny_model_dir("qwen2_5_vl", **VLLM_CPU_TINY_OPTIONS)
    port = free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    command = [sys.executable, "-m", "mmgrpo", "rollout-serve", "--model", str(model_dir), "--port", str(port),
               "--dtype", "float32", "--max-model-len", "1024"]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2):
                break
        except OSError:
            time.sleep(1)
    else:
        process.kill()
        pytest.fail(f"the server did not come up within {SERVER_START_S} s; see {log.name}")
    yield url, model_dir, process
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    log.close()


def image_samples() -> list[Sample]:
    rng = np.random.default_rng(0)
    return [
        Sample(id=f"img-{i}", task="test", messages=[{"role": "user", "content": [
            {"type": "image", "image": Image.fromarray(rng.integers(0, 256, (56 + 28 * i, 84, 3), dtype=np.uint8))},
            {"type": "text", "text": "How many red cubes are there?"},
        ]}])
        for i in range(2)
    ]


def assert_logprobs_match(groups, expected) -> None:
    import torch

    completions = [c for group in groups for c in group]
    assert completions and len(completions) == len(expected)
    for completion, reference in zip(completions, expected):
        torch.testing.assert_close(torch.tensor(completion.logprobs), reference, atol=1e-5, rtol=0)


def test_sample_push_weights_sample_again(server, make_peaked, teacher_forced_logprobs) -> None:
    from mmgrpo.rollout.vllm_server import VLLMServerEngine

    url, model_dir, _ = server
    model, processor = load_model_and_processor(model_dir)
    engine = VLLMServerEngine(model, processor, url=url, wait_s=5)
    samples = image_samples()
    before = engine.generate(samples, SAMPLED)  # prompt ids are checked against the trainer's inside
    assert [len(group) for group in before] == [SAMPLED.n] * len(samples)
    assert_logprobs_match(before, teacher_forced_logprobs(model, processor, samples, before))

    updated = make_peaked(model)
    engine.update_weights(updated)
    after = engine.generate(samples, SAMPLED)  # the same images: the encoder cache was reset
    assert_logprobs_match(after, teacher_forced_logprobs(updated, processor, samples, after))
    assert [c.logprobs for g in after for c in g] != [c.logprobs for g in before for c in g]


def test_weights_broadcast_over_a_process_group_reach_the_server(server, make_peaked, teacher_forced_logprobs):
    """rollout.server_weight_sync=broadcast: no shared folder; gloo here, NCCL on GPUs."""
    from mmgrpo.rollout.vllm_server import VLLMServerEngine

    url, model_dir, _ = server
    model, processor = load_model_and_processor(model_dir)
    engine = VLLMServerEngine(model, processor, url=url, wait_s=5, sync_address=f"127.0.0.1:{free_port()}")
    assert engine.sync_group is not None
    updated = make_peaked(model)
    engine.update_weights(updated)
    samples = image_samples()
    after = engine.generate(samples, SAMPLED)
    assert_logprobs_match(after, teacher_forced_logprobs(updated, processor, samples, after))
    engine.update_weights(model)  # back to the weights the other tests expect
    restored = engine.generate(samples, SAMPLED)
    assert_logprobs_match(restored, teacher_forced_logprobs(model, processor, samples, restored))


def test_tool_turns_continue_on_the_server_with_the_crops(server) -> None:
    """A trajectory's next turn reaches the server as token ids with the prompt's image and the crop; the last turn's
    log-probs are the trainer's over the whole trajectory."""
    import torch

    from mmgrpo.rollout.tool_turns import ToolTurns
    from mmgrpo.rollout.vllm_server import VLLMServerEngine
    from tasks.tools import TOOLS, ToolContext
    from tests.rollout.test_tool_images import ScriptedTurns, trainer_logprobs, zoom

    url, model_dir, _ = server
    model, processor = load_model_and_processor(model_dir)
    engine = VLLMServerEngine(model, processor, url=url, wait_s=5)
    turns = ToolTurns(ScriptedTurns(engine, [zoom([0.1, 0.1, 0.6, 0.5])]), processor, {"zoom_in": TOOLS.get("zoom_in")},
                      2, lambda sample: ToolContext(sample), budgets=engine.budgets)
    samples = image_samples()
    groups = turns.generate(samples, SamplingParams(n=2, max_new_tokens=6, seed=5))
    logp = trainer_logprobs((model.eval(), processor), samples, groups, shared=True)
    for row, trajectory in enumerate(c for group in groups for c in group):
        assert trajectory.tool_outcomes == ["ok"] and trajectory.media.counts == {"image": 1}
        last_turn = slice(trajectory.observation_spans[-1][1], len(trajectory.token_ids))
        torch.testing.assert_close(logp[row, last_turn], torch.tensor(trajectory.logprobs[last_turn]), rtol=0, atol=1e-5)


def test_the_server_stops_cleanly_on_sigterm(server) -> None:
    _, _, process = server
    assert process.poll() is None  # still serving; the fixture's teardown checks it exits within 60 s


def test_a_request_says_whether_the_server_adds_special_tokens() -> None:
    """A chat template that writes ``<bos>`` itself (Gemma's) gets text the server must not add one to; the flag
    travels in the request to the engine's tokenization (else vLLM's prompt has two: the prompt-id check fails)."""
    seen = []

    class Engine:
        async def generate(self, prompt, params, request_id, *, tokenization_kwargs=None):
            seen.append(tokenization_kwargs)
            yield SimpleNamespace(prompt_token_ids=[1, 2], outputs=[])

    prompt = PreparedPrompt(0, Sample(id="a", task="t", messages=[]), "<bos>hi", {})
    for adds in (False, True):
        request = encode_prompt(prompt, {"max_tokens": 1}, add_special_tokens=adds)
        asyncio.run(_generate_one(Engine(), json.loads(json.dumps(request))))
    assert seen == [{"add_special_tokens": False}, {"add_special_tokens": True}]
