"""The one apply-and-record helper of :mod:`hpcbench.fault.inject.record`, and the registry it builds from.

Its guarantees, each shown on a fault that needs no privilege: the fault is undone when the
body raises; what was applied, and when, is one ``fault_injected`` row; an undo that fails is
recorded and reported without hiding the body's own exception; a fault that cannot be applied
is a recorded fact and the body runs without it. Then the kinds the experiments name: each
reads only fields their configs have, and a real one (busy processes) goes through the helper.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from hpcbench.core.results import RecordContext, RecordWriter, read_records
from hpcbench.fault.inject import (FAULT_KINDS, FaultKind, FaultSite, FaultUndoError, NodeFault, apply_and_record,
                                   node_fault_for_phase, rank_part_for_phase)
from hpcbench.fault.inject.record import INJECTED, RANK_PART, RETRANSMITTED

LABELS = {"fault": "toy", "node": "n2"}


class ToyFault(NodeFault):
    """A fault on a flag: ``on`` while applied; its undo can be made to fail half-way."""

    kind = "toy"

    def __init__(self, *, apply_fails: bool = False, undo_fails: bool = False, sent: float | None = None) -> None:
        super().__init__("n2")
        self.on = False
        self.apply_fails, self.undo_fails, self._sent = apply_fails, undo_fails, sent
        self.undo_calls = 0

    def _apply(self) -> None:
        self.on = True
        self.log.actions.append("flag on")
        if self.apply_fails:
            raise OSError("the flag stuck half-way")

    def _undo(self) -> None:
        self.undo_calls += 1
        self.log.actions.append("flag off")
        if self.undo_fails:
            raise RuntimeError("the flag would not come off")
        self.on = False

    @property
    def sent(self) -> float | None:
        return self._sent

    @property
    def retransmitted(self) -> float:
        return 3.0


def rows(tmp_path: Path, write) -> list[dict]:
    """The rows ``write(writer)`` wrote, read back from the Parquet file (labels parsed)."""
    path = tmp_path / "rank0.parquet"
    with RecordWriter(path, RecordContext(experiment="toy")) as writer:
        write(writer)
    frame = read_records(path)
    return [{**r, "labels": json.loads(r["labels"])} for r in frame.to_dict("records")]


def test_the_fault_is_on_in_the_body_undone_after_and_recorded_with_when(tmp_path):
    fault = ToyFault()

    def write(writer):
        before = time.time()
        with apply_and_record(fault, writer, LABELS) as applied:
            assert fault.on and applied.applied
            time.sleep(0.05)
        assert not fault.on and applied.undone
        write.before = before

    (row,) = rows(tmp_path, write)
    assert row["metric"] == INJECTED and row["value"] == 1.0 and row["labels"] == LABELS
    assert "toy on n2: undone" in row["text"] and "flag off" in row["text"] and " for 0.0" in row["text"]
    # the row's time is when the fault went on, not when it was written
    assert row["time"].timestamp() == pytest.approx(fault.log.started, abs=1e-3)
    assert write.before <= fault.log.started < fault.log.stopped


def test_a_body_that_raises_still_undoes_the_fault_and_keeps_its_exception(tmp_path):
    fault = ToyFault()

    def write(writer):
        with pytest.raises(KeyError, match="body failed") as raised:
            with apply_and_record(fault, writer, LABELS):
                raise KeyError("body failed")
        assert not getattr(raised.value, "__notes__", None)

    (row,) = rows(tmp_path, write)
    assert not fault.on and fault.undo_calls == 1 and row["value"] == 1.0


def test_an_undo_that_fails_under_a_raising_body_is_reported_without_masking_it(tmp_path):
    fault = ToyFault(undo_fails=True)

    def write(writer):
        with pytest.raises(KeyError, match="body failed") as raised:
            with apply_and_record(fault, writer, LABELS) as applied:
                raise KeyError("body failed")
        assert applied.undone is False and isinstance(applied.undo_error, RuntimeError)
        assert any("could not be undone" in note and "would not come off" in note for note in raised.value.__notes__)

    (row,) = rows(tmp_path, write)
    assert math.isnan(row["value"]) and "NOT undone" in row["text"] and "undo failed: RuntimeError" in row["text"]


def test_an_undo_that_fails_after_a_good_body_raises_after_recording(tmp_path):
    fault = ToyFault(undo_fails=True)

    def write(writer):
        with pytest.raises(FaultUndoError, match="would not come off") as raised:
            with apply_and_record(fault, writer, LABELS):
                pass
        assert isinstance(raised.value.__cause__, RuntimeError)

    (row,) = rows(tmp_path, write)
    assert math.isnan(row["value"]) and "flag off" in row["text"]


def test_a_fault_that_cannot_be_applied_is_recorded_and_the_body_runs_without_it(tmp_path):
    fault = ToyFault(apply_fails=True)
    ran = []

    def write(writer):
        with apply_and_record(fault, writer, LABELS) as applied:
            ran.append(fault.on)
        assert not applied.applied
        with apply_and_record("no emulated cluster here", writer, {**LABELS, "fault": "other"}):
            ran.append("reason")

    first, second = rows(tmp_path, write)
    assert ran == [False, "reason"]  # the template undid the half-applied fault before the body ran
    assert math.isnan(first["value"]) and first["text"] == "not injected: OSError: the flag stuck half-way"
    assert math.isnan(second["value"]) and second["text"] == "not injected: no emulated cluster here"


def test_retransmissions_are_recorded_for_faults_that_count_them(tmp_path):
    def write(writer):
        with apply_and_record(ToyFault(sent=100.0), writer, LABELS):
            pass

    injected, retrans = rows(tmp_path, write)
    assert injected["metric"] == INJECTED and retrans["metric"] == RETRANSMITTED
    assert retrans["value"] == pytest.approx(0.03) and "3 of 100 segments" in retrans["text"]


def test_a_ranks_own_part_is_any_context_manager_and_recorded_as_rank_part(tmp_path, monkeypatch):
    import contextlib

    state = {"on": False}

    @contextlib.contextmanager
    def own_part(settings):
        state["on"] = True
        try:
            yield f"threads x{settings.factor}"
        finally:
            state["on"] = False

    monkeypatch.setitem(FAULT_KINDS._items, "toy_rank_only", FaultKind("toy_rank_only", "the rank's own", None,
                                                                       own_part))

    def write(writer):
        site = FaultSite("n2", [1], tmp_path, SimpleNamespace(factor=4))
        with node_fault_for_phase("none", site, writer, {"fault": "none"}), \
                node_fault_for_phase("toy_rank_only", site, writer, LABELS), \
                rank_part_for_phase("toy_rank_only", site.settings, writer, LABELS):
            assert state["on"]
        with pytest.raises(ValueError):
            with rank_part_for_phase("toy_rank_only", site.settings, writer, LABELS):
                raise ValueError("body failed")
        assert not state["on"]

    base, node, rank, rank_again = rows(tmp_path, write)
    assert math.isnan(base["value"]) and base["text"] == "baseline: no fault"
    assert node["value"] == 1.0 and node["text"] == "toy_rank_only: no node part (the ranks' own)"
    assert rank["metric"] == RANK_PART and rank["value"] == 1.0 and rank["text"] == "threads x4; undone"
    assert rank_again["value"] == 1.0


def test_the_kinds_read_only_fields_of_the_configs_that_name_them():
    from hpcbench.experiments.monitoring.config import FAULTS as MONITORING_FAULTS
    from hpcbench.experiments.monitoring.config import MonitoringConfig
    from hpcbench.experiments.practice.config import FAULTS as PRACTICE_FAULTS
    from hpcbench.experiments.practice.config import PracticeConfig

    for config, names in ((MonitoringConfig, MONITORING_FAULTS), (PracticeConfig, PRACTICE_FAULTS)):
        have = {f.name for f in fields(config)}
        for name in names[1:]:  # the baseline first
            kind = FAULT_KINDS.get(name)
            assert set(kind.reads) <= have, (config.__name__, name, set(kind.reads) - have)
            assert kind.node_part or kind.rank_part


def test_a_link_kind_without_the_cluster_says_why(tmp_path, monkeypatch):
    from hpcbench.experiments.monitoring.config import MonitoringConfig

    monkeypatch.delenv("SLURM_CONF", raising=False)

    def write(writer):
        site = FaultSite("n2", [1], tmp_path, MonitoringConfig())
        with node_fault_for_phase("lossy_link", site, writer, LABELS) as applied:
            assert applied.applied is False

    (row,) = rows(tmp_path, write)
    assert math.isnan(row["value"]) and row["text"].startswith("not injected: no emulated cluster")


def test_busy_processes_through_the_helper_are_gone_after_a_raising_body(tmp_path):
    from hpcbench.experiments.monitoring.config import MonitoringConfig

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        def write(writer):
            site = FaultSite("n2", [sleeper.pid], tmp_path, MonitoringConfig())
            with pytest.raises(RuntimeError):
                with node_fault_for_phase("cpu_contention", site, writer, LABELS) as applied:
                    write.pids = [p.pid for p in applied.fault.procs]
                    raise RuntimeError("body failed")

        (row,) = rows(tmp_path, write)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert write.pids and all(not Path(f"/proc/{p}").exists() for p in write.pids)
    assert row["value"] == 1.0 and "pinned to CPU" in row["text"]
