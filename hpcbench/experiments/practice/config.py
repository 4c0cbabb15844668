"""Parameters of the ``practice`` experiment (``notebooks/12_practice.ipynb``)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.core.config import param
from hpcbench.fault.phases import NO_FAULT, FaultPhasesConfig, phases_param, weather_model_param

#: The baseline (:data:`NO_FAULT`: no fault; the gate must pass it, else it raises a false alarm) and every
#: fault this project can really make, in run order (see ``faults.FAULT_KINDS``: what each does and which
#: common problem it stands for). The project's list, not a census of common problems.
FAULTS = (NO_FAULT, "slow_link", "lossy_link", "slow_storage", "cpu_contention", "unbound_threads", "slow_node",
          "link_flap")


@dataclass
class PracticeConfig(FaultPhasesConfig):
    """Parameters of ``12_practice``; the notebook's parameters cell mirrors them."""

    baseline_role = "the baseline the gate must pass"

    faults: list[str] = phases_param(FAULTS, baseline_role)
    model: str = weather_model_param("1.5 MB of gradients: ~12 ms of all-reduce at 1 Gbit/s")
    batch_size: int = param(16, "forecasting pairs per step per rank: one block read of batch_size + 1 time steps "
                                "(~1.1 MB for weather_tiny). 16, not monitoring's 4: a step of a few tens of ms on "
                                "CPUs shows the OS's scheduling noise as a step-time spread the gate's 5 % would "
                                "flag on a healthy run", min=1, max=256)
    phase_s: float = param(8.0, "seconds of training per fault phase (at least min_steps steps whatever it takes)",
                           min=0.5, max=3600.0)
    min_steps: int = param(10, "timed steps per phase at least: the gate's spread needs several, the verdict "
                               ">= 10", min=2, max=100000)
    warmup_steps: int = param(2, "untimed steps per phase after the fault is on", min=0, max=1000)
    calibration_s: float = param(4.0, "seconds of healthy training before the phases whose step-time spread is C12's "
                                      "regime fact (regime.healthy_step_cv; at least min_steps steps): steps of "
                                      "their own, so the judged baseline is not its own yardstick", min=0.5,
                                 max=3600.0)
    slow_link_rate: str = param("50mbit", "tbf rate of the faulty node's link in slow_link and lossy_link (the "
                                          "cluster's links run at 1gbit): ~0.25 s per all-reduce of weather_tiny",
                                allowed="a tc rate, e.g. 50mbit")
    lossy_queue_bytes: int = param(32000, "tbf queue of lossy_link, bytes: bursts beyond it are dropped, so TCP "
                                          "retransmits (~4 % of segments at 50mbit, measured by monitoring)",
                                   min=1600, max=1 << 26)
    storage_read_bps: int = param(4_000_000, "blkio read throttle of slow_storage, bytes/s, on the faulty node's "
                                             "ranks: a 1.1 MB block read then takes ~0.3 s", min=4096)
    storage_read_iops: int = param(50, "blkio read requests/s of slow_storage", min=1)
    contention_per_cpu: int = param(2, "busy processes per CPU of the faulty node's ranks in cpu_contention (2 "
                                       "leave a rank a third of its CPU)", min=1, max=64)
    thread_factor: int = param(2, "unbound_threads: the faulty node's ranks run this many torch threads per CPU "
                                  "they may use, unbound, next to a neighbour process with as many threads on the "
                                  "same CPUs", min=2, max=16)
    node_cpu_share: float = param(0.4, "slow_node: CPU time per wall second for each of the faulty node's ranks "
                                       "(a cgroup CFS quota; 0.4: the node computes at 40 % speed)",
                                  min=0.05, max=0.95)
    flap_down_s: float = param(1.0, "link_flap: seconds the faulty node's link stays down per flap (TCP resends "
                                    "after its retransmission timeout, >= 0.2 s, doubling)", min=0.05, max=30.0,
                                allowed="shorter than flap_period_s")
    flap_period_s: float = param(4.0, "link_flap: seconds from one flap's start to the next; the first comes half a "
                                      "period after the fault is applied", min=0.5, max=600.0)
    seed: int = param(0, "seed of the weights, the data set and its shuffle", min=0)

    def validate(self) -> None:
        super().validate()
        if self.flap_down_s >= self.flap_period_s:
            raise self._error("flap_down_s", f"{self.flap_down_s:g} s is not shorter than flap_period_s "
                                             f"({self.flap_period_s:g} s): the link would never come back")
