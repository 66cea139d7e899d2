"""Sampling on a vLLM server (``rollout.engine: vllm_server``): other GPUs, or another machine.

``mmgrpo rollout-serve --model PATH`` starts vLLM's OpenAI-compatible server with mmgrpo's
endpoint plugin (:class:`MMGRPOEndpoints`, the ``vllm.endpoint_plugins`` entry point named
``mmgrpo``), which adds two routes beside the OpenAI ones:

- ``POST /mmgrpo/generate``: prompts exactly as the colocated engine sends them (our rendered
  chat text, media loaded under our budgets and shipped losslessly: PNG images, ``.npy`` video
  frames and audio samples) with ``vllm.SamplingParams`` options; returns each request's prompt
  token ids and sampled tokens with their log-probs;
- ``POST /mmgrpo/update_weights``: reload the weights from a folder of safetensors (the trainer
  writes them there after every optimizer step: a path both machines see), then reset the
  encoder and prefix caches.

The client (:class:`VLLMServerEngine`) needs no vLLM: it runs in the trainer's environment.
It checks ``/health`` before the first step, retries a failed request with backoff, and
compares the server's prompt ids with the trainer's like the colocated engine does.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from PIL import Image
from transformers import ProcessorMixin

from mmgrpo.models.batch import MediaBudgets, PreparedPrompt
from mmgrpo.models.freezing import unchanging_weights
from mmgrpo.rollout.base import ENGINES, WeightSource
from mmgrpo.rollout.vllm import (
    SampledPrompt, VLLMSampling, policy_weights, sampled_prompt, save_weights, vllm_prompt,
)
from mmgrpo.rollout.weight_broadcast import open_group, send_weights, weight_meta
from processors import AudioClip, LoadedMedia, VideoClip

if TYPE_CHECKING:
    from mmgrpo.config.schema import Config

SERVE_HINT = "start one with `mmgrpo rollout-serve --model PATH --port PORT` and set rollout.server_url"


class ServerError(RuntimeError):
    """The vLLM server cannot be reached, or answered with an error."""


# -- the wire format: media shipped without loss ---------------------------------------------------
def _npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _from_npy(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def encode_media(item: LoadedMedia) -> dict[str, Any]:
    """A loaded media item as JSON: PNG for images, ``.npy`` for video frames and audio samples."""
    if isinstance(item, VideoClip):
        clip = {field.name: getattr(item, field.name) for field in dataclasses.fields(item) if field.name != "frames"}
        return {"video": _npy(item.frames), "clip": clip}
    if isinstance(item, AudioClip):
        return {"audio": _npy(item.samples), "sample_rate": item.sample_rate, "source": item.source}
    buffer = io.BytesIO()
    item.save(buffer, format="PNG")
    return {"image": base64.b64encode(buffer.getvalue()).decode("ascii")}


def decode_media(encoded: Mapping[str, Any]) -> LoadedMedia:
    """The item :func:`encode_media` encoded, equal to the original."""
    if "video" in encoded:
        return VideoClip(frames=_from_npy(encoded["video"]), **encoded["clip"])
    if "audio" in encoded:
        return AudioClip(_from_npy(encoded["audio"]), encoded["sample_rate"], encoded["source"])
    image = Image.open(io.BytesIO(base64.b64decode(encoded["image"])))
    image.load()
    return image


def encode_prompt(prompt: PreparedPrompt, options: Mapping[str, Any], *, add_special_tokens: bool) -> dict[str, Any]:
    """One ``/mmgrpo/generate`` request: text, media, ``vllm.SamplingParams`` options and whether the server's
    tokenizer adds its special tokens to the text."""
    media = {modality: [encode_media(item) for item in items] for modality, items in prompt.media.items()}
    token_ids = None if prompt.token_ids is None else list(prompt.token_ids)
    return {"prompt": prompt.text, "prompt_token_ids": token_ids, "media": media, "options": dict(options),
            "add_special_tokens": add_special_tokens}


# -- the server side: vLLM's endpoint plugin ---------------------------------------------------------
class MMGRPOEndpoints:
    """vLLM endpoint plugin (entry point ``vllm.endpoint_plugins: mmgrpo``; the server loads it
    when ``VLLM_PLUGINS`` names it, as ``mmgrpo rollout-serve`` sets)."""

    name = "mmgrpo"
    required_tasks = ("generate",)

    def attach_router(self, app: Any) -> None:
        from fastapi import APIRouter, Request

        router = APIRouter()
        routes = (("/mmgrpo/generate", _serve_generate, "POST"), ("/mmgrpo/update_weights", _serve_update, "POST"),
                  ("/mmgrpo/info", _serve_info, "GET"), ("/mmgrpo/sync/join", _serve_sync_join, "POST"),
                  ("/mmgrpo/sync/receive", _serve_sync_receive, "POST"), ("/mmgrpo/sync/done", _serve_sync_done, "POST"))
        for path, handler, method in routes:
            handler.__annotations__["request"] = Request  # this module's annotations are strings to FastAPI
            router.add_api_route(path, handler, methods=[method])
        app.include_router(router)

    async def init_state(self, engine_client: Any, state: Any, args: Any) -> None:
        state.mmgrpo_engine_client = engine_client


async def _serve_generate(request: Any) -> dict[str, Any]:
    body = await request.json()
    engine = request.app.state.mmgrpo_engine_client
    outputs = await asyncio.gather(*(_generate_one(engine, one) for one in body["requests"]))
    return {"outputs": [asdict(output) for output in outputs]}


async def _serve_update(request: Any) -> dict[str, Any]:
    body = await request.json()
    engine = request.app.state.mmgrpo_engine_client
    await engine.collective_rpc("mmgrpo_reload", kwargs={"weights_path": body["path"], "partial": body["partial"]})
    await _reset_caches(engine)
    return {"updated": True}


async def _reset_caches(engine: Any) -> None:
    await engine.reset_encoder_cache()
    await engine.reset_prefix_cache()


async def _serve_info(request: Any) -> dict[str, Any]:
    """What the client checks before the first step: dtype, log-probs mode, workers (for weight sync)."""
    engine = request.app.state.mmgrpo_engine_client
    config = engine.model_config
    return {
        "dtype": str(config.dtype).removeprefix("torch."), "logprobs_mode": config.logprobs_mode,
        "workers": engine.vllm_config.parallel_config.world_size,
    }


# The broadcast weight path (:mod:`mmgrpo.rollout.weight_broadcast`): join and receive start the
# workers' side in the background and answer at once, so that the trainer can take its part of the
# collective; done waits for them (and, after a receive, resets the caches).
async def _serve_sync_join(request: Any) -> dict[str, Any]:
    body = await request.json()
    state = request.app.state
    state.mmgrpo_sync = asyncio.create_task(state.mmgrpo_engine_client.collective_rpc("mmgrpo_join", kwargs=body))
    return {"started": True}


async def _serve_sync_receive(request: Any) -> dict[str, Any]:
    body = await request.json()
    state = request.app.state
    state.mmgrpo_sync = asyncio.create_task(
        state.mmgrpo_engine_client.collective_rpc("mmgrpo_receive", args=(body["meta"], body["partial"]))
    )
    return {"started": True}


async def _serve_sync_done(request: Any) -> dict[str, Any]:
    body = await request.json()
    state = request.app.state
    await state.mmgrpo_sync
    if body.get("weights_changed"):
        await _reset_caches(state.mmgrpo_engine_client)
    return {"done": True}


async def _generate_one(engine: Any, request: Mapping[str, Any]) -> SampledPrompt:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    media = {modality: [decode_media(item) for item in items] for modality, items in request["media"].items()}
    options = dict(request["options"])
    options["logit_bias"] = {int(token): bias for token, bias in options.get("logit_bias", {}).items()}
    params = SamplingParams(**options, output_kind=RequestOutputKind.FINAL_ONLY)
    final = None
    prompt = vllm_prompt(request["prompt"], media, request.get("prompt_token_ids"))
    tokenization = {"add_special_tokens": request.get("add_special_tokens", True)}
    async for output in engine.generate(prompt, params, uuid.uuid4().hex, tokenization_kwargs=tokenization):
        final = output
    return sampled_prompt(final)


def endpoint_plugin() -> MMGRPOEndpoints:
    """The ``vllm.endpoint_plugins`` entry point."""
    return MMGRPOEndpoints()


# -- the client side: the rollout engine ----------------------------------------------------------
@ENGINES.register("vllm_server")
class VLLMServerEngine(VLLMSampling):
    """Samples on a running ``mmgrpo rollout-serve`` server; pushes new weights to it after each step."""

    def __init__(
        self,
        model: torch.nn.Module,
        processor: ProcessorMixin,
        *,
        url: str,
        budgets: MediaBudgets | None = None,
        max_prompt_len: int | None = None,
        weights_dir: str | Path | None = None,
        timeout_s: float = 300.0,
        retries: int = 3,
        wait_s: float = 60.0,
        backend: WeightSource | None = None,
        sync_address: str | None = None,
        unchanging: frozenset[str] = frozenset(),
    ) -> None:
        """Waits up to ``wait_s`` for the server's ``/health``, then sends it ``model``'s weights
        through ``weights_dir`` (a temporary folder by default: a server on this machine reads it).
        On several ranks (``backend``) every rank samples from the server, and the main process
        alone pushes the weights, gathered from the shards under ZeRO-3 and FSDP2. ``sync_address``
        ("host:port" the server's workers can reach, a port free here) broadcasts the weights over a
        process group of the trainer and the server's workers instead of going through files."""
        super().__init__(model, processor, budgets=budgets, max_prompt_len=max_prompt_len, logprobs_mode="raw",
                         unchanging=unchanging)
        self.backend = backend if backend is not None and backend.ranks.world_size > 1 else None
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.weights_dir = self.scratch_or(weights_dir)
        self._wait_until_healthy(wait_s)
        info = self._check_engine(str(next(model.parameters()).dtype).removeprefix("torch."))
        self.sync_group = None
        if sync_address is not None and (self.backend is None or self.backend.ranks.is_main_process):
            self.sync_group = self._join_sync_group(sync_address, info["workers"])
        self.update_weights(model)

    @classmethod
    def from_config(
        cls, config: Config, model: torch.nn.Module, processor: ProcessorMixin, budgets: MediaBudgets,
        backend: WeightSource | None = None,
    ) -> VLLMServerEngine:
        rollout = config.rollout
        return cls(
            model, processor, url=rollout.server_url, budgets=budgets, max_prompt_len=config.data.max_prompt_tokens,
            weights_dir=rollout.vllm.weights_dir, timeout_s=rollout.server_timeout_s,
            retries=rollout.server_retries, wait_s=rollout.server_wait_s, backend=backend,
            sync_address=rollout.server_sync_address if rollout.server_weight_sync == "broadcast" else None,
            unchanging=unchanging_weights(model),
        )

    def before_update(self) -> None:
        """Nothing to give back: the server runs on devices of its own."""

    def update_weights(self, model_or_state_dict: torch.nn.Module | Mapping[str, torch.Tensor]) -> None:
        """Write the policy's weights to ``weights_dir`` (after the first time, less the unchanging ones); the
        server reloads them and resets its caches. On several ranks each takes part in gathering them; the others
        wait until the server has them."""
        skip = self.left_out_of_push()
        if self.backend is None:
            self._push(model_or_state_dict, skip)
        else:
            if not isinstance(model_or_state_dict, torch.nn.Module):
                raise TypeError("on several ranks the server engine gathers the weights itself: pass the policy module")
            main = self.backend.ranks.is_main_process
            gathered = {}
            for name, tensor in policy_weights(model_or_state_dict, self.backend, skip):  # collective: main keeps each
                if main:
                    gathered[name] = tensor.to("cpu", copy=True)
            if main:
                self._push(gathered, skip)
            self.backend.ranks.barrier()
        self.holds_every_weight = True

    def _push(self, weights: torch.nn.Module | Mapping[str, torch.Tensor], skip: frozenset[str]) -> None:
        """``weights`` (a module: less ``skip``; a gathered dict: already without them) to the server."""
        if self.sync_group is None:
            save_weights(weights, self.weights_dir, skip=skip)
            self._post("/mmgrpo/update_weights", {"path": str(self.weights_dir.resolve()), "partial": bool(skip)})
            return
        named = dict(policy_weights(weights, skip=skip))
        self._post("/mmgrpo/sync/receive", {"meta": weight_meta(named), "partial": bool(skip)})
        send_weights(self.sync_group, named)
        self._post("/mmgrpo/sync/done", {"weights_changed": True})

    def _join_sync_group(self, address: str, workers: int) -> Any:
        host, _, port = address.rpartition(":")
        world_size = 1 + workers
        self._post("/mmgrpo/sync/join", {"host": host, "port": int(port), "world_size": world_size,
                                        "timeout_s": self.timeout_s})
        group = open_group(host, int(port), world_size, 0, self.timeout_s)
        self._post("/mmgrpo/sync/done", {})
        return group

    def _sample(self, prompts: Sequence[PreparedPrompt], options: Sequence[dict[str, Any]]) -> list[SampledPrompt]:
        special = self.adds_special_tokens(prompts)
        requests = [encode_prompt(p, o, add_special_tokens=special) for p, o in zip(prompts, options)]
        reply = self._post("/mmgrpo/generate", {"requests": requests})
        return [
            SampledPrompt(out["prompt_token_ids"], [tuple(sample) for sample in out["samples"]])
            for out in reply["outputs"]
        ]

    def _post(self, route: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``payload`` as JSON, retrying connection failures and server errors with backoff."""
        data = json.dumps(payload).encode()
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                self.url + route, data=data, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                detail = error.read().decode(errors="replace")[:500]
                if error.code == 404:
                    raise ServerError(
                        f"{self.url}{route}: not found; the server lacks mmgrpo's endpoints: {SERVE_HINT}"
                    ) from None
                if error.code < 500 or attempt == self.retries:
                    raise ServerError(f"{self.url}{route}: HTTP {error.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if attempt == self.retries:
                    raise ServerError(
                        f"{self.url}{route}: no answer after {self.retries + 1} tries ({error}); {SERVE_HINT}"
                    ) from None
            time.sleep(min(2.0**attempt, 30.0))
        raise AssertionError("unreachable")

    def _check_engine(self, policy_dtype: str) -> dict[str, Any]:
        """Refuse a server whose log-probs could not equal the trainer's: another dtype, or log-probs of
        processed logits (a server not started by ``mmgrpo rollout-serve``)."""
        with urllib.request.urlopen(self.url + "/mmgrpo/info", timeout=self.timeout_s) as response:
            info = json.loads(response.read())
        problems = []
        if info["dtype"] != policy_dtype:
            problems.append(f"it runs {info['dtype']} and the policy {policy_dtype} (start it with --dtype {policy_dtype})")
        if info["logprobs_mode"] != "raw_logprobs":
            problems.append(f"it reports {info['logprobs_mode']}, not raw_logprobs (start it with mmgrpo rollout-serve)")
        if problems:
            raise ServerError(f"the vLLM server at {self.url} cannot sample for this trainer: {'; '.join(problems)}")
        return info

    def _wait_until_healthy(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
                    reason = f"HTTP {response.status}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                reason = str(error)
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"no vLLM server answered at {self.url}/health within {wait_s:g} s ({reason}): {SERVE_HINT}"
                )
            time.sleep(1.0)
