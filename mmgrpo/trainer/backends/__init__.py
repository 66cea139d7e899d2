"""Training back ends: one process, DeepSpeed ZeRO, PyTorch FSDP2, behind one interface.

Importing this package registers ``"single"``, ``"deepspeed"`` and ``"fsdp2"`` in :data:`BACKENDS`;
DeepSpeed itself is imported only when that back end is built.
"""

from mmgrpo.trainer.backends.base import BACKENDS, OptimizerSpec, TrainingBackend, build_backend, forward_lockstep
from mmgrpo.trainer.backends.deepspeed_zero import DeepSpeedBackend
from mmgrpo.trainer.backends.fsdp2 import FSDP2Backend
from mmgrpo.trainer.backends.single import SingleProcessBackend

__all__ = [
    "BACKENDS", "DeepSpeedBackend", "FSDP2Backend", "OptimizerSpec", "SingleProcessBackend", "TrainingBackend",
    "build_backend", "forward_lockstep",
]
