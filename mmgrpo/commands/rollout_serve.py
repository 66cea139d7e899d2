"""``mmgrpo rollout-serve``: a vLLM server that a trainer elsewhere samples from (``rollout.engine=vllm_server``).

``mmgrpo rollout-serve --model PATH [--tp N] [--dp M] [--host H] [--port P] [-- EXTRA_VLLM_ARGS]``
replaces itself with vLLM's OpenAI-compatible server, with mmgrpo's endpoint plugin enabled
(``VLLM_PLUGINS=mmgrpo``: ``/mmgrpo/generate``, ``/mmgrpo/update_weights``, ``/mmgrpo/sync/*``),
its workers extended to receive broadcast weights (``WeightSyncWorker``) and log-probs of the
raw logits (what the trainer recomputes). On a machine without CUDA (vLLM's CPU build)
it also runs eagerly, without chunked prefill (seeded requests crash vLLM's CPU generator
otherwise) and with a KV cache of ``--cpu-kv-cache-gib``.
"""

from __future__ import annotations

import argparse
import os
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="checkpoint folder or Hub id the server starts from")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per engine (default 1)")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel engines (default 1)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--dtype", default="auto", help="weights dtype (default: the checkpoint's)")
    parser.add_argument("--max-model-len", type=int, default=None, help="longest prompt + completion in tokens")
    parser.add_argument(
        "--gpu-memory-utilization", type=float, default=0.9, help="share of each GPU for weights and KV cache"
    )
    parser.add_argument("--cpu-kv-cache-gib", type=float, default=1.0, help="CPU only: KV cache size (default 1)")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="after --: more arguments for vLLM's server")


def server_command(args: argparse.Namespace, *, on_gpu: bool) -> tuple[list[str], dict[str, str]]:
    """The vLLM server's argv and the environment additions it runs with."""
    argv = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
        "--tensor-parallel-size", str(args.tp), "--data-parallel-size", str(args.dp),
        "--host", args.host, "--port", str(args.port), "--dtype", args.dtype,
        "--logprobs-mode", "raw_logprobs", "--gpu-memory-utilization", str(args.gpu_memory_utilization),
        "--worker-extension-cls", "mmgrpo.rollout.weight_broadcast.WeightSyncWorker",
    ]
    if args.max_model_len is not None:
        argv += ["--max-model-len", str(args.max_model_len)]
    env = {"VLLM_PLUGINS": "mmgrpo"}
    if not on_gpu:
        argv += ["--enforce-eager", "--no-enable-chunked-prefill"]
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", f"{args.cpu_kv_cache_gib:g}")
    extra = [value for value in args.extra if value != "--"]
    return argv + extra, env


def run(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ImportError(
            "vLLM is not installed here: pip install -e '.[vllm]' on a GPU machine, scripts/vllm_cpu_env.sh on CPU"
        )
    import torch

    argv, env = server_command(args, on_gpu=torch.cuda.is_available())
    print("mmgrpo rollout-serve:", " ".join(argv), flush=True)
    os.execve(argv[0], argv, {**os.environ, **env})
