"""Parameters of the ``advisor`` experiment (``notebooks/13_advisor.ipynb``).

Three regimes the advisor should tell apart, each one phase of the task with its own link rate,
model, DDP bucket cap and batch (the defaults, on the emulated cluster's 2 nodes x 2 ranks):

* ``bandwidth`` — a slow link (40 Mbit/s) under a model whose 1.5 MB of gradients take ~0.5 s
  per ring all-reduce: the byte term should dominate (C14: gradient compression);
* ``latency`` — DDP's bucket cap at 100 bytes, so every parameter tensor is its own bucket
  (43 for weather_tiny), on the fast link: each bucket pays the link's latency
  (C14: topology optimisation);
* ``compute`` — a large batch on the fast link: compute dominates the step (C14: overlap).

Which regime the advisor sees is for it to say, from the baseline's records; the names only
say what each phase is built to show.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.cluster.network import parse_rate
from hpcbench.core.config import DistributedConfig, param
from hpcbench.models import MODEL_NAMES, MODELS
from hpcbench.parallel.modes import MODES

#: The phases, in run order.
REGIME_NAMES = ("bandwidth", "latency", "compute")
#: The baseline every technique is compared with (plain DDP, flat ring), and the techniques, as the
#: advisor names them (hpcbench.advise.TECHNIQUES).
BASELINE = "baseline"
TECHNIQUES = ("quant2bit", "hierarchical", "no_sync")
#: Model kinds a phase may train: their batches come from ``synthetic_batch`` without an image size.
KINDS = ("grid", "text")
#: SLURM's own messages must get through a shaped link (hpcbench.cluster.ClusterSpec's floor).
MIN_LINK_BPS = 1e6
#: Collectives-style probe sizes a fit needs (hpcbench.scale.alpha_beta.MIN_DISTINCT_SIZES).
MIN_PROBE_SIZES = 3


@dataclass(frozen=True)
class RegimeSettings:
    """What one phase runs with."""

    name: str
    link_rate: str
    model: str
    bucket_cap_mb: float
    batch_size: int


def _rate(default: str, why: str):
    return param(default, f"inter-node link rate of the phase, tc syntax ({why}); set with "
                          f"hpcbench.cluster.reshape_links for the phase and put back after it",
                 allowed=">= 1mbit")


def _model(default: str, why: str):
    return param(default, f"model of the phase ({why})", choices=MODEL_NAMES,
                 allowed=f"a model of kind {list(KINDS)}")


def _bucket(default: float, why: str):
    return param(default, f"DDP bucket cap of the phase in MiB, for the baseline and every technique ({why})",
                 min=1e-6, max=1024)


def _batch(default: int, why: str):
    return param(default, f"samples per rank per micro-step in the phase ({why})", min=1, max=4096)


@dataclass
class AdvisorConfig(DistributedConfig):
    """Parameters of ``13_advisor``; the notebook's parameters cell mirrors them."""

    nodes: int = param(2, "nodes; the link phases need the emulated cluster (elsewhere the phases run unshaped, "
                          "recorded with why)", min=2, max=4096)
    ranks_per_node: int = param(2, "ranks per node; the two-level reduction (topology optimisation) needs >= 2",
                                min=2, max=64)
    regimes: list[str] = param(list(REGIME_NAMES), "phases in run order, each judged on its own (C14 needs all "
                                                   "three)", choices=REGIME_NAMES, allowed="non-empty, no repeats")
    # 40 Mbit/s, not 20: at either rate the baseline is almost all communication, all of it bytes, and 2-bit
    # compression the best by far, so the faster link gives the same pick and the same best technique in less time.
    bandwidth_link_rate: str = _rate("40mbit", "slow: ~0.5 s per ring all-reduce of weather_tiny's 1.5 MB")
    bandwidth_model: str = _model("weather_tiny", "1.5 MB of gradients, large for a 40 Mbit/s link")
    bandwidth_bucket_cap_mb: float = _bucket(4.0, "the guide's 4 MB buckets: one bucket, bytes dominate")
    bandwidth_batch_size: int = _batch(2, "small: little compute beside the transfer")
    latency_link_rate: str = _rate("1gbit", "the cluster's fast link")
    latency_model: str = _model("weather_tiny", "43 parameter tensors")
    latency_bucket_cap_mb: float = _bucket(0.0001, "100 bytes: DDP never splits a tensor, so every tensor is "
                                                   "its own bucket and pays the link's latency")
    latency_batch_size: int = _batch(2, "small: little compute to hide the buckets behind")
    compute_link_rate: str = _rate("1gbit", "the cluster's fast link")
    compute_model: str = _model("weather_tiny", "the same gradients as the other phases")
    compute_bucket_cap_mb: float = _bucket(25.0, "DDP's default")
    compute_batch_size: int = _batch(32, "large: compute dominates the step")
    warmup_steps: int = param(2, "untimed steps per technique; DDP rebuilds its buckets after the first",
                              min=1, max=1000)
    steps: int = param(10, "timed steps per technique, all interleaved step by step (a verdict needs >= 5)",
                       min=1, max=100000)
    layout_repeats: int = param(5, "timed repetitions of the baseline's buckets all-reduced alone (its total "
                                   "communication)", min=1, max=10000)
    probe_sizes: list[int] = param([4096, 65536, 1048576], "all_reduce sizes in bytes of the baseline's "
                                                           "collectives-style link probe (world, intra- and "
                                                           "inter-node groups), fitted by the scale model",
                                   min=64, max=1 << 30, allowed=f">= {MIN_PROBE_SIZES} distinct sizes")
    probe_iters: int = param(3, "timed all_reduces per probe size and group (median kept)", min=1, max=1000)
    lr: float = param(0.01, "SGD learning rate of every copy (the values do not matter for timing)",
                      min=1e-8, max=10.0)
    seed: int = param(0, "seed of the initial weights and the synthetic batches", min=0)

    def validate(self) -> None:
        if not self.regimes or len(set(self.regimes)) != len(self.regimes):
            raise self._error("regimes", f"{self.regimes}: allowed: distinct names of {list(REGIME_NAMES)}")
        for regime in REGIME_NAMES:
            field = f"{regime}_link_rate"
            try:
                rate = parse_rate(getattr(self, field))
            except ValueError as exc:
                raise self._error(field, str(exc)) from None
            if rate < MIN_LINK_BPS:
                raise self._error(field, f"{getattr(self, field)!r} is below 1mbit; SLURM would time out")
            model = getattr(self, f"{regime}_model")
            if MODELS.get(model).kind not in KINDS:
                raise self._error(f"{regime}_model", f"{model!r} is of kind {MODELS.get(model).kind!r}; allowed "
                                                     f"kinds: {list(KINDS)}")
        problem = MODES.get("hierarchical").layout_problem(self.nodes, self.ranks_per_node)
        if problem:
            raise self._error("ranks_per_node", f"the topology-aware technique {problem}")
        if len(set(self.probe_sizes)) < MIN_PROBE_SIZES:
            raise self._error("probe_sizes", f"{self.probe_sizes}: a fit with errors needs >= {MIN_PROBE_SIZES} "
                                             f"distinct sizes")

    def settings(self, regime: str) -> RegimeSettings:
        """The phase ``regime``'s link rate, model, bucket cap and batch."""
        if regime not in REGIME_NAMES:
            raise self._error("regimes", f"unknown regime {regime!r}; valid: {list(REGIME_NAMES)}")
        return RegimeSettings(regime, getattr(self, f"{regime}_link_rate"), getattr(self, f"{regime}_model"),
                              getattr(self, f"{regime}_bucket_cap_mb"), getattr(self, f"{regime}_batch_size"))
