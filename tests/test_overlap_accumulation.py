"""Overlap through no_sync() accumulation (C9): the arithmetic, then on 2 gloo ranks the invariants
(bit-identical parameters after every synchronisation, k micro-steps of b = one step of k*b,
k times fewer synchronisations) and the exposed / total communication measurement.

The model is the CPU-sized weather ViT: LayerNorm only, no BatchNorm, so a micro-batch's
gradient does not depend on the other samples of its batch and the k*b equivalence is exact
up to summation order."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hpcbench.core.errors import ConfigError
from hpcbench.parallel.overlap import (OverlapConfig, exposed_communication, overlapped_share, summarize_overlap,
                                       syncs_per_step)

K, MICRO_BATCH, WORLD = 4, 2, 2
#: accumulated vs one big step: same sums in another order (fp32)
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-7


# -- arithmetic ---------------------------------------------------------------------------------

@pytest.mark.parametrize("values, field", [
    ({"micro_steps": 0}, "micro_steps"), ({"steps": 0}, "steps"), ({"warmup_steps": -1}, "warmup_steps"),
    ({"layout_repeats": 0}, "layout_repeats"), ({"micro_steps": 2.5}, "micro_steps"),
    ({"no_sync": "yes"}, "no_sync"),
])
def test_bad_config_names_the_field(values, field):
    with pytest.raises(ConfigError) as exc:
        OverlapConfig(**values)
    assert exc.value.field == field and field in str(exc.value)


def test_defaults_are_the_guides_four_micro_steps():
    cfg = OverlapConfig()
    assert cfg.micro_steps == 4 and cfg.no_sync
    assert syncs_per_step(4, True) == 1 and syncs_per_step(4, False) == 4
    with pytest.raises(ConfigError, match="micro_steps"):
        syncs_per_step(0, True)


def test_exposed_and_overlapped_share():
    assert exposed_communication(0.130, 0.100) == pytest.approx(0.030)
    assert overlapped_share(0.030, 0.120) == pytest.approx(0.75)
    assert overlapped_share(0.120, 0.120) == 0.0  # nothing hidden
    assert overlapped_share(0.0, 0.120) == 1.0  # all hidden
    # noise is reported as measured, not clipped
    assert overlapped_share(exposed_communication(0.099, 0.100), 0.1) == pytest.approx(1.01)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError) as exc:
            overlapped_share(0.01, bad)
        assert exc.value.field == "total_s"


def test_summary_uses_medians_and_syncs_per_step():
    s = summarize_overlap([0.20, 0.13, 0.12], [0.10, 0.11, 0.50], [0.01, 0.02, 0.03, 0.04], syncs=4)
    assert (s.step_s, s.noop_step_s, s.sync_alone_s) == (0.13, 0.11, 0.025)
    assert s.total_s == pytest.approx(0.1) and s.exposed_s == pytest.approx(0.02)
    assert s.overlapped_share == pytest.approx(0.8)
    with pytest.raises(ConfigError, match="sync_alone_times"):
        summarize_overlap([0.1], [0.1], [], syncs=1)


# -- 2 gloo ranks ---------------------------------------------------------------------------------

def _rank_entry(rank: int, tmp: str) -> None:
    """One rank: runs every distributed check and writes its findings to ``tmp/rank<r>.json``."""
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hpcbench.models import MODELS
    from hpcbench.parallel.hooks import BucketLog, noop_hook
    from hpcbench.parallel.overlap import (SyncCounter, accumulation_step, counting_allreduce_hook,
                                           measure_overlap, parameter_checksum, ranks_agree)

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=WORLD)
    out: dict = {}
    spec = MODELS.get("weather_tiny")
    torch.manual_seed(0)  # the same initial weights on both ranks
    base = spec.build()
    param_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
    # each rank its own data, as in data parallelism
    x, y = spec.synthetic_batch(K * MICRO_BATCH, device="cpu", seed=100 + rank)
    micro = [(x[i * MICRO_BATCH:(i + 1) * MICRO_BATCH], y[i * MICRO_BATCH:(i + 1) * MICRO_BATCH]) for i in range(K)]

    # k micro-steps of b under no_sync == one synchronised step of k*b
    counter = SyncCounter(world_size=WORLD)
    acc = DDP(copy.deepcopy(base))
    acc.register_comm_hook(counter, counting_allreduce_hook)
    accumulation_step(acc, micro, spec.loss)
    big = DDP(copy.deepcopy(base))
    spec.loss(big(x), y).backward()
    local = copy.deepcopy(base)  # this rank's data only, never synchronised
    accumulation_step(local, micro, spec.loss)
    pairs = list(zip(acc.parameters(), big.parameters(), local.parameters()))
    out["grad_max_abs_diff"] = max(float((a.grad - b.grad).abs().max()) for a, b, _ in pairs)
    out["grad_close"] = all(torch.allclose(a.grad, b.grad, rtol=GRAD_RTOL, atol=GRAD_ATOL) for a, b, _ in pairs)
    out["grad_differs_from_local"] = max(float((a.grad - c.grad).abs().max()) for a, _, c in pairs)
    out["grad_scale"] = max(float(b.grad.abs().max()) for _, b, _ in pairs)

    # synchronisations: k times fewer with no_sync (after DDP's bucket rebuild on the first step)
    opt = torch.optim.SGD(acc.parameters(), lr=1e-2)
    opt.zero_grad(set_to_none=True)
    accumulation_step(acc, micro, spec.loss, opt)
    counts = {}
    for no_sync in (True, False):
        counter.reset()
        for _ in range(2):
            accumulation_step(acc, micro, spec.loss, opt, no_sync=no_sync)
        counts[str(no_sync)] = (counter.buckets_reduced, counter.bytes_reduced)
    out["counts"], out["param_bytes"] = counts, param_bytes

    # after each synchronisation every rank holds the same parameters, and they did change
    agree, sums = [], []
    for _ in range(3):
        accumulation_step(acc, micro, spec.loss, opt)
        agree.append(ranks_agree(acc))
        sums.append(parameter_checksum(acc))
    out["agree_after_sync"], out["checksums"] = agree, sums
    # the check can fail: stepping on local gradients (never synchronised) splits the ranks
    split = DDP(copy.deepcopy(base))
    split_opt = torch.optim.SGD(split.parameters(), lr=1e-2)
    with split.no_sync():
        for mx, my in micro:
            (spec.loss(split(mx), my) / K).backward()
    split_opt.step()
    out["agree_without_sync"] = ranks_agree(split)
    out["checksum_plain_equals_ddp"] = parameter_checksum(split) == parameter_checksum(split.module)

    # exposed vs total communication, with and without no_sync
    for no_sync in (True, False):
        cfg = OverlapConfig(micro_steps=K, no_sync=no_sync, steps=3, warmup_steps=1, layout_repeats=3)
        log = BucketLog()
        noop = DDP(copy.deepcopy(base))
        noop.register_comm_hook(log, noop_hook)
        m = measure_overlap(DDP(copy.deepcopy(base)), noop, log, micro, spec.loss, cfg)
        out[f"overlap_{no_sync}"] = {"step_times": m.step_times, "noop_step_times": m.noop_step_times,
                                     "sync_alone_times": m.sync_alone_times, "layout_bytes": m.layout_bytes,
                                     "summary": vars(m.summary)}
    dist.barrier()
    dist.destroy_process_group()
    Path(tmp, f"rank{rank}.json").write_text(json.dumps(out))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("overlap")
    mp.spawn(_rank_entry, args=(str(tmp),), nprocs=WORLD, join=True)
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]


def test_accumulated_gradients_equal_one_big_step(ranks):
    for r in ranks:
        assert r["grad_close"], r["grad_max_abs_diff"]
        assert r["grad_max_abs_diff"] < 1e-4 * r["grad_scale"]
        # and they are the synchronised ones: this rank's data alone gives other gradients
        assert r["grad_differs_from_local"] > 100 * r["grad_max_abs_diff"]


def test_no_sync_cuts_synchronisations_k_fold(ranks):
    for r in ranks:
        (calls_acc, bytes_acc), (calls_every, bytes_every) = r["counts"]["True"], r["counts"]["False"]
        assert bytes_acc == 2 * r["param_bytes"]  # 2 steps, every gradient once per step
        assert bytes_every == K * bytes_acc
        assert calls_acc > 0 and calls_every == K * calls_acc


def test_ranks_hold_identical_parameters_after_every_sync(ranks):
    for r in ranks:
        assert r["agree_after_sync"] == [True, True, True]
        assert len(set(r["checksums"])) == 3  # each step changed the parameters
        assert r["agree_without_sync"] is False
        assert r["checksum_plain_equals_ddp"]
    assert ranks[0]["checksums"] == ranks[1]["checksums"]


def test_overlap_measurement_is_a_number(ranks):
    for r in ranks:
        for no_sync, syncs in (("True", 1), ("False", K)):
            m = r[f"overlap_{no_sync}"]
            s = m["summary"]
            # the no-op hook saw every gradient byte once: the layout is DDP's buckets
            assert sum(m["layout_bytes"]) == r["param_bytes"]
            assert len(m["step_times"]) == len(m["noop_step_times"]) == 3 and len(m["sync_alone_times"]) == 3
            assert s["syncs_per_step"] == syncs
            again = summarize_overlap(m["step_times"], m["noop_step_times"], m["sync_alone_times"], syncs)
            assert vars(again) == s
            assert s["total_s"] > 0 and math.isfinite(s["overlapped_share"])
    # every rank reports the slowest rank's times, so the figures agree across ranks
    assert ranks[0]["overlap_True"]["summary"] == ranks[1]["overlap_True"]["summary"]
