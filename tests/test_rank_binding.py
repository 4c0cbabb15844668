"""``bind: plan`` applies the machine's affinity plan inside every rank, and every rank records what it really got."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hpcbench.affinity.topology import parse_cpulist
from hpcbench.core.errors import ConfigError
from hpcbench.core.results import RecordContext, read_records
from hpcbench.dist.binding import BIND_ENV, bind_mode
from hpcbench.dist.launcher import launch
from hpcbench.experiments.collectives.config import CollectivesConfig


def threads_entry(cfg, topo, writer):
    """Records the intra-op threads torch started with (the plan sets them before torch is imported)."""
    import torch

    writer.add("torch_threads", torch.get_num_threads(), "count")


def _launch(tmp_path: Path, monkeypatch, bind: str | None) -> pd.DataFrame:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    cfg = CollectivesConfig.from_dict({"nodes": 1, "ranks_per_node": 2, "backend": "gloo"})
    ctx = RecordContext(experiment="collectives", params=cfg.to_dict())
    res = launch(threads_entry, cfg, nodes=1, ranks_per_node=2, context=ctx, out_dir=tmp_path, echo=None,
                 bind=bind)
    return pd.concat([read_records(p) for p in res.records], ignore_index=True)


def _field(df: pd.DataFrame, rank: int, name: str) -> str:
    rows = df[(df["metric"] == "rank_binding") & (df["rank"] == rank)]
    return {json.loads(lab)["field"]: text for lab, text in zip(rows["labels"], rows["text"])}[name]


def test_plan_binds_each_rank_to_its_own_cores_and_threads(tmp_path, monkeypatch):
    from hpcbench.affinity.plan import plan_binding
    from hpcbench.affinity.topology import read_topology

    plan = plan_binding(read_topology(), 2)
    df = _launch(tmp_path, monkeypatch, "plan")
    for binding in plan.bindings:
        rank = binding.local_rank
        assert parse_cpulist(_field(df, rank, "cpus_allowed_list")) == sorted(binding.cpus)
        mism = df[(df["metric"] == "rank_binding_mismatches") & (df["rank"] == rank)]
        assert mism["value"].tolist() == [0], mism["text"].tolist()
        threads = df[(df["metric"] == "torch_threads") & (df["rank"] == rank)]["value"]
        assert threads.tolist() == [binding.threads]
    assert set(parse_cpulist(_field(df, 0, "cpus_allowed_list"))).isdisjoint(
        parse_cpulist(_field(df, 1, "cpus_allowed_list")))


def test_without_a_plan_ranks_still_record_what_they_got(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv(BIND_ENV, raising=False)
    df = _launch(tmp_path, monkeypatch, None)
    for rank in (0, 1):
        assert parse_cpulist(_field(df, rank, "cpus_allowed_list")) == sorted(os.sched_getaffinity(0))
    labels = {json.loads(lab)["bind"] for lab in df[df["metric"] == "rank_binding"]["labels"]}
    assert labels == {"none"}
    assert not (df["metric"] == "rank_binding_mismatches").any()


def test_bind_mode_comes_from_the_argument_then_the_environment():
    assert bind_mode(None, {}) == "none"
    assert bind_mode(None, {BIND_ENV: "plan"}) == "plan"
    assert bind_mode("none", {BIND_ENV: "plan"}) == "none"
    with pytest.raises(ConfigError) as exc:
        bind_mode(None, {BIND_ENV: "numa"})
    assert exc.value.field == BIND_ENV and "'none', 'plan'" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        bind_mode("cores", {})
    assert exc.value.field == "bind"


def test_the_report_shows_bindings_in_their_own_table_not_as_unmeasured_values():
    from hpcbench.core.results import expand_labels
    from hpcbench.present.kit import rank_binding_table, split_binding_rows

    def row(rank, field, text, bind="plan"):
        return {"source": "run", "variant": "v", "node": "n1", "rank": rank, "metric": "rank_binding",
                "labels": json.dumps({"bind": bind, "field": field}), "text": text}

    text = expand_labels(pd.DataFrame([
        row(0, "cpus_allowed_list", "0"), row(1, "cpus_allowed_list", "0-1"),
        row(1, "mismatch", "local rank 1: Cpus_allowed_list 0-1, planned 1"),
        {"source": "run", "variant": "v", "node": "n1", "rank": 0, "metric": "busbw", "labels": "{}",
         "text": "not applicable: one node"}]))
    rest, binding = split_binding_rows(text)
    assert rest["metric"].tolist() == ["busbw"] and len(binding) == 3
    table = rank_binding_table(binding)
    facts = {r[3].text: [p.text for p in r[-1].parts] for r in table.rows}
    assert facts["0"] == ["cpus_allowed_list: 0"]
    assert "mismatch: local rank 1: Cpus_allowed_list 0-1, planned 1" in facts["1"]
    assert [r[4].text for r in table.rows] == ["plan", "plan"] and table.collapsed
