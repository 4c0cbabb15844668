"""The training experiments' estimates through the one helper (hpcbench.experiments.training_estimate).

The figures below are what each experiment's own estimate gave for its default config before the
four shared the helper: the refactor moved arithmetic, it changed no number. When the footprint
model (hpcbench.models.footprint) changes on purpose, update them from the new output.
"""

import pytest

from hpcbench.core.config import DistributedConfig
from hpcbench.experiments import EXPERIMENTS, RANK_BYTES, TASK_STARTUP_S
from hpcbench.experiments.training_estimate import Training, training_estimate

#: experiment -> (memory_per_rank, ranks, seconds, device_memory_per_rank) of its default config
BEFORE = {
    "gradient_compression": (481257216, 4, 45.227404768, 0),
    "overlap": (512774912, 2, 61.04951523199999, 0),
    "comm_modes": (684519881, 4, 47.63516196365715, 0),
    "advisor": (590090240, 4, 195.49434982399998, 0),
}
#: Defaults changed since the figures were taken: the config they were taken at.
THEN = {"advisor": {"bandwidth_link_rate": "20mbit"}}  # 40 Mbit/s since dc5cdac


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_default_estimates_are_the_numbers_before_the_helper(name):
    spec = EXPERIMENTS.get(name)
    est = spec.estimate(spec.config.from_dict(THEN.get(name, {})))
    memory, ranks, seconds, device = BEFORE[name]
    assert (est.memory_per_rank, est.ranks, est.device_memory_per_rank) == (memory, ranks, device)
    # the helper sums a model's steps before adding them: the same figure but for the last bits
    assert est.seconds == pytest.approx(seconds, rel=1e-12)
    assert "per rank in host memory" in est.basis


def test_the_advisors_faster_slow_link_shortens_its_estimate_only():
    spec = EXPERIMENTS.get("advisor")
    now, then = spec.estimate(spec.config()), spec.estimate(spec.config.from_dict(THEN["advisor"]))
    assert now.memory_per_rank == then.memory_per_rank and now.seconds < then.seconds


def test_comm_modes_on_nccl_counts_the_gpu_not_the_host():
    spec = EXPERIMENTS.get("comm_modes")
    est = spec.estimate(spec.config.from_dict({"backend": "nccl"}))
    assert (est.memory_per_rank, est.device_memory_per_rank) == (RANK_BYTES, 281866697)
    assert est.seconds == pytest.approx(29.40007377462766, rel=1e-12) and "on the GPU" in est.basis


def test_a_model_without_footprint_leaves_the_time_unknown_and_says_so(monkeypatch):
    import hpcbench.experiments.training_estimate as te

    monkeypatch.setattr(te, "training_memory", lambda name, **kw: None if name == "mystery" else 1 << 20)
    monkeypatch.setattr(te, "training_step_seconds", lambda name, **kw: 0.5)
    cfg = DistributedConfig(nodes=1, ranks_per_node=2, backend="gloo")
    known = [Training("gpt2_tiny", 2, 3, steps=10, extra_seconds=1.0)]
    est = training_estimate(cfg, known, "3 copies", "; a note")
    assert est.seconds == pytest.approx(TASK_STARTUP_S + 10 * 0.5 + 1.0) and est.ranks == 2
    assert est.memory_per_rank == RANK_BYTES + (1 << 20) and est.basis.endswith("per task; a note")
    est = training_estimate(cfg, known + [Training("mystery", 2, 3, steps=10)], "3 copies")
    assert est.seconds is None and "no footprint for mystery: not counted" in est.basis
