"""A rollout worker: a separate process that samples and scores while the trainer trains.

The worker holds its own copy of the policy and its own rollout engine (the HF engine, or
any registered one: ``rollout.engine``). It serves requests (a batch of prompts, their
group sizes and sampling parameters) from a queue and returns one round of scored groups
(:func:`~mmgrpo.trainer.rollouts.sample_round`) per request, tagged with the policy version
that sampled it. A prompt with bad media is left out by the batch builder and comes back
in the round's ``skipped`` rows; an unexpected error in one request is sent back with its
traceback and the worker serves the next.

Weights travel through shared memory (:class:`SharedWeights`): after each optimizer step
the trainer copies its weights into one shared buffer under a lock and bumps the version;
before each request the worker copies the buffer into its model if the version moved. A request
is sampled by the version the trainer's policy had when it was submitted, never a later one: the
trainer publishes the next version only once the worker has taken the weights for every request
submitted before (a worker running behind would otherwise pick up newer weights as its timing
allows, and a run's staleness, and its resume, would differ from run to run). The trainer waits
there only while the worker still has older requests to sample, and the worker never waits.
(Measured alternatives on this CPU: a safetensors file per step costs a write and a read of
the whole model; a queue of fresh shared tensors allocates a model's worth of memory per step.)

On Linux the worker is forked from multiprocessing's fork server: a fresh interpreter that only imported the
worker's modules, once per trainer process (no CUDA state; its only other threads are the idle pools of OpenBLAS
and jemalloc, which prepare themselves for a fork, as for any forked PyTorch data loader), so a worker started
again in the same process (a program calling ``run_training`` twice, the tests) does not import torch and
transformers again; elsewhere it is spawned. The worker ends when asked, or when the trainer exits however it
does (killed included): it holds the read end of a pipe whose only write end the trainer holds, and a thread
ends the worker at its end of file. It ignores Ctrl-C, which reaches the whole process group: the trainer
decides when it stops. The fork server exits after both.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from mmgrpo.config import Config
from mmgrpo.models.adapters import unwrap_model
from mmgrpo.models.freezing import mark_unchanging
from mmgrpo.models.policy_weights import checkpoint_dir
from mmgrpo.rollout.base import SamplingParams
from mmgrpo.trainer.rollouts import Rollouts, ScoringRule, needs_greedy_baseline, sample_round
from mmgrpo.types import Sample

logger = logging.getLogger(__name__)

WORKER_MODEL_DIR = "rollout_worker_model"  # where an async worker loads a policy without a folder from


def worker_model_dir(model: torch.nn.Module, processor: Any, run_dir: Path, shards_weights: bool) -> str:
    """Where rollout workers load the policy's architecture and processor from (their weights come
    from the trainer): its folder, else a scratch copy; sharded weights cannot be saved from one
    rank, so a policy loaded from the Hub is loaded by its id (from the local Hub cache)."""
    source = unwrap_model(model).name_or_path
    if shards_weights and not (Path(source) / "config.json").is_file():
        return source
    return str(checkpoint_dir(model, processor, run_dir / WORKER_MODEL_DIR))


def warn_if_stale_uncorrected(config: Config) -> None:
    """Stale groups trained as on-policy cost accuracy: say so when async rollout has no off-policy correction."""
    rollout = config.rollout
    if rollout.max_staleness and config.algo.is_correction == "none" and rollout.logprobs_source == "trainer":
        logger.warning(
            "rollout.mode=async with rollout.max_staleness=%d but no off-policy correction: the update treats "
            "stale groups as on-policy (measured on the embedded default: 48%% held-out accuracy against 69%% "
            "with algo.is_correction=tis); set algo.is_correction=tis", rollout.max_staleness,
        )

WORKER_MODULES = ("mmgrpo.trainer.rollout_worker", "mmgrpo.trainer.setup", "mmgrpo.models.loading")
"""What the fork server imports once for every worker it starts (the rest of ``_serve``'s imports are light)."""
_POLL_S = 0.5  # how often a waiting side looks whether the other is still alive
STOP_GRACE_S = 10.0
"""How long a stop waits for the worker to finish the batch it is sampling before terminating it."""


def worker_context() -> Any:
    """Where workers start: multiprocessing's fork server on Linux (it imported ``WORKER_MODULES`` once), a freshly
    spawned interpreter elsewhere (on macOS forking a process that imported torch is unsafe; Windows cannot fork)."""
    if not sys.platform.startswith("linux"):
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(WORKER_MODULES))  # read once, when the fork server starts
    return context


class RolloutWorkerError(RuntimeError):
    """The rollout worker failed on a request, or exited."""


class SharedWeights:
    """One copy of the policy's weights in shared memory, the version it holds, and how many requests the
    worker has taken weights for; one condition guards all three. The weights are views into one flat buffer
    per dtype, so the worker receives one file descriptor per dtype, not one per tensor (the fork server
    passes fewer than 256 with a process, and a 3B VLM has about 800 tensors)."""

    def __init__(self, weights: Iterable[tuple[str, torch.Tensor]], version: int, context: Any) -> None:
        copies = [(name, tensor.detach().to("cpu", copy=True)) for name, tensor in weights]
        sizes: Counter[torch.dtype] = Counter()
        self._layout: dict[str, tuple[torch.dtype, int, tuple[int, ...]]] = {}
        for name, tensor in copies:
            self._layout[name] = (tensor.dtype, sizes[tensor.dtype], tuple(tensor.shape))
            sizes[tensor.dtype] += tensor.numel()
        self._buffers = {dtype: torch.empty(size, dtype=dtype).share_memory_() for dtype, size in sizes.items()}
        self.tensors = self._views()
        while copies:  # each copy freed once in the buffer: the host holds the weights about once, not twice
            name, tensor = copies.pop()
            self.tensors[name].copy_(tensor)
        self.changed = context.Condition()
        self._version = context.Value("q", version, lock=False)
        self._taken = context.Value("q", 0, lock=False)

    def _views(self) -> dict[str, torch.Tensor]:
        return {name: self._buffers[dtype][start:start + math.prod(shape)].view(shape)
                for name, (dtype, start, shape) in self._layout.items()}

    def __getstate__(self) -> dict[str, Any]:
        """Sent to the worker without the views: they are made again there from the buffers."""
        return {name: value for name, value in self.__dict__.items() if name != "tensors"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.tensors = self._views()

    @property
    def version(self) -> int:
        return int(self._version.value)

    def publish(
        self, weights: Iterable[tuple[str, torch.Tensor]], version: int, *, after_taken: int,
        check_worker: Callable[[], None],
    ) -> None:
        """Copy ``weights`` (names and shapes as at construction, each copied as it comes; frozen ones may be
        left out, they keep their first copy) in as ``version``, once the worker has taken the weights for
        ``after_taken`` requests; ``check_worker`` raises while waiting if the worker is gone."""
        with self.changed:
            while self._taken.value < after_taken:
                check_worker()
                self.changed.wait(_POLL_S)
            for name, tensor in weights:
                self.tensors[name].copy_(tensor)
            self._version.value = version

    def load_into(self, model: torch.nn.Module) -> int:
        """Copy the buffer into ``model``; returns the version it held."""
        with self.changed:
            model.load_state_dict(self.tensors, strict=True)
            return self.version

    def take(self, model: torch.nn.Module, version: int) -> int:
        """The weights for the worker's next request: the buffer copied into ``model`` (which holds
        ``version``) if it holds another version; returns the version ``model`` holds now."""
        with self.changed:
            if self.version != version:
                model.load_state_dict(self.tensors, strict=True)
            self._taken.value += 1
            self.changed.notify_all()
            return self.version


@dataclass(frozen=True)
class WorkerSpec:
    """What the worker process builds its engine from (sent to it once, at start)."""

    config: dict[str, Any]  # Config.to_dict()
    model_dir: str  # the policy's architecture and processor (weights come from SharedWeights)
    device: str
    scoring: dict[str, ScoringRule]
    unchanging: frozenset[str] = frozenset()  # the trainer's weights no update changes: pushes to the engine skip them


@dataclass
class WorkerResult:
    """One request's round of scored groups and the policy version that sampled it."""

    request_id: int
    version: int
    rollouts: Rollouts
    seconds: float  # the worker's time on this request: weights, encoding, sampling, scoring


@dataclass(frozen=True)
class WorkerReady:
    """The worker built its engine on the weights of ``version`` and waits for requests."""

    version: int


class RolloutWorker:
    """The trainer's handle on the worker process: submit requests, receive results, publish weights."""

    def __init__(self, spec: WorkerSpec, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Start the worker on ``weights``, the policy's ``version`` (its step count)."""
        context = worker_context()
        self.weights = SharedWeights(weights, version, context)
        self._submitted = 0
        self._requests = context.Queue()
        self._results = context.Queue()
        self._stop = context.Event()
        trainer_alive, self._alive = context.Pipe(duplex=False)  # the trainer holds the only write end
        self.process = context.Process(
            target=_serve, name="mmgrpo-rollout-worker", daemon=True,
            args=(spec, self.weights, self._requests, self._results, self._stop, trainer_alive, dict(os.environ)),
        )
        with _main_script_hidden():
            self.process.start()
        trainer_alive.close()
        # Before the trainer publishes newer weights: the first requests are sampled by the weights it started on,
        # however long the worker takes to start (a resumed run's worker then samples as the uninterrupted one's).
        self._next_message(lambda message: isinstance(message, WorkerReady), "starting")

    def submit(self, request_id: int, samples: Sequence[Sample], group_sizes: Sequence[int], params: SamplingParams) -> None:
        self._requests.put((request_id, list(samples), list(group_sizes), params))
        self._submitted += 1

    def publish(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """The policy's weights as ``version``, for the requests submitted from now on (see the module's docstring)."""
        self.weights.publish(weights, version, after_taken=self._submitted,
                             check_worker=lambda: self._check_alive("taking the weights of its requests"))

    def receive(self) -> WorkerResult:
        """The next finished request (in submission order); raises :class:`RolloutWorkerError` when
        the worker failed on it or exited."""
        return self._next_message(lambda message: isinstance(message, WorkerResult), "returning its batch")

    def _next_message(self, expected: Callable[[Any], bool], doing: str) -> Any:
        while True:
            try:
                message = self._results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive(doing)
                continue
            if expected(message):
                return message
            request_id, details = message
            raise RolloutWorkerError(f"the rollout worker failed on batch {request_id}:\n{details}")

    def _check_alive(self, doing: str) -> None:
        if not self.process.is_alive():
            raise RolloutWorkerError(
                f"the rollout worker (pid {self.process.pid}) exited with code {self.process.exitcode} "
                f"before {doing}; see its output above"
            ) from None

    def close(self, timeout_s: float | None = None) -> None:
        """Stop the worker after its current request (those still queued are dropped); terminate it if
        it has not stopped within ``timeout_s`` (default :data:`STOP_GRACE_S`)."""
        timeout_s = STOP_GRACE_S if timeout_s is None else timeout_s
        if self.process.is_alive():
            self._stop.set()
            self._requests.put(None)  # wakes a worker waiting for a request
            self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout_s)
        for channel in (self._requests, self._results):
            channel.cancel_join_thread()
            channel.close()
        self._alive.close()


def _serve(
    spec: WorkerSpec, weights: SharedWeights, requests: Any, results: Any, stop: Any, trainer_alive: Connection,
    environment: dict[str, str],
) -> None:
    """The worker process: build the engine, then serve requests until told to stop or the trainer exits. It
    runs in the trainer's ``environment`` of now (the fork server kept the one it started in); what a preloaded
    module read from the environment at import (``OMP_NUM_THREADS``, the Hub's paths) is the fork server's."""
    _exit_with_trainer(trainer_alive)
    os.environ.clear()
    os.environ.update(environment)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from mmgrpo.config import Config
    from mmgrpo.config.validation import plugin_specs
    from mmgrpo.plugins import load_plugins
    from mmgrpo.models.loading import load_model_and_processor
    from mmgrpo.trainer.setup import build_engine
    from mmgrpo.reward_models import register_reward_models

    config = Config.from_dict(spec.config)
    if config.rollout.worker_threads:
        torch.set_num_threads(config.rollout.worker_threads)
    load_plugins(plugin_specs(config))  # this process is new: the run's tasks and rewards again
    register_reward_models(config.task.reward_models)
    model, processor = load_model_and_processor(
        spec.model_dir, dtype=config.model.dtype, attn_implementation=config.model.attn_implementation,
        trust_remote_code=config.model.trust_remote_code, device=spec.device,
    )
    model.eval()
    mark_unchanging(model, spec.unchanging)
    version = weights.load_into(model)
    engine = build_engine(config, model, processor)
    results.put(WorkerReady(version))
    while True:
        message = requests.get()  # the trainer's close() sends None; its exit ends this process
        if message is None or stop.is_set():
            return
        request_id, samples, group_sizes, params = message
        started = time.perf_counter()
        try:
            taken = weights.take(model, version)
            if taken != version:
                version = taken
                engine.update_weights(model)
            prompts = engine.encode(samples)  # through the preprocessing cache when the engine takes one
            rollouts = sample_round(engine, prompts, samples, group_sizes, spec.scoring, params,
                                    greedy_baseline=needs_greedy_baseline(config))
            results.put(WorkerResult(request_id, version, _for_trainer(rollouts), time.perf_counter() - started))
        except Exception:  # noqa: BLE001 - sent to the trainer, which decides
            results.put((request_id, traceback.format_exc()))


def _for_trainer(rollouts: Rollouts) -> Rollouts:
    """The round as the trainer needs it: groups keep their prompt batch (without the decoded media,
    which only a vLLM engine reads) and a light sample (the trainer holds the full one)."""
    light = {}
    for group in rollouts.groups:
        if group.prompts is not None and id(group.prompts) not in light:
            light[id(group.prompts)] = replace(group.prompts, prepared=[])
    summary = rollouts.summary()
    for full, group in zip(rollouts.groups, summary.groups):
        group.prompts, group.prompt_row = light.get(id(full.prompts)), full.prompt_row
    return summary


@contextmanager
def _main_script_hidden() -> Iterator[None]:
    """Start a worker process without it re-running the parent's main script (multiprocessing would,
    and an unguarded script would train again in the worker): the worker needs nothing from it. Hence
    rewards and engines reach the worker through plugins and modules it imports, not the script."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _exit_with_trainer(trainer_alive: Connection) -> None:
    """SIGTERM this process (as a scheduler's stop would) once the trainer's end of ``trainer_alive`` closes,
    whether the trainer closed the worker or died; a thread waits for it, so it ends a worker mid-batch too."""

    def wait_then_exit() -> None:
        try:
            trainer_alive.recv_bytes()
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(STOP_GRACE_S)  # only if a handler caught it
        os._exit(1)

    threading.Thread(target=wait_then_exit, name="mmgrpo-trainer-watch", daemon=True).start()
