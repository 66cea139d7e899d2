"""Start-up memory per rank under FSDP2 and ZeRO-3: every rank reading the whole policy, against sharded loading (the
main process reads it into CPU memory, every other rank makes it on the meta device and receives its part).

A Qwen2.5-VL of a few hundred million random parameters (the tiny model's files, widened: ``--hidden``,
``--layers``) is saved once; then 2 ranks (torchrun, gloo) each load it as ``mmgrpo train`` does and build the
back end, and report their peak resident memory (``ru_maxrss``) and the time to a sharded model; then each loads a
frozen copy as the KL reference is and the back end prepares it (``prepare_frozen``): its rise in the peak is loading
alone, where the policy's peak also holds the optimizer's set-up (ZeRO-3's fp32 partitions, in host memory here)::

    DS_ACCELERATOR=cpu python3 bench/sharded_loading.py   # 2 ranks, hidden 1024, 16 layers (~250 M parameters)
    python3 bench/sharded_loading.py --backends fsdp2 --hidden 1536 --layers 20
    DS_ACCELERATOR=cpu python3 bench/sharded_loading.py --lora   # LoRA adapters (r 16): the reference is the policy
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
BACKENDS = {"fsdp2": {"backend": "fsdp2"}, "zero3": {"backend": "deepspeed", "zero_stage": 3}}
LORA_RANK = 16


def build_model(folder: Path, hidden: int, layers: int) -> int:
    """Save a widened random tiny Qwen2.5-VL (with the tiny model's processor) into ``folder``; its parameter count."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText, AutoProcessor

    from mmgrpo.models.tiny import make_tiny

    tiny = folder / "tiny"
    make_tiny("qwen2_5_vl", tiny, seed=0)
    config = AutoConfig.from_pretrained(tiny)
    config.text_config.update({"hidden_size": hidden, "intermediate_size": 4 * hidden, "num_hidden_layers": layers,
                               "num_attention_heads": hidden // 64, "num_key_value_heads": hidden // 128,
                               "layer_types": ["full_attention"] * layers, "max_window_layers": layers})
    config.vision_config.update({"out_hidden_size": hidden})
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(folder / "model")
    AutoProcessor.from_pretrained(tiny).save_pretrained(folder / "model")
    return sum(parameter.numel() for parameter in model.parameters())


def rank_main(model_path: str, backend_name: str, sharded: bool, lora: bool) -> None:
    """One rank: load as ``mmgrpo train`` does (``sharded``: the sharded-loading placement; ``lora``: with LoRA
    adapters), build the back end, then load and prepare a frozen copy as the KL reference is (no optimizer state:
    its rise in peak is loading alone; none with LoRA, whose reference is the policy with its adapters off)."""
    import torch

    from mmgrpo.config import Config
    from mmgrpo.distributed import init_process_group
    from mmgrpo.models.loading import load_model_and_processor
    from mmgrpo.trainer.backends import build_backend
    from mmgrpo.trainer.backends.base import OptimizerSpec
    from mmgrpo.trainer.setup import load_policy, loading_device

    config = Config.from_dict({"model": {"name_or_path": model_path, "dtype": "float32"},
                               "train": BACKENDS[backend_name], "lora": {"enabled": lora, "r": LORA_RANK}})
    init_process_group(600)
    baseline = _peak_mib()  # torch and transformers imported
    started = time.perf_counter()
    device = loading_device(config, torch.device("cpu")) if sharded else torch.device("cpu")
    model, _ = load_policy(config, model_path, device)
    loaded = _peak_mib()
    backend = build_backend(model, OptimizerSpec(lr=1e-5, weight_decay=0.0, total_steps=1), config.train)
    seconds, peak = time.perf_counter() - started, _peak_mib()
    shard = sum(_own_elements(parameter) for parameter in backend.model.parameters()) * 4 / MIB
    if not lora:
        reference, _ = load_model_and_processor(model_path, dtype="float32", device=device)
        backend.prepare_frozen(reference)
    report = {"rank": torch.distributed.get_rank(), "device": str(device), "baseline_mib": round(baseline),
              "peak_after_load_mib": round(loaded), "peak_mib": round(peak), "shard_mib": round(shard),
              "seconds": round(seconds, 1), "reference_rise_mib": round(_peak_mib() - peak)}
    Path(os.environ["SHARDED_LOADING_RESULTS"], f"rank-{report['rank']}.json").write_text(json.dumps(report))
    torch.distributed.destroy_process_group()


def _peak_mib() -> float:
    """This process's peak resident memory so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB


def _own_elements(parameter: object) -> int:
    """How many of ``parameter``'s elements this rank holds: its ZeRO-3 partition or its FSDP2 shard."""
    return parameter.ds_tensor.numel() if hasattr(parameter, "ds_tensor") else parameter.to_local().numel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--backends", nargs="+", choices=sorted(BACKENDS), default=sorted(BACKENDS))
    parser.add_argument("--lora", action="store_true", help=f"train LoRA adapters (r {LORA_RANK}) on the model")
    parser.add_argument("--rank-main", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args.rank_main[0], args.rank_main[1], args.rank_main[2] == "sharded", args.lora)
        return
    with tempfile.TemporaryDirectory(prefix="mmgrpo-sharded-loading-") as folder:
        parameters = build_model(Path(folder), args.hidden, args.layers)
        whole = parameters * 4 / MIB
        print(f"model: {parameters / 1e6:.0f} M parameters, {whole:.0f} MiB in fp32; {args.ranks} ranks (gloo, CPU)"
              f"{f'; LoRA r {LORA_RANK}' if args.lora else ''}")
        print(f"{'back end':<9}{'loading':<10}{'rank':>5}{'reads to':>9}{'before':>10}{'after load':>12}{'peak':>10}"
              f"{'peak - before':>15}{'own shard':>11}{'time':>7}{'reference':>11}")
        for backend, mode in ((backend, mode) for backend in args.backends for mode in ("whole", "sharded")):
            for row in _launch(Path(folder), backend, mode, args.ranks, args.lora):
                print(f"{backend:<9}{mode:<10}{row['rank']:>5}{row['device']:>9}{row['baseline_mib']:>6} MiB"
                      f"{row['peak_after_load_mib']:>8} MiB{row['peak_mib']:>6} MiB"
                      f"{row['peak_mib'] - row['baseline_mib']:>11} MiB{row['shard_mib']:>7} MiB{row['seconds']:>6}s"
                      f"{row['reference_rise_mib']:>7} MiB")


def _launch(folder: Path, backend: str, mode: str, ranks: int, lora: bool) -> list[dict]:
    """Every rank's report of one torchrun launch loading ``folder``'s model under ``backend``, ``mode``ly."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               __file__, "--rank-main", str(folder / "model"), backend, mode, *(["--lora"] if lora else [])]
    results = folder / f"{backend}-{mode}"
    results.mkdir()
    done = subprocess.run(command, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "SHARDED_LOADING_RESULTS": str(results)})
    if done.returncode:
        sys.exit(f"{backend} {mode} failed:\n{done.stderr[-3000:]}")
    return sorted((json.loads(path.read_text()) for path in results.glob("rank-*.json")), key=lambda row: row["rank"])


if __name__ == "__main__":
    main()
