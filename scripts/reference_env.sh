#!/usr/bin/env bash
# Build the reference environment (issue #32): a venv over the main environment in which tests/reference
# compares mmgrpo's policy losses and advantage estimators with verl's own core_algos (and TRL's GRPO loss).
#
#   scripts/reference_env.sh [VENV_DIR]      (default: <repo>/.ci/cache/verl-ref)
#   VENV_DIR/bin/python -m pytest -q tests/reference
#
# The venv sees the main environment's packages (--system-site-packages: torch, numpy, pytest and mmgrpo
# itself), so only verl and what importing verl.trainer.ppo.core_algos needs are added, pinned:
#   verl 0.9.1 without its dependencies (vLLM, transformers <5.11, ...: core_algos needs none of them);
#   ray (verl/__init__.py imports verl.protocol, which imports ray), tensordict (verl.protocol; verl
#   pins <=0.10.0), omegaconf (core_algos' configs), codetiming (verl.utils). hydra-core is not needed;
#   trl 1.16.0 without its dependencies (tests/reference/test_against_trl.py calls GRPOTrainer._compute_loss;
#   the main environment has transformers, accelerate, datasets).
# Idempotent: a finished build leaves a marker naming this script's hash and is skipped while it is
# unchanged; an unfinished one is resumed in place (~20-40 s from scratch, mostly ray's wheel).
# On failure: one line "reference_env.sh: FAILED: <step>" on stderr and a non-zero exit.
set -uo pipefail

fail() { echo "reference_env.sh: FAILED: $*" >&2; exit 1; }
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$REPO/.ci/cache/verl-ref}
mkdir -p "$VENV" && VENV=$(cd "$VENV" && pwd) || fail "cannot create $VENV"
MARKER=$VENV/.mmgrpo-env-ready
PY=$VENV/bin/python
readonly RECIPE="script=$(sha256sum <"${BASH_SOURCE[0]}" | cut -c1-16)"
readonly VERL=verl==0.9.1
readonly TRL=trl==1.16.0
readonly EXTRAS=(ray==2.60.0 tensordict==0.10.0 omegaconf==2.4.0 codetiming==1.4.0)

step() { echo "reference_env.sh: $1"; }
# pip in the venv, without the warning it prints for every package that a local index lacks, nor the
# resolver's list of verl requirements left out on purpose (--no-deps).
pip() {
    { "$PY" -m pip "$@" 2>&1 1>&3 | { grep -v -e "^WARNING: Location '.*' is ignored" -e "^verl .* requires " \
        -e "^ERROR: pip's dependency resolver" || true; } >&2; } 3>&1
}

if [[ -f $MARKER && $(cat "$MARKER") == "$RECIPE" ]]; then
    step "ready (marker found): $VENV"
    exit 0
fi
rm -f "$MARKER"

step "venv $VENV (with the main environment's packages)"
[[ -x $PY ]] || python3 -m venv --system-site-packages "$VENV" || fail "python3 -m venv --system-site-packages $VENV"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$PY" -c "import torch, numpy, pytest" 2>/dev/null \
    || fail "the main environment lacks torch, numpy or pytest (install mmgrpo first: pip install -e '.[dev]')"

step "pip install --no-deps $VERL"
pip install -q --no-deps "$VERL" || fail "pip install --no-deps $VERL"
step "pip install ${EXTRAS[*]} (what importing verl's core_algos needs)"
pip install -q "${EXTRAS[@]}" || fail "pip install ${EXTRAS[*]}"

step "pip install --no-deps $TRL (GRPOTrainer._compute_loss runs on the main environment's transformers)"
pip install -q --no-deps "$TRL" || fail "pip install --no-deps $TRL"

step "remove the top-level tests/ and scripts/ packages verl's wheel ships (they shadow the repo's)"
SITE=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib'))") && [[ -d $SITE ]] \
    || fail "finding the venv's site-packages"
rm -rf "$SITE/tests" "$SITE/scripts" || fail "rm -rf $SITE/tests $SITE/scripts"

step "check: verl's core_algos, TRL's GRPOTrainer and mmgrpo import"
(cd "$REPO" && "$PY" - <<'EOF') || fail "import check (verl.trainer.ppo.core_algos, trl GRPOTrainer, mmgrpo.algos)"
import trl
import trl.trainer.grpo_trainer  # noqa: F401
import verl
import verl.trainer.ppo.core_algos as core_algos

import mmgrpo.algos  # noqa: F401
import tests.reference.batches  # noqa: F401  (the repo's tests package, not one from site-packages)

print(f"  verl {verl.__version__}: {len(core_algos.POLICY_LOSS_REGISTRY)} policy losses, "
      f"{len(core_algos.ADV_ESTIMATOR_REGISTRY)} advantage estimators; trl {trl.__version__}")
EOF

echo "$RECIPE" >"$MARKER" || fail "writing $MARKER"
step "ready: $VENV"
