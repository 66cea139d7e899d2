#!/usr/bin/env bash
# The prepared check for a lent GPU machine (the `device` tool: one run, well under 8 minutes):
#   run: bash scripts/gpu_check.sh      (writes its logs under $OUT when set, else ./gpu-check)
# 1. what the machine has (GPU, torch, transformers, vLLM, DeepSpeed);
# 2. the tests marked `gpu` (tests/e2e/test_gpu_training.py: GRPO steps on CUDA in fp32, bf16 and fp16, ZeRO-2 in fp16;
#    tests/rollout/test_gpu_engines.py: CUDA log-probs against CPU, vLLM sleep mode where vLLM is installed);
# 3. a short `mmgrpo train` on CUDA with the HF engine, and with rollout.engine=vllm where vLLM is installed.
#   run: bash scripts/gpu_check.sh sharded   (a second call, when the first passed: the 8-GPU configuration)
# the same short run under ZeRO-3 (sleep level 1) and under FSDP2 (sleep level 2) with a colocated vLLM engine in sleep mode, on 2 ranks
# where 2 GPUs are (1 otherwise), each with its median step time and the GPU memory peak (nvidia-smi).
# Each step has its own time limit and the script goes on after a failure; the summary says what passed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
summary=()
step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, record the outcome
    local name=$1 limit=$2; shift 2
    echo "== $name"
    if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then summary+=("PASS $name"); else summary+=("FAIL $name (rc $?)"); fi
    tail -5 "$OUT/$name.log"
}
sharded_run() {  # sharded_run NAME OVERRIDES...: a colocated-vLLM run on RANKS ranks, its step time and GPU memory peak
    local name=$1; shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$OUT/$name.memory" &
    local sampler=$!
    step "$name" 240 python3 -m torch.distributed.run --standalone --nproc-per-node "$RANKS" -m mmgrpo train $RUN \
        log.run_name="$name" rollout.engine=vllm rollout.vllm.enable_sleep_mode=true \
        'model.tiny_options={num_heads: 2, num_kv_heads: 1}' "$@"
    kill "$sampler" 2>/dev/null
    python3 - "$OUT/runs/$name/metrics.jsonl" "$OUT/$name.memory" <<'PY' | tee -a "$OUT/$name.log"
import json, statistics, sys
from pathlib import Path
metrics, memory = Path(sys.argv[1]), Path(sys.argv[2]).read_text().split()
steps = [json.loads(line)["time/step"] for line in metrics.read_text().splitlines()] if metrics.is_file() else []
print(f"median step {statistics.median(steps):.3f} s over {len(steps)} steps" if steps else "no step logged",
      f"| GPU memory peak {max(map(int, memory), default=0)} MiB (all GPUs' samples)")
PY
}
nvidia-smi -L | tee "$OUT/gpu.txt"
if [[ ${1:-} == sharded ]]; then
    RANKS=$(( $(nvidia-smi -L | wc -l) >= 2 ? 2 : 1 ))
    RUN="train.device=cuda sft.enabled=false train.steps=10 eval.before=false eval.after=false log.output_dir=$OUT/runs log.progress_bar=false"
    if python3 -c "import vllm, deepspeed" 2>/dev/null; then
        sharded_run zero3-vllm train.backend=deepspeed train.zero_stage=3
    else
        summary+=("SKIPPED zero3-vllm: vLLM or DeepSpeed is not installed on this machine")
    fi
    if python3 -c "import vllm" 2>/dev/null; then
        sharded_run fsdp2-vllm-sleep2 train.backend=fsdp2 rollout.vllm.sleep_level=2  # ZeRO-3's run keeps level 1
    else
        summary+=("SKIPPED fsdp2-vllm-sleep2: vLLM is not installed on this machine")
    fi
    printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
    exit 0
fi
python3 - <<'PY' | tee -a "$OUT/gpu.txt"
import importlib.util, torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("transformers", transformers.__version__)
for name in ("vllm", "deepspeed", "peft", "flash_attn"):
    print(name, "installed" if importlib.util.find_spec(name) else "MISSING")
PY
step gpu-tests 300 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests
RUN="train.device=cuda sft.steps=20 train.steps=40 eval.limit=60 log.output_dir=$OUT/runs log.progress_bar=false"
step train-hf 150 python3 -m mmgrpo train $RUN log.run_name=hf
if python3 -c "import vllm" 2>/dev/null; then
    step train-vllm 200 python3 -m mmgrpo train $RUN log.run_name=vllm rollout.engine=vllm \
        rollout.vllm.enable_sleep_mode=true 'model.tiny_options={num_heads: 2, num_kv_heads: 1}'
else
    summary+=("SKIPPED train-vllm: vLLM is not installed on this machine")
fi
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
