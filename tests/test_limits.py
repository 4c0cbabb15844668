"""Limits checked before anything starts: ranks against cores, memory against the machine, --dry-run.

Every refusal is reproduced through ``hpcbench.cli.main`` in-process, on a machine pinned
by ``machine`` (2 usable cores, 20 GiB available), so the numbers do not depend on the host.
No test here starts a notebook or a rank: ``no_run`` turns any attempt into a failure.
"""

from __future__ import annotations

import json

import pytest

from hpcbench import cli
from hpcbench.core.errors import SuiteError
from hpcbench.experiments import EXPERIMENTS, TASK_BASE_BYTES, Estimate, baseline_estimate, wants_gpu
from hpcbench.models import MODEL_NAMES
from hpcbench.models.footprint import model_footprint, training_memory
from hpcbench.run import limits
from hpcbench.run.limits import Capacity, LimitError, check_limits, memory_problem, plan_run, rank_problem
from hpcbench.run.suite import load_suite, parse_suite, suite_from_dict

GiB = 1 << 30
HERE = Capacity("local", "this machine", cores=2, memory_bytes=20 * GiB,
                memory_source="available (MemAvailable, /proc/meminfo)")


@pytest.fixture(autouse=True)
def no_run(monkeypatch):
    """Fail the test if anything gets as far as running tasks."""
    import hpcbench.run.runner as runner

    def refuse(*args, **kwargs):
        raise AssertionError("the limits passed: tasks were about to run")

    monkeypatch.setattr(runner, "_run_tasks", refuse)


@pytest.fixture
def machine(monkeypatch):
    """This machine, as the local backend reads it: 2 usable cores, no GPU, 20 GiB available."""
    monkeypatch.setattr(limits, "usable_cores", lambda: 2)
    monkeypatch.setattr(limits, "cuda_devices", lambda root=limits.GPU_SOURCE: 0)
    monkeypatch.setattr(limits, "mem_available", lambda text: 20 * GiB)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def collectives(**params) -> Estimate:
    exp = EXPERIMENTS.get("collectives")
    return exp.estimate(exp.config.from_dict(params))


# -- refusals through the CLI ----------------------------------------------------------------

def test_more_ranks_than_cores_is_refused(machine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "nodes=2", "-p", "ranks_per_node=64",
                           "--out", tmp_path / "results")
    assert rc == 2 and "Traceback" not in err and "run dir:" not in out
    for needle in ("collectives.default.r0: 128 ranks", "2 node(s) x 64 ranks per node", "this machine has 2 "
                   "usable core(s)", "--oversubscribe", "oversubscribe: true", "nothing was started"):
        assert needle in err, (needle, err)
    assert list(tmp_path.iterdir()) == []  # no run dir, not even results/


def test_a_size_beyond_memory_is_refused_with_the_numbers(machine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "max_bytes=1T", "--run-dir", tmp_path / "run")
    assert rc == 2 and "run dir:" not in out
    for needle in ("collectives.default.r0: needs about 5.5 TiB", "2.8 TiB per rank x 2 ranks",
                   "this machine has 20.0 GiB available", "sweep's top size 1.0 TiB", "hpcbench params collectives"):
        assert needle in err, (needle, err)
    assert list(tmp_path.iterdir()) == []


def test_a_suite_names_every_task_at_fault(machine, tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\ntasks:\n  - experiment: collectives\n    variants:\n"
                    "      fine: {max_bytes: 1M}\n      huge: {max_bytes: 64G}\n      wide: {nodes: 4}\n")
    rc, out, err = run_cli(capsys, "suite", path, "--out", tmp_path / "results")
    assert rc == 2
    assert "2 task(s) of suite big exceed" in err
    assert "collectives.huge.r0: needs about" in err and "collectives.wide.r0: 8 ranks" in err
    assert "collectives.fine.r0" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


def test_resume_is_checked_before_any_attempt_is_moved(machine, tmp_path, capsys):
    suite = parse_suite({"name": "r", "tasks": [{"experiment": "collectives", "params": {"max_bytes": "1T"}}]})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run", "suite": "r", "backend": "local"}))
    (run_dir / "suite.json").write_text(json.dumps(suite.to_dict()))
    rc, out, err = run_cli(capsys, "suite", "resume", run_dir)
    assert rc == 2 and "collectives.default.r0: needs about 5.5 TiB" in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json", "suite.json"]
    # its dry run says the same, and moves nothing either
    rc, out, err = run_cli(capsys, "suite", "resume", run_dir, "--dry-run")
    assert rc == 2 and "REFUSED" in out and "the run's own, unchanged" in out
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json", "suite.json"]


# -- forcing --------------------------------------------------------------------------------

def test_oversubscribe_forces_the_rank_limit_only():
    suite = parse_suite({"name": "s", "tasks": [{"experiment": "collectives", "variants": {
        "wide": {"nodes": 2, "ranks_per_node": 2}}}]})
    assert not plan_run(suite, HERE).ok
    assert plan_run(suite, HERE, oversubscribe=True).ok
    forced = parse_suite({"name": "s", "oversubscribe": True, "tasks": [{"experiment": "collectives", "variants": {
        "wide": {"nodes": 2, "ranks_per_node": 2}}}]})
    assert plan_run(forced, HERE).ok
    check_limits(forced, "nosuch-backend")  # a backend without a capacity probe checks nothing
    # memory is never forced
    huge = parse_suite({"name": "s", "oversubscribe": True, "tasks": [{"experiment": "collectives",
                                                                     "params": {"max_bytes": "1T"}}]})
    plan = plan_run(huge, HERE, oversubscribe=True)
    assert len(plan.problems) == 1 and "needs about" in plan.problems[0]
    with pytest.raises(LimitError, match="nothing was started"):
        plan.raise_if_refused()


def test_rank_and_memory_checks_are_pure_functions_of_the_numbers():
    from hpcbench.experiments import Resources

    layout = Resources(nodes=2, ranks_per_node=3)
    assert rank_problem("t", layout, 6, oversubscribe=False) is None
    assert "6 ranks" in rank_problem("t", layout, 5, oversubscribe=False)
    assert rank_problem("t", layout, 5, oversubscribe=True) is None
    assert rank_problem("t", layout, None, oversubscribe=False) is None  # SLURM places ranks itself
    est = Estimate(GiB, ranks=6)
    assert memory_problem("t", "x", est, layout, Capacity("local", "here", memory_bytes=7 * GiB)) is None
    assert "needs about 7.0 GiB" in memory_problem("t", "x", est, layout, Capacity("local", "here",
                                                                                memory_bytes=6 * GiB))
    assert memory_problem("t", "x", est, layout, Capacity("slurm", "a node")) is None  # unknown: skipped
    node = Capacity("slurm", "each SLURM node", memory_bytes=4 * GiB, per_node=True, memory_source="(sinfo)")
    assert memory_problem("t", "x", est, layout, node) is None  # 3 ranks per node + the base: 4 GiB
    small = Capacity("slurm", "each SLURM node", memory_bytes=3 * GiB, per_node=True, memory_source="(sinfo)")
    assert "needs about 4.0 GiB per node (1.0 GiB per rank x 3 ranks per node" in memory_problem(
        "t", "x", est, layout, small)


def test_the_machine_readers_parse_their_sources():
    assert limits.mem_available("MemTotal:  100 kB\nMemAvailable:    2048 kB\n") == 2 << 20
    assert limits.mem_available("MemTotal: 1 kB\n") is None
    assert limits.smallest_node_memory("64000\n32000+\n\n") == 32000 << 20
    assert limits.smallest_node_memory("") is None
    assert limits.usable_cores() >= 1


# -- the shipped suites ------------------------------------------------------------------------

def test_shipped_suites_pass_where_they_are_meant_to_run():
    # demo: a functional run on this 2-core machine, forced by its own `oversubscribe: true`
    assert load_suite("demo").oversubscribe and plan_run(load_suite("demo"), HERE).ok
    assert plan_run(load_suite("reproduce-calibration"), HERE).ok  # 1 node x 2 ranks: fits as it is
    # reproduce and cluster run on SLURM, where the scheduler places the ranks
    node = Capacity("slurm", "each SLURM node", memory_bytes=20 * GiB, per_node=True)
    gpu_node = Capacity("slurm", "each SLURM node", memory_bytes=256 * GiB, per_node=True)
    assert plan_run(load_suite("reproduce"), node).ok and plan_run(load_suite("cluster"), gpu_node).ok
    # ... and reproduce is refused locally on 2 cores: its timings would be those of an oversubscribed run
    assert not load_suite("reproduce").oversubscribe and not plan_run(load_suite("reproduce"), HERE).ok


def test_oversubscribe_key_is_parsed_kept_and_validated():
    suite = parse_suite({"name": "s", "oversubscribe": True, "tasks": [{"experiment": "environment"}]})
    data = suite.to_dict()
    assert data["oversubscribe"] is True
    assert suite_from_dict(json.loads(json.dumps(data)), "suite.json").oversubscribe
    legacy = {k: v for k, v in data.items() if k != "oversubscribe"}  # a run dir from before the key
    assert not suite_from_dict(legacy, "suite.json").oversubscribe
    with pytest.raises(SuiteError, match="oversubscribe: 'yes' must be true or false"):
        parse_suite({"name": "s", "oversubscribe": "yes", "tasks": [{"experiment": "environment"}]}, "s.yaml")


# -- the dry run --------------------------------------------------------------------------------

def test_dry_run_prints_the_plan_and_writes_nothing(machine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "suite", "demo", "--dry-run")
    assert rc == 0, (out, err)
    header = next(line for line in out.splitlines() if line.startswith("task "))
    for column in ("experiment", "nodes x ranks", "memory", "per rank", "time"):
        assert column in header
    for task in load_suite("demo").tasks:
        assert task.task_id in out
    assert "collectives.two_nodes_2x2.r0" in out and " 2 x 2 " in out
    assert "total: 10 task(s), at most 4 ranks" in out
    assert "backend: local; run dir: results/demo-" in out and "not created" in out
    assert "2 usable core(s), 0 CUDA device(s), 20.0 GiB available" in out and "oversubscription allowed" in out
    assert "limits: ok" in out
    assert list(tmp_path.iterdir()) == []


def test_dry_run_of_a_refused_run_exits_2(machine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "nodes=2", "-p", "ranks_per_node=2", "--dry-run")
    assert rc == 2 and "REFUSED: 1 problem(s)" in out and "4 ranks" in out
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "nodes=2", "-p", "ranks_per_node=2",
                           "--oversubscribe", "--dry-run")
    assert rc == 0 and "limits: ok" in out
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "max_bytes=1T", "--dry-run")
    assert rc == 2 and "needs about 5.5 TiB" in out and "5.5 TiB" in out.split("estimates:")[0]
    assert list(tmp_path.iterdir()) == []


# -- estimates -----------------------------------------------------------------------------------

def test_every_experiment_estimates_its_defaults_consistently():
    for name in EXPERIMENTS.names():
        exp = EXPERIMENTS.get(name)
        cfg = exp.config()
        est, res = exp.estimate(cfg), exp.resources(cfg)
        assert est.ranks == res.nodes * res.ranks_per_node, name
        assert est.memory_total == est.memory_per_rank * est.ranks + est.overhead >= TASK_BASE_BYTES, name
        assert est.seconds and 1 < est.seconds < 3600, (name, est.seconds)  # the defaults are quick runs
        assert est.basis and "\n" not in est.basis, name


def test_collectives_estimate_grows_with_the_sizes_and_the_ranks():
    sizes = ["1K", "1M", "16M", "256M", "4G", "64G", "1T"]
    totals = [collectives(max_bytes=s).memory_total for s in sizes]
    assert totals == sorted(totals) and totals[-1] > 1000 * totals[2]
    # in-place all_reduce needs less than all_gather's in + out
    assert collectives(max_bytes="1G", ops="all_reduce").memory_per_rank < collectives(max_bytes="1G").memory_per_rank
    assert collectives(nodes=2).memory_total > collectives(nodes=1).memory_total
    more_time = [collectives(max_bytes=s).seconds for s in sizes]
    assert more_time == sorted(more_time)
    gpu = collectives(max_bytes="1G", backend="nccl")
    assert gpu.device_memory_per_rank > 1 << 30 and gpu.memory_per_rank < collectives().memory_per_rank + (1 << 20)


def test_training_estimates_grow_with_batch_model_and_factors():
    cm, bs = EXPERIMENTS.get("comm_modes"), EXPERIMENTS.get("batch_scaling")
    one = lambda exp, **p: exp.estimate(exp.config.from_dict(p))  # noqa: E731
    assert one(cm, batch_size=4).memory_per_rank < one(cm, batch_size=64).memory_per_rank
    assert one(cm, models=["gpt2_tiny"]).memory_per_rank < one(cm, models=["gpt2_124M"]).memory_per_rank
    assert one(cm, measure_noop=False).memory_per_rank < one(cm).memory_per_rank
    assert one(bs, base_batch=4).memory_per_rank < one(bs, base_batch=32).memory_per_rank
    assert one(bs, factors=[1, 2]).memory_per_rank < one(bs, factors=[1, 2, 4, 8]).memory_per_rank
    assert one(bs, steps=4).seconds < one(bs, steps=40).seconds
    assert one(bs, model="resnet50", image_size=224).memory_per_rank > one(bs, model="resnet50").memory_per_rank


def test_io_formats_estimate_grows_with_batches_shards_and_workers():
    exp = EXPERIMENTS.get("io_formats")
    one = lambda **p: exp.estimate(exp.config.from_dict(p))  # noqa: E731
    assert one(batch_size=16).memory_total < one(batch_size=256).memory_total
    assert one(shard_size="8M").memory_total < one(shard_size="1G").memory_total
    assert one(workers=[0, 2]).memory_total < one(workers=[0, 8]).memory_total
    assert one(formats=["files"]).memory_total < one(formats=["files", "hdf5"]).memory_total
    assert one(images=256).seconds < one(images=2000).seconds


def test_model_footprints_cover_every_model_and_match_the_built_ones():
    import torch

    assert all(model_footprint(name) is not None for name in MODEL_NAMES)
    assert model_footprint("gpt2_124M").parameters == 124_439_808  # GPT-2 small with its tied head
    assert model_footprint("gpt2_355M").parameters == 354_823_168  # GPT-2 medium
    from hpcbench.models import MODELS

    for name in ("resnet_tiny", "gpt2_tiny", "gpt2_small"):  # built in well under a second each
        torch.manual_seed(0)
        model = MODELS.get(name).build()
        assert sum(p.numel() for p in model.parameters()) == model_footprint(name).parameters, name
    assert model_footprint("nosuch") is None
    assert training_memory("resnet_tiny", samples=8, image_size=32, seq_len=2, state_copies=4) < \
        training_memory("resnet_tiny", samples=8, image_size=64, seq_len=2, state_copies=4)


def test_estimate_validates_its_fields_and_the_default_is_honest():
    with pytest.raises(ValueError, match="Estimate.memory_per_rank"):
        Estimate(-1)
    with pytest.raises(ValueError, match="Estimate.ranks"):
        Estimate(0, ranks=0)
    from hpcbench.experiments.collectives.config import CollectivesConfig
    from hpcbench.experiments.environment.config import EnvironmentConfig

    dist = baseline_estimate(CollectivesConfig.from_dict({"nodes": 2, "ranks_per_node": 4}))
    assert dist.ranks == 8 and dist.seconds is None and "not counted" in dist.basis
    assert baseline_estimate(EnvironmentConfig()).ranks == 1


# -- GPUs: a task that asks for one per rank, on a machine without --------------------------------

def test_cuda_devices_counts_the_drivers_gpu_folders(tmp_path):
    # the layout of /proc/driver/nvidia/gpus: one folder per GPU, named by its PCI address
    for bus in ("0000:0a:00.0", "0000:0b:00.0"):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "information").write_text("Model: NVIDIA H200\n")
    assert limits.cuda_devices(tmp_path) == 2
    assert limits.cuda_devices(tmp_path / "absent") == 0


@pytest.mark.parametrize("params, asks", [({"backend": "nccl"}, "backend: nccl"), ({"backend": "auto"}, None),
                                          ({"backend": "gloo"}, None)])
def test_only_an_explicit_nccl_or_cuda_asks_for_a_gpu(params, asks):
    cfg = EXPERIMENTS.get("batch_scaling").config.from_dict({"nodes": 1, "ranks_per_node": 1, **params})
    assert wants_gpu(cfg) == asks
    ft = EXPERIMENTS.get("fault_tolerance").config
    assert wants_gpu(ft.from_dict({"device": "cuda"})) == "device: cuda"
    assert wants_gpu(ft.from_dict({"device": "auto"})) is None


def test_the_gpu_suite_is_refused_cleanly_on_a_machine_without_gpus(machine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    suite = load_suite("gpu")
    asking = {t.task_id for t in suite.tasks
              if wants_gpu(EXPERIMENTS.get(t.experiment).config.from_dict(t.params))}
    assert len(asking) >= 3  # the suite is about the GPU, not a CPU suite with a GPU name
    # the limits decide from the tasks' resources, which say the same
    assert asking == {t.task_id for t in suite.tasks
                      if EXPERIMENTS.get(t.experiment).resources(
                          EXPERIMENTS.get(t.experiment).config.from_dict(t.params)).gpu}
    rc, out, err = run_cli(capsys, "suite", "gpu")
    assert rc == 2 and not (tmp_path / "results").exists()  # nothing started, nothing written
    for task_id in asking:
        assert f"{task_id}: " in err and "CUDA device per rank" in err
    assert "backend: nccl" in err and "device: cuda" in err and "/proc/driver/nvidia/gpus" in err
    # with GPUs enough for its one rank per task, the same plan passes the GPU check
    two = Capacity("local", "this machine", cores=16, memory_bytes=128 * GiB, gpus=1)
    assert not [p for p in plan_run(suite, two).problems if "CUDA" in p]
    # and where nobody knows (a SLURM node: --gres decides), nothing is refused for it
    slurm = Capacity("slurm", "each SLURM node", memory_bytes=128 * GiB, per_node=True)
    assert not [p for p in plan_run(suite, slurm).problems if "CUDA" in p]
