"""Start-up memory per rank under FSDP2: every rank reading the whole policy, against sharded loading (the main
process reads it into CPU memory, every other rank makes it on the meta device and receives its shards).

A Qwen2.5-VL of a few hundred million random parameters (the tiny model's files, widened: ``--hidden``,
``--layers``) is saved once; then 2 ranks (torchrun, gloo) each load it as ``mmgrpo train`` does and build the
FSDP2 back end, and report their peak resident memory (``ru_maxrss``) and the time to a sharded model::

    python3 bench/sharded_loading.py                      # 2 ranks, hidden 1024, 16 layers (~330 M parameters)
    python3 bench/sharded_loading.py --hidden 1536 --layers 20
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


def rank_main(model_path: str, sharded: bool) -> None:
    """One rank: load as ``mmgrpo train`` does (``sharded``: the sharded-loading placement), build the FSDP2 back end."""
    import torch

    from mmgrpo.config import Config
    from mmgrpo.distributed import init_process_group
    from mmgrpo.trainer.backends import build_backend
    from mmgrpo.trainer.backends.base import OptimizerSpec
    from mmgrpo.trainer.setup import load_policy, loading_device

    config = Config.from_dict({"model": {"name_or_path": model_path, "dtype": "float32"}, "train": {"backend": "fsdp2"}})
    init_process_group(600)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB  # torch and transformers imported
    started = time.perf_counter()
    device = loading_device(config, torch.device("cpu")) if sharded else torch.device("cpu")
    model, _ = load_policy(config, model_path, device)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB
    backend = build_backend(model, OptimizerSpec(lr=1e-5, weight_decay=0.0, total_steps=1), config.train)
    shard = sum(p.to_local().numel() for p in backend.model.parameters()) * 4 / MIB
    report = {"rank": torch.distributed.get_rank(), "device": str(device), "baseline_mib": round(baseline),
              "peak_after_load_mib": round(loaded),
              "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB),
              "shard_mib": round(shard), "seconds": round(time.perf_counter() - started, 1)}
    Path(os.environ["SHARDED_LOADING_RESULTS"], f"rank-{report['rank']}.json").write_text(json.dumps(report))
    torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank-main", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        rank_main(args.rank_main[0], args.rank_main[1] == "sharded")
        return
    with tempfile.TemporaryDirectory(prefix="mmgrpo-sharded-loading-") as folder:
        parameters = build_model(Path(folder), args.hidden, args.layers)
        whole = parameters * 4 / MIB
        print(f"model: {parameters / 1e6:.0f} M parameters, {whole:.0f} MiB in fp32; {args.ranks} ranks (gloo, CPU)")
        print(f"{'loading':<10}{'rank':>5}{'reads to':>9}{'before':>10}{'after load':>12}{'peak':>10}{'peak - before':>15}"
              f"{'own shard':>11}{'time':>7}")
        for mode in ("whole", "sharded"):
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
                       __file__, "--rank-main", str(Path(folder) / "model"), mode]
            results = Path(folder) / mode
            results.mkdir()
            done = subprocess.run(command, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1", "SHARDED_LOADING_RESULTS": str(results)})
            if done.returncode:
                sys.exit(f"{mode} failed:\n{done.stderr[-3000:]}")
            rows = sorted((json.loads(path.read_text()) for path in results.glob("rank-*.json")),
                          key=lambda row: row["rank"])
            for row in rows:
                print(f"{mode:<10}{row['rank']:>5}{row['device']:>9}{row['baseline_mib']:>6} MiB"
                      f"{row['peak_after_load_mib']:>8} MiB{row['peak_mib']:>6} MiB"
                      f"{row['peak_mib'] - row['baseline_mib']:>11} MiB{row['shard_mib']:>7} MiB{row['seconds']:>6}s")


if __name__ == "__main__":
    main()
