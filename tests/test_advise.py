"""The advisor (hpcbench.advise, C14) on synthetic records written with the real RecordWriter, and
`hpcbench advise RUN_DIR` on a run folder made of them: the three regimes, the thresholds as data, the link
fitted from probe rows or inferred from the shaped rate, and the errors that name what is missing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hpcbench.advise import AdviceError, Thresholds, advise, find_series
from hpcbench.cli import main
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.report.advice import advise_run
from hpcbench.scale.algorithms import collective_cost
from hpcbench.system.facts import write_facts

LAYOUT_BIG = [1 << 20, 1 << 19]          # 1.5 MiB in two buckets
LAYOUT_TINY = [2048] * 40                 # 80 KiB in 40 buckets
SERIES = {"regime": "x", "technique": "baseline"}


def noisy(center, n=10, spread=0.01, seed=0):
    return list(center * (1 + spread * np.random.default_rng(seed).standard_normal(n)))


def records(path, *, step, compute, alone, layout, rate=None, probe=None, nodes=2, ranks_per_node=2,
            labels=SERIES, extra=()):
    """One launch's records: the series' step with and without communication, one synchronisation alone, the
    bucket layout; a shaped link rate (``rate``) and/or collectives-style probe rows from ``probe`` =
    (alpha, beta) of a ring all-reduce on the world group (per rank bytes 2(N-1)/N S, 2(N-1) steps)."""
    ctx = RecordContext(run_id="r", experiment="advisor", task_id="t", params={"nodes": nodes,
                                                                             "ranks_per_node": ranks_per_node},
                        world_size=nodes * ranks_per_node)
    with RecordWriter(path, ctx) as w:
        write_facts(w, {"cluster": "emulated cluster, shaped link", "infiniband": "absent", "gpus": 0.0})
        w.add("backend", None, "", text="gloo")
        for i, v in enumerate(noisy(step, seed=1)):
            w.add("step_time", v, "s", step=i, labels={**labels, "comm": "mode"})
        for i, v in enumerate(noisy(compute, seed=2)):
            w.add("step_time", v, "s", step=i, labels={**labels, "comm": "noop"})
        if alone is not None:
            for i, v in enumerate(noisy(alone, 5, seed=3)):
                w.add("sync_alone_time", v, "s", step=i, labels=labels)
        if layout is not None:
            w.add("bucket_count", len(layout), "", labels=labels,
                  text="bucket bytes in reduction order: " + ",".join(map(str, layout)))
        if rate is not None:
            w.add("link_rate_bps", rate, "bit/s", labels={"regime": labels.get("regime")})
        if probe is not None:
            alpha, beta = probe
            n = nodes * ranks_per_node
            for group, ranks, per_node in (("world", n, 1), ("intra_node", ranks_per_node, 1),
                                           ("inter_node", nodes, ranks_per_node)):
                for size in (4096, 65536, 1 << 20):
                    cost = collective_cost("all_reduce", size, nodes=1, ranks_per_node=ranks)
                    t = alpha * cost.steps + beta * cost.world_bytes * per_node
                    for i, v in enumerate(noisy(t, 3, seed=size)):
                        w.add("time", v, "s", step=i, labels={**labels, "op": "all_reduce", "size_bytes": size,
                                                              "group": group, "group_ranks": ranks})
        for metric, value, unit, lab in extra:
            w.add(metric, value, unit, labels=lab)
    return read_records(path)


def bandwidth_bound(path, **kw):
    """A 20 Mbit/s link under 1.5 MiB of gradients: ~0.94 s of bytes per synchronisation, little compute."""
    return records(path, step=1.0, compute=0.05, alone=1.0, layout=LAYOUT_BIG, rate=20e6, **kw)


def latency_sensitive(path, **kw):
    """40 buckets of 2 KiB on a 1 Gbit/s link: 1 ms of bytes, 40 ms of per-bucket latency."""
    return records(path, step=0.06, compute=0.025, alone=0.04, layout=LAYOUT_TINY, rate=1e9, **kw)


def compute_heavy(path, **kw):
    """One second of compute, 20 ms of communication."""
    return records(path, step=1.01, compute=1.0, alone=0.02, layout=[1_500_000], rate=1e9, **kw)


@pytest.mark.parametrize("make, regime, pick", [(bandwidth_bound, "bandwidth_bound", "quant2bit"),
                                                (latency_sensitive, "latency_sensitive", "hierarchical"),
                                                (compute_heavy, "neither", "no_sync")])
def test_each_regime_gets_c14s_technique(tmp_path, make, regime, pick):
    a = advise(make(tmp_path / "r.parquet"))
    assert (a.regime, a.pick, a.link) == (regime, pick, "inferred")
    figures = {f.name: f for f in a.figures}
    assert figures["buckets"].value == len({"quant2bit": LAYOUT_BIG, "hierarchical": LAYOUT_TINY}.get(pick, [1]))
    assert figures["byte share"].value + figures["latency share"].value == pytest.approx(1.0)
    # every figure says where it came from, and the reason quotes the thresholds it was held against
    assert all(f.source for f in a.figures) and "15%" in a.reason
    assert {o.technique for o in a.options} == {"quant2bit", "hierarchical", "no_sync"}
    assert all(o.predicted_gain > 0 for o in a.options)


def test_bandwidth_bound_predictions_follow_the_bytes(tmp_path):
    a = advise(bandwidth_bound(tmp_path / "r.parquet"))
    gains = {o.technique: o.predicted_gain for o in a.options}
    # 2-bit codes cut the bytes ~10x, accumulation syncs 4x less often, the two-level hook a third of the bytes
    assert gains["quant2bit"] > gains["no_sync"] > gains["hierarchical"] > 1.0
    byte = next(f for f in a.figures if f.name == "byte term (beta x bytes)").value
    # 1.5 MiB, ring over 4 ranks: each node sends 2 (3/4) 1.5 MiB at 2.5 MB/s
    assert byte == pytest.approx(1.5 * 1.5 * (1 << 20) / 2.5e6, rel=1e-6)


def test_the_link_is_fitted_from_probe_rows_when_the_run_has_them(tmp_path):
    # no link rate at all: the probe alone separates the terms (alpha 2 ms per step: tiny buckets pay it)
    df = records(tmp_path / "r.parquet", step=0.6, compute=0.1, alone=0.5, layout=LAYOUT_TINY, probe=(2e-3, 1e-9))
    a = advise(df)
    assert a.link == "fitted" and a.regime == "latency_sensitive"
    alpha = next(f for f in a.figures if f.name.startswith("alpha"))
    assert alpha.value == pytest.approx(2e-3, rel=0.05) and "fitted" in alpha.source
    # the same records with a byte-heavy probe: bandwidth-bound, whatever the bucket count
    df = records(tmp_path / "s.parquet", step=0.6, compute=0.1, alone=0.5, layout=LAYOUT_TINY, probe=(1e-7, 1e-5))
    assert advise(df).regime == "bandwidth_bound"


def test_thresholds_are_data(tmp_path):
    df = bandwidth_bound(tmp_path / "r.parquet")
    assert advise(df, thresholds=Thresholds(min_comm_share=0.99)).regime == "neither"
    assert advise(df, thresholds=Thresholds(dominant_share=0.999)).regime == "neither"
    with pytest.raises(ConfigError, match="Thresholds.dominant_share"):
        Thresholds(dominant_share=0.3)
    with pytest.raises(ConfigError, match="Thresholds.min_comm_share"):
        Thresholds(min_comm_share=1.5)


def test_neither_term_dominating_falls_through_to_overlap(tmp_path):
    # 80 KiB in 40 buckets at 20 Mbit/s: 49 ms of bytes; alone 100 ms: ~51 ms of latency
    df = records(tmp_path / "r.parquet", step=0.12, compute=0.03, alone=0.1, layout=LAYOUT_TINY, rate=20e6)
    a = advise(df)
    assert a.regime == "neither" and a.pick == "no_sync" and "neither term reaches 60%" in a.reason


def test_the_two_level_reduction_needs_two_ranks_per_node(tmp_path):
    a = advise(bandwidth_bound(tmp_path / "r.parquet", ranks_per_node=1, nodes=2))
    assert "2 ranks per node" in a.option("hierarchical").not_applicable
    assert a.option("quant2bit").not_applicable is None


def test_errors_name_what_is_missing(tmp_path):
    no_noop = bandwidth_bound(tmp_path / "a.parquet")
    no_noop = no_noop[~no_noop["labels"].str.contains('"noop"')]
    with pytest.raises(AdviceError, match="comm=noop") as exc:
        advise(no_noop, where="task X")
    assert "task X" in str(exc.value)
    no_link = records(tmp_path / "b.parquet", step=1.0, compute=0.05, alone=1.0, layout=LAYOUT_BIG)
    with pytest.raises(AdviceError, match="link_rate_bps") as exc:
        advise(no_link)
    assert "regime=x" in str(exc.value)
    no_layout = records(tmp_path / "c.parquet", step=1.0, compute=0.05, alone=1.0, layout=None, rate=1e9)
    with pytest.raises(AdviceError, match="bucket_count"):
        advise(no_layout)
    two = pd.concat([bandwidth_bound(tmp_path / "d.parquet"),
                     latency_sensitive(tmp_path / "e.parquet", labels={"regime": "y", "technique": "baseline"})])
    assert len(find_series(two)) == 2
    with pytest.raises(AdviceError, match="2 series"):
        advise(two)
    assert advise(two, series={"regime": "y"}).regime == "latency_sensitive"


def _run_dir(tmp_path, frames: dict):
    """A run folder as `hpcbench run` leaves it, each task's records written by the real writer."""
    from hpcbench.run.rundir import TaskStatus, prepare_run_dir, task_dir, write_status
    from hpcbench.run.suite import parse_suite

    run_dir = tmp_path / "run"
    suite = parse_suite({"name": "s", "tasks": [{"experiment": "advisor"}]})
    prepare_run_dir(run_dir, suite, "local")
    for task_id, make in frames.items():
        folder = task_dir(run_dir, task_id) / "records"
        folder.mkdir(parents=True)
        if make is not None:
            make(folder / "advisor-rank0.parquet")
        write_status(run_dir, TaskStatus(task_id, "advisor", "default", 0, {}, state="done"))
    return run_dir


def test_cli_prints_the_advice_and_its_json(tmp_path, capsys):
    run_dir = _run_dir(tmp_path, {"advisor.a": bandwidth_bound, "advisor.b": None})
    assert main(["advise", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "regime: bandwidth-bound -> gradient compression (quant2bit)" in out
    assert "->quant2bit" in out and "byte share" in out and "advisor.a (task done)" in out
    assert main(["advise", str(run_dir), "--json", "--task", "advisor.a"]) == 0
    (advice,) = json.loads(capsys.readouterr().out)
    assert advice["pick"] == "quant2bit" and advice["regime"] == "bandwidth_bound"
    assert {o["technique"] for o in advice["options"]} == {"quant2bit", "hierarchical", "no_sync"}
    assert advise_run(run_dir)[0].series == SERIES


def test_cli_errors_name_the_folder(tmp_path, capsys):
    assert main(["advise", str(tmp_path / "nowhere")]) == 2
    assert "nowhere does not exist" in capsys.readouterr().err
    run_dir = _run_dir(tmp_path, {"advisor.empty": None})
    assert main(["advise", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "nothing the advisor can use" in err and "advisor.empty" in err and "no records" in err
    assert main(["advise", str(run_dir), "--task", "other"]) == 2
    assert "no task 'other'" in capsys.readouterr().err


def _collectives_rows(path, *, nodes, ranks_per_node, alpha, beta, experiment="collectives", variant="two_nodes",
                      repetition=0):
    """What a collectives task of the same run writes: 'time' rows per op, size and group, no series of its own."""
    ctx = RecordContext(run_id="r", experiment=experiment, variant=variant, repetition=repetition,
                        task_id=f"{experiment}.{variant}.r{repetition}",
                        params={"nodes": nodes, "ranks_per_node": ranks_per_node}, world_size=nodes * ranks_per_node)
    with RecordWriter(path, ctx) as w:
        w.add("backend", None, "", text="gloo")
        n = nodes * ranks_per_node
        groups = [("world", n, 1), ("intra_node", ranks_per_node, 1)]
        if nodes > 1:
            groups.append(("inter_node", nodes, ranks_per_node))
        for group, ranks, per_node in groups:
            for size in (1024, 16384, 262144, 1 << 20):
                cost = collective_cost("all_reduce", size, nodes=1, ranks_per_node=ranks)
                t = alpha * cost.steps + beta * cost.world_bytes * per_node
                for i, v in enumerate(noisy(t, 3, seed=size)):
                    w.add("time", v, "s", step=i, labels={"op": "all_reduce", "size_bytes": size, "group": group,
                                                          "group_ranks": ranks, "dtype": "float32"})


def _demo_like_run(tmp_path, *, collectives: dict):
    """A run like the demo's: training series with neither probe rows nor a link rate, beside collectives tasks."""
    no_link = {f"comm_modes.m{i}.r0": (lambda p, i=i: records(p, step=0.6, compute=0.1, alone=0.5,
                                                               layout=LAYOUT_TINY,
                                                               labels={"mode": "ddp", "bucket": i}))
               for i in range(2)}
    return _run_dir(tmp_path, {**no_link, **collectives, "environment.default.r0": None})


def test_a_series_without_a_link_of_its_own_uses_the_runs_collectives_on_its_layout(tmp_path, capsys):
    def probe(nodes, ranks_per_node, alpha):
        return lambda p: _collectives_rows(p, nodes=nodes, ranks_per_node=ranks_per_node, alpha=alpha, beta=1e-9,
                                           variant=f"n{nodes}x{ranks_per_node}")
    run_dir = _demo_like_run(tmp_path, collectives={"collectives.n1x2.r0": probe(1, 2, 9e-3),
                                                    "collectives.n2x2.r0": probe(2, 2, 2e-3)})
    advices = advise_run(run_dir)
    assert len(advices) == 2 and {a.link for a in advices} == {"fitted"}
    for a in advices:
        alpha = next(f for f in a.figures if f.name.startswith("alpha"))
        # the 2 x 2 task's alpha, not the one-node task's: the layout must match
        assert alpha.value == pytest.approx(2e-3, rel=0.05)
        assert "from the run's collectives.n2x2 (2 x 2 gloo; task collectives.n2x2.r0)" in alpha.source
        assert a.regime == "latency_sensitive"
    assert main(["advise", str(run_dir)]) == 0
    out = capsys.readouterr().out
    # what was skipped: one line per reason, its tasks under it
    tail = out.split("not advised")[1].splitlines()
    assert tail[tail.index("  no records:") + 1] == "    environment.default.r0 (task done)"
    for layout, task in (("2 x 2", "collectives.n2x2.r0"), ("1 x 2", "collectives.n1x2.r0")):
        reason = (f"  no series of its own; its collectives-style rows give the link of the run's series on "
                  f"{layout} gloo ranks:")
        assert tail[tail.index(reason) + 1] == f"    {task} (task done)"


def test_refusals_are_grouped_by_reason_with_the_tasks_under_it(tmp_path, capsys):
    one_node = {"collectives.n1x2.r0": lambda p: _collectives_rows(p, nodes=1, ranks_per_node=2, alpha=1e-3,
                                                                    beta=1e-9, variant="n1x2")}
    run_dir = _demo_like_run(tmp_path, collectives=one_node)
    assert main(["advise", str(run_dir)]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    reasons = [ln for ln in lines if ln.startswith("  ") and not ln.startswith("    ")]
    assert len(reasons) == len(set(reasons)) == 3, err  # no link, probe rows only, no records: each once
    no_link = next(r for r in reasons if "cannot tell the byte term" in r)
    assert "no collectives-style task of the run ran on its layout, 2 x 2 gloo" in no_link
    assert "they ran: collectives.n1x2 1 x 2 gloo" in no_link
    under = lines[lines.index(no_link) + 1:lines.index(no_link) + 3]
    assert under == ["    comm_modes.m0.r0 (task done, 1 series)", "    comm_modes.m1.r0 (task done, 1 series)"]
    assert len(err) < 2000  # one line per reason, not per series
