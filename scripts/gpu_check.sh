#!/usr/bin/env bash
# The prepared check for a lent GPU machine (the `device` tool: one run, well under 8 minutes):
#   run: bash scripts/gpu_check.sh      (writes its logs under $OUT when set, else ./gpu-check)
# 1. what the machine has (GPU, torch, transformers, vLLM, DeepSpeed);
# 2. the tests marked `gpu` (tests/e2e/test_gpu_training.py: GRPO steps on CUDA in fp32, bf16 and fp16, ZeRO-2 in fp16;
#    tests/rollout/test_gpu_engines.py: CUDA log-probs against CPU, vLLM sleep mode where vLLM is installed);
# 3. a short `mmgrpo train` on CUDA with the HF engine, and with rollout.engine=vllm where vLLM is installed.
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
nvidia-smi -L | tee "$OUT/gpu.txt"
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
