"""The scale model's pure core: alpha-beta fits, byte counts, platforms, predictions, C1."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from hpcbench.core.errors import ConfigError, RegistryError
from hpcbench.parallel.compression import allreduce_bytes_sent, message_bytes
from hpcbench.scale import algorithms as alg
from hpcbench.scale.alpha_beta import fit_alpha_beta, fit_from_collectives
from hpcbench.scale.platforms import PLATFORMS, LinkModel, emulated_cluster, get_platform
from hpcbench.scale.predict import MODE_MODELS, predict_c1, predict_step, residuals, within

SIZES = [1024 * 4**k for k in range(8)]  # 1 KiB .. 16 MiB, as the collectives sweep


def _synthetic(alpha, beta, n_per_size, seed, rel_noise=0.03):
    rng = np.random.default_rng(seed)
    sizes = np.repeat(SIZES, n_per_size).astype(float)
    times = (alpha + beta * sizes) * (1 + rel_noise * rng.standard_normal(len(sizes)))
    return sizes, times


@pytest.mark.parametrize("relative", [False, True])
def test_fit_recovers_alpha_and_beta_and_its_errors_shrink_with_n(relative):
    alpha, beta = 50e-6, 1 / 1.25e9  # 50 us, 1.25 GB/s (10 Gbit/s)
    small = fit_alpha_beta(*_synthetic(alpha, beta, 2, seed=1), relative=relative)
    large = fit_alpha_beta(*_synthetic(alpha, beta, 50, seed=2), relative=relative)
    for fit in (small, large):
        assert abs(fit.beta_s_per_byte - beta) < 4 * fit.beta_err + 1e-3 * beta
        assert abs(fit.alpha_s - alpha) < 4 * fit.alpha_err + 1e-3 * alpha
        assert fit.r2 > 0.99 and fit.alpha_err > 0 and fit.beta_err > 0
    assert large.beta_err < small.beta_err and large.alpha_err < small.alpha_err
    assert large.n == 8 * 50
    assert abs(large.beta_s_per_byte - beta) / beta < 0.02


def test_a_fit_never_gives_a_negative_latency_or_cost_per_byte():
    # Small messages below a link's burst: the plain least squares' intercept is negative (-3.4 us). The fit
    # holds it at 0 and keeps a line through the origin, the best fit with both coefficients >= 0.
    sizes = np.array([1e3, 1e4, 1e5, 1e6])
    times = np.array([0.5e-6, 5e-6, 95e-6, 995e-6])
    plain = np.polyfit(sizes, times, 1)
    assert plain[1] < 0  # what it would have been
    fit = fit_alpha_beta(sizes, times)
    assert fit.alpha_s == 0.0 and fit.beta_s_per_byte == pytest.approx(np.sum(sizes * times) / np.sum(sizes**2))
    # times that fall with size: no cost per byte, the latency is their mean
    falling = fit_alpha_beta(sizes, np.array([4e-6, 3e-6, 2e-6, 1e-6]))
    assert falling.beta_s_per_byte == 0.0 and falling.alpha_s == pytest.approx(2.5e-6)
    assert falling.time(1e9) == pytest.approx(2.5e-6)  # never negative however large the message


def test_fit_divides_the_intercept_by_the_steps_and_uses_algorithm_bytes():
    n, alpha, beta = 4, 20e-6, 1e-9
    sizes = np.array(SIZES, dtype=float)
    times = alpha * 2 * (n - 1) + beta * 2 * (n - 1) / n * sizes
    fit = fit_alpha_beta(sizes, times, algorithm_bytes=lambda s: 2 * (n - 1) / n * s, steps=2 * (n - 1))
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-9)
    assert fit.steps == 6 and fit.time(1e6) == pytest.approx(alpha * 6 + beta * 1e6, rel=1e-6)


@pytest.mark.parametrize("sizes", [[1024, 2048], [1024, 1024, 2048, 2048]])
def test_fewer_than_three_sizes_are_refused_naming_the_field(sizes):
    with pytest.raises(ConfigError, match="sizes_bytes") as err:
        fit_alpha_beta(sizes, [1e-3] * len(sizes))
    assert err.value.field == "sizes_bytes"


def _collectives_records(beta_intra, beta_inter, alpha, *, nodes=2, per_node=2, iters=5):
    """Rows as the collectives worker writes them (metric time, labels op/size/group)."""
    rows = []
    world = nodes * per_node
    rng = np.random.default_rng(0)
    for group, n, beta, concurrent in (("intra_node", per_node, beta_intra, 1),
                                       ("inter_node", nodes, beta_inter, per_node)):
        for size in SIZES:
            per_unit = 2 * (n - 1) / n * size * concurrent
            t = alpha * 2 * (n - 1) + beta * per_unit
            for step in range(iters):
                labels = {"op": "all_reduce", "size_bytes": size, "group": group, "group_index": 0,
                          "group_ranks": n, "dtype": "float32"}
                rows.append({"experiment": "collectives", "metric": "time", "unit": "s", "step": step,
                             "world_size": world, "value": t * (1 + 0.01 * rng.standard_normal()),
                             "labels": json.dumps(labels)})
    return pd.DataFrame(rows)


def test_fit_from_collectives_reads_the_worker_records_per_op_and_level():
    records = _collectives_records(1 / 5e9, 1 / 1.25e8, 30e-6)
    fits = fit_from_collectives(records)
    assert set(fits) == {("all_reduce", "intra_node"), ("all_reduce", "inter_node")}
    intra, inter = fits[("all_reduce", "intra_node")], fits[("all_reduce", "inter_node")]
    assert intra.level == "intra" and inter.level == "inter"
    assert intra.beta_s_per_byte == pytest.approx(1 / 5e9, rel=0.03)
    # inter-node bytes are per node: the 2 peer groups share each node's link
    assert inter.beta_s_per_byte == pytest.approx(1 / 1.25e8, rel=0.03)
    with pytest.raises(ConfigError, match="frame"):
        fit_from_collectives(records[records["metric"] == "busbw"])


@pytest.mark.parametrize("nodes,per_node", [(1, 8), (2, 8), (4, 8), (3, 1)])
def test_ring_allreduce_sends_2_n_minus_1_over_n_s_exactly(nodes, per_node):
    s = 25 << 20
    (stage,) = alg.ring_allreduce(s, nodes=nodes, ranks_per_node=per_node)
    n = nodes * per_node
    assert stage.world_bytes == 2 * (n - 1) / n * s
    assert stage.steps == 2 * (n - 1) and stage.inter_steps == 2 * (nodes - 1)
    assert stage.inter_bytes == (2 * (n - 1) / n * s if nodes > 1 else 0.0)


@pytest.mark.parametrize("intra_via_allreduce", [False, True])
@pytest.mark.parametrize("nodes,per_node,n_elems", [(2, 8, 1 << 20), (4, 8, 1000003), (2, 2, 7)])
def test_hierarchical_inter_bytes_are_the_shard_all_reduce(nodes, per_node, n_elems, intra_via_allreduce):
    # hooks.hierarchical_allreduce_: pad to a multiple of ranks_per_node, all-reduce the shard among peers
    stages = alg.hierarchical_allreduce(n_elems, 4, nodes=nodes, ranks_per_node=per_node,
                                        intra_via_allreduce=intra_via_allreduce)
    total = -(-n_elems // per_node) * per_node * 4
    (inter,) = [s for s in stages if s.group == "inter_node"]
    assert inter.inter_bytes_per_rank == pytest.approx(total / per_node * 2 * (nodes - 1) / nodes)
    assert [s.group for s in stages] == ["intra_node", "inter_node", "intra_node"]
    one_way = (per_node - 1) / per_node * total
    expected_intra = 2 * allreduce_bytes_sent(total, per_node) if intra_via_allreduce else 2 * one_way
    assert sum(s.intra_bytes for s in stages) == pytest.approx(expected_intra)  # compression._intra_bytes


def test_two_bit_byte_formula_matches_the_code():
    # compression.compressed_allreduce: sent = (N-1) x (msg + s_msg), each message_bytes(part)
    m, n, chunk = 100_000, 8, 1024
    part = -(-(-(-m // n)) // 4) * 4
    stages = alg.quant2bit_allreduce(m, nodes=2, ranks_per_node=4, chunk_size=chunk)
    assert alg.world_bytes(stages) == 2 * (n - 1) * message_bytes(part, chunk)
    ratio = alg.world_bytes(stages) / allreduce_bytes_sent(4 * m, n)
    assert ratio == pytest.approx(1 / 16 + 1 / chunk, rel=0.02)  # the module docstring's wire_ratio
    assert alg.world_bytes(alg.half_precision_allreduce(m, nodes=2, ranks_per_node=4)) == \
        pytest.approx(0.5 * allreduce_bytes_sent(4 * m, n))


def _wire_worker(rank, world, store, out):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from hpcbench.parallel.compression import apply_compression

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(300, 7), torch.nn.LayerNorm(7), torch.nn.Linear(7, 5))
    ddp = DDP(model, bucket_cap_mb=4)
    state = apply_compression(ddp, "quant2bit")
    ddp(torch.randn(3, 300)).sum().backward()
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"compressed_bytes": state.stats.compressed_bytes, "plain_bytes": state.stats.plain_bytes,
                       "compressed_elements": state.stats.compressed_elements,
                       "plain_elements": state.stats.plain_elements, "buckets": state.stats.buckets}, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_two_bit_bytes_equal_what_wirestats_counts_on_two_gloo_ranks(tmp_path):
    import torch.multiprocessing as mp

    out = tmp_path / "stats.json"
    mp.spawn(_wire_worker, args=(2, str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    stats = json.loads(out.read_text())
    assert stats["buckets"] == 1 and stats["plain_elements"] == 14  # LayerNorm(7): weight and bias
    stages = alg.quant2bit_allreduce(stats["compressed_elements"], nodes=2, ranks_per_node=1,
                                     plain_elems=stats["plain_elements"])
    assert alg.world_bytes(stages) == pytest.approx(stats["compressed_bytes"] + stats["plain_bytes"])


def test_every_platform_figure_has_a_source():
    assert set(PLATFORMS.names()) >= {"a100_hdr", "h100_ndr", "h200_ndr"}
    for name in PLATFORMS:
        plat = PLATFORMS.get(name)
        for key in ("device", "gpus_per_node", "intra_bandwidth", "intra_latency", "nic_bandwidth",
                    "nic_latency", "nics_per_node", "mfu", "base_latency"):
            assert plat.sources.get(key), f"{name}: no source for {key}"
        assert plat.intra.source and plat.nic.source and plat.peak_flops
    a100 = get_platform("a100_hdr")
    assert a100.gpus_per_node == 8 and 1 / a100.nic.beta_s_per_byte == pytest.approx(25e9)
    assert a100.link("inter").beta_s_per_byte == pytest.approx(1 / 200e9)  # 8 NICs by default
    with pytest.raises(RegistryError, match="a100_hdr"):
        get_platform("a100")


def test_prediction_is_monotone_in_link_bandwidth_and_model_size():
    base = get_platform("a100_hdr")
    kw = dict(nodes=4, compute_s=0.5)
    by_nics = [predict_step(1e9, platform=base, nics_per_node=k, **kw).step_s for k in (1, 2, 4, 8)]
    assert by_nics == sorted(by_nics, reverse=True) and by_nics[0] > by_nics[-1]
    by_size = [predict_step(p, platform=base, **kw).step_s for p in (1e8, 1e9, 1e10)]
    assert by_size == sorted(by_size) and by_size[0] < by_size[-1]
    for mode in MODE_MODELS:
        p = predict_step(1e9, platform=base, mode=mode, **kw)
        assert p.step_s == pytest.approx(p.compute_s + p.exposed_comm_s)
        assert p.busy_share + p.comm_share == pytest.approx(1.0)
    ddp = predict_step(1e9, platform=base, **kw)
    assert predict_step(1e9, platform=base, overlap_share=1.0, **kw).busy_share == pytest.approx(1.0)
    assert predict_step(1e9, platform=base, mode="fp16", **kw).comm_s["total"] < ddp.comm_s["total"]
    # the flat 2-bit all-to-all does not aggregate inside the node: per node it sends
    # 8 x 24/32 x S/16 + the all-gather's 31/32 x S/16 ~ 0.44 S against the ring's 1.94 S
    # (same buckets, one NIC: the byte term dominates; at 4 MiB buckets and 8 NICs the latency does)
    one_nic = dict(nics_per_node=1, bucket_bytes=25 << 20, **kw)
    assert (predict_step(1e9, platform=base, mode="quant2bit", **one_nic).comm_s["inter"]
            < predict_step(1e9, platform=base, **one_nic).comm_s["inter"] / 3)
    acc = predict_step(1e9, platform=base, mode="no_sync 4", **kw)
    assert acc.inputs["micro_steps"] == 4 and acc.inputs["syncs_per_step"] == 1
    assert acc.exposed_comm_s == pytest.approx(ddp.exposed_comm_s) and acc.busy_share > ddp.busy_share


def test_prediction_on_an_emulated_cluster_from_fits():
    fits = fit_from_collectives(_collectives_records(1 / 5e9, 1 / 1.25e8, 30e-6))
    plat = emulated_cluster(fits, ranks_per_node=2)
    assert plat.nics_per_node == 1 and isinstance(plat.link("inter"), LinkModel)
    ddp = predict_step(25e6, platform=plat, nodes=2, compute_s=1.0)
    hier = predict_step(25e6, platform=plat, nodes=2, compute_s=1.0, mode="hierarchical", intra_via_allreduce=True)
    assert hier.comm_s["inter"] < ddp.comm_s["inter"]  # per node: 2(2-1)/2 S against 2(4-1)/4 S
    with pytest.raises(ConfigError, match="flops"):
        predict_step(25e6, platform=plat, nodes=2, flops=1e12)


def test_c1_sweep_finds_below_40_percent_where_the_link_is_slow_and_above_where_fast():
    frame = predict_c1()
    assert {"busy_share", "below_threshold", "nics_per_node", "grad_bytes_per_param", "tokens_per_gpu"} <= set(frame)
    slow = frame[(frame.nics_per_node == 1) & (frame.grad_bytes_per_param == 4) & (frame.tokens_per_gpu == 2048)]
    fast = frame[(frame.nics_per_node == 8) & (frame.grad_bytes_per_param == 2) & (frame.tokens_per_gpu == 8192)]
    assert slow.busy_share.iloc[0] < 0.40 and slow.below_threshold.iloc[0]
    assert fast.busy_share.iloc[0] > 0.40 and not fast.below_threshold.iloc[0]
    # more NICs, fewer gradient bytes and more tokens per step never lower the busy share
    for key in ("nics_per_node", "tokens_per_gpu"):
        others = [c for c in ("nics_per_node", "grad_bytes_per_param", "tokens_per_gpu") if c != key]
        for _, g in frame.groupby(others):
            assert g.sort_values(key).busy_share.is_monotonic_increasing


def test_residuals_and_within():
    errs = residuals({"a": 1.1, "b": 0.9}, {"a": 1.0, "b": 1.0})
    assert errs == pytest.approx({"a": 0.1, "b": -0.1})
    assert within(errs, 0.15) and not within(errs, 0.05)
    assert residuals([2.0], [1.0]) == [1.0]
    with pytest.raises(ConfigError, match="measured"):
        residuals({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ConfigError, match="measured"):
        residuals([1.0], [0.0])
    assert not within([]) and math.isclose(residuals([1.0], [1.0])[0], 0.0)


# -- overlap and hook CPU work --------------------------------------------------------------------------

def test_bucket_timeline_hides_what_the_remaining_backward_covers():
    from hpcbench.scale.predict import exposed_after_compute

    # short communication: the first bucket is done long before compute ends; only the last bucket shows
    assert exposed_after_compute([0.1, 0.0], [0.05, 0.02]) == pytest.approx(0.02)
    # long communication: only the backward after the first bucket hides anything: comm - w_0
    assert exposed_after_compute([0.1, 0.0], [0.3, 0.02]) == pytest.approx(0.32 - 0.1)
    # a bucket that waits for the previous one: 0.2 ready at -0.2, busy until -0.05; the next starts then
    assert exposed_after_compute([0.2, 0.15, 0.0], [0.15, 0.1, 0.01]) == pytest.approx(0.06)
    assert exposed_after_compute([0.0, 0.0], [0.05, 0.02]) == pytest.approx(0.07)  # no window: all exposed
    assert exposed_after_compute([], []) == 0.0
    for windows, durations in (([0.1], [0.1, 0.2]), ([-0.1, 0.0], [0.1, 0.1]), ([math.nan], [0.1])):
        with pytest.raises(ConfigError) as err:
            exposed_after_compute(windows, durations)
        assert err.value.field == "overlap_windows_s"


def test_measured_overlap_windows_lower_the_step_by_the_hidden_communication():
    fits = fit_from_collectives(_collectives_records(1 / 5e9, 1 / 1.25e8, 30e-6))
    plat = emulated_cluster(fits, ranks_per_node=2)
    elems = [262_144, 110_656]  # weather_tiny's two DDP buckets
    kw = dict(platform=plat, nodes=2, compute_s=0.05, bucket_elems=elems)
    exposed = predict_step(sum(elems), **kw)
    hidden = predict_step(sum(elems), overlap_windows_s=[0.004, 0.0], **kw)
    assert exposed.hidden_share == 0.0 and exposed.step_s == pytest.approx(0.05 + exposed.comm_s["total"])
    # the first bucket's 4 ms window hides 4 ms of it (its own communication is longer than that)
    assert hidden.comm_s["total"] == pytest.approx(exposed.comm_s["total"])
    assert hidden.exposed_comm_s == pytest.approx(exposed.comm_s["total"] - 0.004)
    assert hidden.step_s == pytest.approx(exposed.step_s - 0.004)
    assert hidden.hidden_share == pytest.approx(0.004 / exposed.comm_s["total"])
    assert hidden.inputs["overlap_windows_s"] == [0.004, 0.0]
    # the hidden share is read against the bucket timeline the windows overlap (each bucket paying its own
    # per-call latency), so it lies in [0, 1] whatever the windows: nothing hidden is 0, never negative
    small = [4_096] * 16
    for mode in ("ddp", "quant2bit", "hierarchical"):
        for windows in ([0.0] * 16, [0.001 * i for i in range(16, 0, -1)]):
            p = predict_step(sum(small), platform=plat, nodes=2, compute_s=0.05, bucket_elems=small, mode=mode,
                             overlap_windows_s=windows)
            assert p.exposed_comm_s <= p.timeline_comm_s + 1e-12 and 0.0 <= p.hidden_share <= 1.0
            if not any(windows):
                assert p.hidden_share == pytest.approx(0.0, abs=1e-12)
    # a window longer than the whole communication leaves only the last bucket's
    last = predict_step(elems[1], platform=plat, nodes=2, compute_s=1.0).comm_s["total"]
    assert predict_step(sum(elems), overlap_windows_s=[10.0, 0.0], **kw).exposed_comm_s == pytest.approx(last)
    for bad in (dict(overlap_windows_s=[0.1, 0.0], overlap_share=0.5), dict(overlap_windows_s=[0.1])):
        with pytest.raises(ConfigError) as err:
            predict_step(sum(elems), **{**kw, **bad})
        assert err.value.field == "overlap_windows_s"
    with pytest.raises(ConfigError, match="bucket_elems"):
        predict_step(sum(elems), platform=plat, nodes=2, compute_s=0.05, overlap_windows_s=[0.1, 0.0])


def test_hook_cpu_work_is_charged_on_the_critical_path_once_per_micro_step():
    base = dict(platform="a100_hdr", nodes=4, compute_s=0.5, mode="quant2bit")
    plain = predict_step(1e9, **base)
    hooked = predict_step(1e9, hook_cpu_s=0.03, **base)
    assert hooked.step_s == pytest.approx(plain.step_s + 0.03) and hooked.hook_cpu_s == pytest.approx(0.03)
    assert hooked.exposed_comm_s == pytest.approx(plain.exposed_comm_s) and hooked.busy_share < plain.busy_share
    assert predict_step(1e9, hook_cpu_s=0.03, micro_steps=4, **base).step_s == \
        pytest.approx(predict_step(1e9, micro_steps=4, **base).step_s + 4 * 0.03)
    for bad in (-0.01, math.inf):
        with pytest.raises(ConfigError) as err:
            predict_step(1e9, hook_cpu_s=bad, **base)
        assert err.value.field == "hook_cpu_s"


def test_ready_times_give_each_buckets_window_before_the_last_one():
    from hpcbench.experiments.scale_model.worker import ReadyTimes

    ready = ReadyTimes()
    ready[0] = 4
    assert [i for i, _ in ready.calls] == [0]  # the no-op hook's store notes when it was called
    dict.update(ready, {1: 4, 2: 4})  # three buckets in the final layout
    # a first step before DDP's rebuild with another layout (ignored: incomplete), then three steps
    ready.calls = [(0, 0.0), (0, 1.0), (1, 1.3), (2, 1.5), (0, 2.0), (1, 2.1), (2, 2.6), (0, 3.0), (1, 3.2), (2, 3.4)]
    assert ready.windows(last_steps=10) == pytest.approx([0.5, 0.2, 0.0])  # medians of (.5, .6, .4), (.2, .5, .2)
    assert ready.windows(last_steps=1) == pytest.approx([0.4, 0.2, 0.0])
    assert ReadyTimes().windows(3) == []


def test_local_collectives_stand_in_for_the_hooks_collectives_and_are_undone():
    import torch

    from hpcbench.experiments.scale_model.config import RUN_MODES
    from hpcbench.experiments.scale_model.worker import local_collectives
    from hpcbench.parallel import compression, hooks

    assert [RUN_MODES.get(m).python_hook for m in ("ddp", "hierarchical", "quant2bit", "quant2bit_hierarchical")] \
        == [False, True, True, True]  # plain DDP all-reduces in C++: no hook work of its own
    before = (hooks._dist, compression._dist)
    with local_collectives():
        dist = hooks._dist()
        assert compression._dist() is dist and dist is not torch.distributed
        msg = torch.arange(8, dtype=torch.uint8).reshape(2, 4)
        received = torch.empty_like(msg)
        assert dist.all_to_all_single(received, msg).wait() and torch.equal(received, msg)
        gathered = torch.empty(12)
        hooks.all_gather_async(gathered, torch.tensor([1.0, 2.0, 3.0]), None).wait()
        assert gathered.tolist() == [1.0, 2.0, 3.0] * 4
        shard = torch.empty(2)
        hooks.reduce_scatter_async(shard, torch.arange(4.0), None).wait()
        assert shard.tolist() == [0.0, 1.0]
        x = torch.ones(3)
        dist.all_reduce(x, async_op=True).wait()
        assert x.tolist() == [1.0, 1.0, 1.0]  # nothing summed: no traffic
    assert (hooks._dist, compression._dist) == before
