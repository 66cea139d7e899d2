"""What a process imports before it trains: every rank, rollout worker and command pays it at start (about 8 s on
this CPU, mostly torch, transformers and torchvision), so nothing a run on a saved model does not use is imported
at module level."""

from __future__ import annotations

import subprocess
import sys

# Imported only when a run builds a tiny model (``tiny:<family>``): never by the trainer's modules.
ON_DEMAND = ("mmgrpo.models.tiny",)


def test_the_trainer_imports_the_tiny_builders_only_to_build_a_tiny_model():
    probe = f"import sys, mmgrpo.trainer.pipeline; print([name for name in {ON_DEMAND!r} if name in sys.modules])"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
