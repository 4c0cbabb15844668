"""Parameters of the ``collectives`` experiment (``notebooks/10_collectives.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import ByteSize, DistributedConfig, param
from hpcbench.core.facts import NCCL_SOCKET_THREADS_LIMIT
from hpcbench.dist.topology import GROUP_KINDS

OP_NAMES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
NCCL_GLOO_REASON = "not applicable: NCCL settings have no effect on the gloo backend"
DTYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4}
_SOCKET_THREADS_RULE = f"nccl_nsocks_perthread x nccl_socket_nthreads <= {NCCL_SOCKET_THREADS_LIMIT}"


@dataclass
class CollectivesConfig(DistributedConfig):
    """Parameters of ``10_collectives``; the notebook's parameters cell mirrors them."""

    ops: list[str] = param(list(OP_NAMES), "collectives to measure", choices=OP_NAMES, allowed="non-empty")
    min_bytes: ByteSize = param(ByteSize(1024), "smallest message (nccl-tests -b); 1K keeps latency visible", min=1,
                                allowed="<= max_bytes")
    max_bytes: ByteSize = param(ByteSize(4 << 20), "largest message (nccl-tests -e); use 128M+ on a real fabric", min=1)
    step_factor: int = param(4, "multiply the size by this between steps (nccl-tests -f)", min=2, max=1024)
    warmup_iters: int = param(3, "untimed iterations per size; the first ones pay connection setup", min=0, max=10000)
    iters: int = param(10, "timed iterations per size; each one is kept as a sample", min=1, max=100000)
    dtype: str = param("float32", "element type of the buffers", choices=tuple(DTYPES))
    groups: list[str] = param(list(GROUP_KINDS), "process groups to measure on", choices=GROUP_KINDS,
                              allowed="non-empty")
    check: bool = param(True, "verify the result values of every op and size (outside the timed loop)")
    nccl_algo: str = param("", "NCCL_ALGO for this run: '' leaves NCCL's own choice (C10 tries Tree)",
                           choices=("", "Ring", "Tree"))
    nccl_buffsize: ByteSize = param(ByteSize(0), "NCCL_BUFFSIZE in bytes: 0 leaves NCCL's default (4M)", min=0)
    nccl_nsocks_perthread: int = param(0, "NCCL_NSOCKS_PERTHREAD (socket transport): 0 leaves the default",
                                       min=0, max=64, allowed=_SOCKET_THREADS_RULE)
    nccl_socket_nthreads: int = param(0, "NCCL_SOCKET_NTHREADS (socket transport): 0 leaves the default",
                                      min=0, max=16, allowed=_SOCKET_THREADS_RULE)

    def validate(self) -> None:
        if self.min_bytes > self.max_bytes:
            raise self._error("min_bytes", f"{self.min_bytes} is larger than max_bytes={self.max_bytes}")
        if self.nodes * self.ranks_per_node < 2:
            raise self._error("ranks_per_node", "a collective needs at least 2 ranks in all (nodes x ranks_per_node)")
        if not self.ops:
            raise self._error("ops", f"is empty; allowed: {list(OP_NAMES)}")
        if not self.groups:
            raise self._error("groups", f"is empty; allowed: {list(GROUP_KINDS)}")
        threads = max(self.nccl_nsocks_perthread, 1) * max(self.nccl_socket_nthreads, 1)
        if threads > NCCL_SOCKET_THREADS_LIMIT:
            raise self._error("nccl_socket_nthreads", f"x nccl_nsocks_perthread = {threads} socket threads; NCCL "
                                                      f"allows at most {NCCL_SOCKET_THREADS_LIMIT}")

    def nccl_settings(self) -> dict[str, str]:
        """The NCCL_* variables this run sets (fields left at 0 / '' are not set)."""
        values = {"NCCL_ALGO": self.nccl_algo, "NCCL_BUFFSIZE": self.nccl_buffsize,
                  "NCCL_NSOCKS_PERTHREAD": self.nccl_nsocks_perthread,
                  "NCCL_SOCKET_NTHREADS": self.nccl_socket_nthreads}
        return {k: str(int(v)) if isinstance(v, int) else v for k, v in values.items() if v}

    def worker_env(self) -> dict[str, str]:
        return self.nccl_settings()
