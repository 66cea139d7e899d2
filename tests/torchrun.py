"""``python -m torch.distributed.run`` for the multi-rank tests: ``ranks`` ranks on one node (``--standalone``),
or on ``nodes`` torchrun "nodes" of ``ranks / nodes`` ranks each, all on this machine, meeting through a c10d
rendezvous on 127.0.0.1 as the nodes of a cluster would. That rendezvous store is hosted here: hosted by one
node's agent, it went away when that node finished first, and the other node's last store calls failed at
its exit (seen: a worker's ``TCPStore::doWait`` "Failed to recv", then ``RendezvousConnectionError``). One
node retries once on the race of its free port: torchrun picks it, closes it and hands it on, and another
process may take it in between ("Address already in use", a known race PyTorch's own tests retry). Ranks
run with Python's fault handler on: one that aborts prints where each of its threads was."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import torch

PORT_RACE = "address already in use"
REPO = Path(__file__).resolve().parents[1]  # on the ranks' path: a launched test script imports tests.*


def torchrun(
    ranks: int, script: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 900, nodes: int = 1
) -> subprocess.CompletedProcess:
    """``script`` (a path and its arguments, or ``-m module ...``) on ``ranks`` local ranks, gloo on CPU. With
    several ``nodes`` the result holds every node's output (stdout and stderr joined in node order) and the
    first non-zero exit code."""
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths),
                   "PYTHONFAULTHANDLER": "1", **(env or {})}
    done = _launch(ranks, nodes, script, environment, timeout)
    if done.returncode != 0 and PORT_RACE in (done.stdout + done.stderr).lower():
        done = _launch(ranks, nodes, script, environment, timeout)
    return done


def _launch(ranks: int, nodes: int, script: Sequence[str], environment: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks // nodes)]
    if nodes == 1:
        command = [*launcher, "--standalone", *script]
        return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=timeout, check=False)
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)  # port 0: a free one
    rendezvous = ["--nnodes", str(nodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{store.port}",
                  "--rdzv-conf", "is_host=false", "--rdzv-id", uuid.uuid4().hex[:12]]
    started = [
        subprocess.Popen([*launcher, *rendezvous, *script], env=environment, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(nodes)
    ]
    outputs = [node.communicate(timeout=timeout) for node in started]
    code = next((node.returncode for node in started if node.returncode != 0), 0)
    return subprocess.CompletedProcess(started[0].args, code, "".join(out for out, _ in outputs),
                                       "".join(err for _, err in outputs))

