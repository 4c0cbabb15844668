"""Parameters of the ``scale_model`` experiment (``notebooks/09_scale_model.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.cluster.network import parse_rate
from hpcbench.core.config import ByteSize, DistributedConfig, param
from hpcbench.core.metrics import size_sweep
from hpcbench.core.registry import Registry
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.scale.predict import MODE_MODELS


@dataclass(frozen=True)
class RunMode:
    """One communication mode as the experiment trains it and as the scale model prices it."""

    name: str
    comm: str
    """the :data:`hpcbench.parallel.modes.MODES` name :func:`~hpcbench.parallel.modes.parallelize` wraps with"""
    compression: str
    """the :data:`hpcbench.parallel.compression.COMPRESSIONS` name (``none``: the mode's own sums)"""
    model: str
    """the :data:`hpcbench.scale.predict.MODE_MODELS` name that predicts it"""

    @property
    def python_hook(self) -> bool:
        """Whether it reduces through a Python comm hook (hierarchical, 2-bit), whose own work in a step is timed.

        Plain DDP all-reduces in C++: its cost is the collective's.
        """
        return self.comm != "ddp" or self.compression != "none"


RUN_MODES: Registry[RunMode] = Registry("scale_model mode")
for _mode in (RunMode("ddp", "ddp", "none", "ddp"),
              RunMode("hierarchical", "hierarchical", "none", "hierarchical"),
              # the 2-bit hook as a DDP comm hook over the world, the guide's 4 MiB buckets (C8)
              RunMode("quant2bit", "ddp", "quant2bit", "quant2bit"),
              # the 2-bit exchange only among node peers, float32 sums inside the node
              RunMode("quant2bit_hierarchical", "hierarchical", "quant2bit", "quant2bit_hierarchical")):
    assert _mode.model in MODE_MODELS, _mode  # an invariant of this table, not a user error
    RUN_MODES.register(_mode.name, _mode)
MODE_NAMES = tuple(RUN_MODES.names())

#: Collectives the worker can time, and the ones each mode's stages are priced with.
OP_NAMES = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter")
#: Sizes a fit needs at least: an alpha-beta fit with errors needs 3; a fourth leaves two residual degrees of
#: freedom, so the fit's errors do not rest on a single residual.
MIN_SIZES = 4
#: The rate of a phase outside the emulated cluster, where no link can be shaped.
UNSHAPED = "unshaped"


@dataclass
class ScaleModelConfig(DistributedConfig):
    """Parameters of ``09_scale_model``; the notebook's parameters cell mirrors them."""

    nodes: int = param(2, "nodes; on the emulated cluster each has its own shaped link, elsewhere an emulated "
                          "split on one loopback (one phase, unshaped)", min=2, max=4096)
    ranks_per_node: int = param(2, "ranks per node: the hierarchical hook needs >= 2 to have an intra-node stage",
                                min=2, max=64)
    link_rates: list[str] = param(["1gbit", "500mbit", "200mbit"],
                                  "node link rates, one phase each (tc syntax); the link is put back at the "
                                  "cluster's own rate afterwards. Outside the emulated cluster one unshaped "
                                  "phase runs instead",
                                  allowed="non-empty, no repeats, each a tc rate >= 1mbit")
    modes: list[str] = param(["ddp", "hierarchical", "quant2bit"],
                             "communication modes trained and predicted in every phase", choices=MODE_NAMES,
                             allowed="non-empty, no repeats")
    model: str = param("weather_tiny", "model trained: weather_tiny has 1.5 MB of float32 gradients, so a step "
                                       "is about half communication at 200mbit and short on 2 CPUs "
                                       "(weather_small: 14 MB, for a heavier run)",
                       choices=MODEL_NAMES, allowed="text models: seq_len at most the block size")
    batch_size: int = param(4, "samples per rank per step", min=1, max=4096)
    seq_len: int = param(64, "tokens per synthetic sequence of text models (grid models use their own grid)",
                         min=2, max=1024, allowed="at most the text model's block size")
    steps: int = param(20, "timed steps per mode and phase, each interleaved with the same step under a no-op "
                           "hook (the compute); every one is kept as a sample", min=3, max=100000)
    warmup_steps: int = param(2, "untimed steps per mode and phase; DDP rebuilds its buckets after the first",
                              min=1, max=1000)
    ops: list[str] = param(["all_reduce", "all_gather", "all_to_all"],
                           "collectives timed for the fits: all_reduce prices DDP and the hierarchical stages, "
                           "all_gather and all_to_all the 2-bit exchange", choices=OP_NAMES,
                           allowed="non-empty, no repeats, must include all_reduce")
    min_bytes: ByteSize = param(ByteSize(4 << 10), "smallest message of the fits (nccl-tests -b): the 2-bit "
                                                   "messages of a 1 MiB bucket are ~16 KiB", min=64,
                                allowed="<= max_bytes")
    max_bytes: ByteSize = param(ByteSize(4 << 20), "largest message of the fits (nccl-tests -e): at least "
                                                   "the largest bucket, so predictions interpolate", min=64)
    step_factor: int = param(4, "size ratio between fit points (nccl-tests -f)", min=2, max=1024,
                             allowed=f"min_bytes..max_bytes must give >= {MIN_SIZES} sizes")
    iters: int = param(10, "timed iterations per collective, size and group; the fit reads their median", min=1,
                       max=10000)
    warmup_iters: int = param(1, "untimed iterations per collective and size (connection setup)", min=0, max=1000)
    relative_fit: bool = param(False, "weight the alpha-beta fits by 1/t^2 (relative errors) instead of plain least "
                                      "squares. Off: a shaped link's token bucket passes messages below its burst "
                                      "(>= 128 KiB) at loopback speed, so small sizes lie off the line and would set "
                                      "beta; unweighted, the bandwidth-bound sizes set it")
    codec_repeats: int = param(5, "timed repetitions of the 2-bit hook's local work (coding, no communication) on "
                                  "the mode's buckets; its median joins the compute of the 2-bit modes", min=1,
                               max=1000)
    c1_tokens: list[int] = param([512, 1024, 2048, 4096, 8192, 16384],
                                 "C1 sensitivity: tokens per GPU per step (the reference point, 2048, is fixed "
                                 "in the rule)", min=1, max=1 << 24, allowed="non-empty")
    c1_nics: list[int] = param([1, 2, 4, 8], "C1 sensitivity: InfiniBand NICs per node (the guide says none; "
                                             "DGX A100 has 8)", min=1, max=64, allowed="non-empty")
    c1_grad_bytes: list[int] = param([4, 2], "C1 sensitivity: bytes per gradient element (fp32, bf16)",
                                     choices=(1, 2, 4, 8), allowed="non-empty")
    seed: int = param(0, "seed of the weights and the synthetic batches", min=0)

    def validate(self) -> None:
        if not self.link_rates or len(set(self.link_rates)) != len(self.link_rates):
            raise self._error("link_rates", f"{self.link_rates}: allowed: a non-empty list without repeats")
        for rate in self.link_rates:
            try:
                bits = parse_rate(rate)
            except ValueError as exc:
                raise self._error("link_rates", str(exc)) from None
            if bits < 1e6:
                raise self._error("link_rates", f"{rate!r} is below 1mbit: SLURM's own messages need the link")
        if not self.modes or len(set(self.modes)) != len(self.modes):
            raise self._error("modes", f"{self.modes}: allowed: a non-empty list of {list(MODE_NAMES)} without "
                                       f"repeats")
        if not self.ops or len(set(self.ops)) != len(self.ops) or "all_reduce" not in self.ops:
            raise self._error("ops", f"{self.ops}: allowed: {list(OP_NAMES)} without repeats, including all_reduce "
                                     f"(it prices DDP and the inter-node link's efficiency)")
        spec = MODELS.get(self.model)
        if spec.kind == "text" and self.seq_len > spec.max_seq_len:
            raise self._error("seq_len", f"{self.seq_len} exceeds {self.model}'s block size {spec.max_seq_len}")
        if self.min_bytes > self.max_bytes:
            raise self._error("min_bytes", f"{self.min_bytes} is larger than max_bytes={self.max_bytes}")
        if len(self.sizes()) < MIN_SIZES:
            raise self._error("step_factor", f"{self.min_bytes}..{self.max_bytes} by {self.step_factor} gives "
                                             f"{len(self.sizes())} sizes; a fit here needs >= {MIN_SIZES}")
        for name in ("c1_tokens", "c1_nics", "c1_grad_bytes"):
            if not getattr(self, name):
                raise self._error(name, "is empty; the C1 sensitivity sweep needs at least one value")

    def sizes(self) -> list[int]:
        """The message sizes of the fits, in bytes."""
        return size_sweep(self.min_bytes, self.max_bytes, self.step_factor)
