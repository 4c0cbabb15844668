"""``report.json``: what a report says about itself, as data; written and read here only.

Every report folder carries it beside ``index.html`` (:func:`hpcbench.report.html.build_report`
writes it through :func:`report_manifest`); ``hpcbench publish`` reads it to index the report
and draw its claims across reports, ``hpcbench report --compare`` to say which claims moved. One
module holds its shape on both sides, so writer and readers cannot drift apart. Its fields, their
types and how versions change: ``hpcbench/report/SCHEMA.md``.

Readers take exactly :data:`SCHEMA_VERSION`: a file of another version is refused with an error
naming it (an older one is rebuilt from its run directories with ``hpcbench report``), never
read half-understood.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from hpcbench.core.atomic import atomic_write
from hpcbench.core.errors import HpcbenchError
from hpcbench.report.ledger_page import primary_outcome
from hpcbench.report.report_folder import REPORT_JSON

#: The version of report.json this hpcbench writes and reads; SCHEMA.md says when it changes.
SCHEMA_VERSION = 2
#: Counted when the runs of one report disagree on a claim: one verdict would hide the others.
DIFFERS = "differs between runs"
#: Fields of a ledger row that readers rely on (the rest is the ledger's :meth:`~hpcbench.judge.evidence.
#: LedgerRow.as_record`, see SCHEMA.md).
LEDGER_REQUIRED = ("run", "claim", "verdict")


class SchemaError(HpcbenchError):
    """A report.json this hpcbench cannot read: another version, or a field missing or of the wrong type."""


class UnreadableInputs(HpcbenchError):
    """Inputs of a report could not be read: ``hpcbench report`` writes no report, ``hpcbench publish``
    publishes none, unless ``--allow-unreadable``. The command exits with :attr:`exit_code`: the input is
    not bad, the data is incomplete."""

    exit_code = 1


def utc_stamp(when: dt.datetime | None = None) -> str:
    """``when`` (default: now) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC: sorts as text."""
    when = (when or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def count(verdicts: Sequence[str]) -> dict[str, int]:
    """How often each verdict occurs, in order of first occurrence."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v] = counts.get(v, 0) + 1
    return counts


# -- writing -------------------------------------------------------------------------

def report_manifest(title: str, sources: Sequence[Any],
                    verdicts_by_source: Mapping[str, Mapping[str, str] | None],
                    generated: dt.datetime | None = None,
                    ledger: Sequence[Mapping[str, Any]] = (),
                    unreadable: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """The content of ``report.json`` (SCHEMA.md, version :data:`SCHEMA_VERSION`).

    Args:
        title: the page title.
        sources: the report's :class:`hpcbench.report.aggregate.Source` objects (``label``,
            ``run_dir`` and ``info``, the run's ``run.json``).
        verdicts_by_source: per source label, the verdict of each claim id; None where the
            claims could not be evaluated for that source.
        generated: when the report was generated (default: now).
        ledger: the claims ledger as data, one row per claim and run
            (:meth:`hpcbench.judge.evidence.LedgerRow.as_record` with its run's label, the index of
            its deciding comparison and its launches' platform: :func:`ledger_record`).
        unreadable: the inputs that could not be read: ``run``, ``path`` (relative to that run's
            directory) and ``reason``.

    Returns:
        A JSON-ready dict. ``verdicts`` counts each claim once: under its verdict when every
        evaluated run agrees, under :data:`DIFFERS` otherwise, so the counts add up to the
        number of claims in the ledger. Each run also carries its own counts.
    """
    runs = []
    per_claim: dict[str, set[str]] = {}
    for source in sources:
        info = source.info or {}
        verdicts = verdicts_by_source.get(source.label)
        runs.append({
            "label": source.label,
            # The folder's name only: an absolute path of the machine that built the report
            # would be published with it and means nothing to the site's readers.
            "run_dir": Path(source.run_dir).name,
            **{key: (None if info.get(key) is None else str(info.get(key)))
               for key in ("run_id", "suite", "host", "created", "backend")},
            "verdicts": None if verdicts is None else count(list(verdicts.values())),
        })
        for claim_id, verdict in (verdicts or {}).items():
            per_claim.setdefault(str(claim_id), set()).add(str(verdict))
    combined = [next(iter(v)) if len(v) == 1 else DIFFERS for v in per_claim.values()]
    return {"schema_version": SCHEMA_VERSION, "title": title, "generated": utc_stamp(generated), "runs": runs,
            "claims": len(per_claim), "verdicts": count(combined), "ledger": list(ledger),
            "unreadable": [dict(u) for u in unreadable]}


def ledger_record(label: str, row: Any, records: pd.DataFrame | None) -> dict[str, Any]:
    """One ledger row of run ``label`` as report.json holds it.

    The row's own record (:meth:`~hpcbench.judge.evidence.LedgerRow.as_record`; a row of another
    ledger module without it gives its claim id and verdict only), with ``primary``, the index in
    ``comparisons`` of the comparison the page's summary row shows
    (:func:`hpcbench.report.ledger_page.primary_outcome`; None when there is none), and
    ``platform``, what the launches of the claim's experiment ran on (:func:`platform_facts`).
    """
    as_record = getattr(row, "as_record", None)
    record = as_record() if callable(as_record) else {"claim": str(row.claim_id), "verdict": str(row.verdict)}
    found = primary_outcome(row)
    outcomes = list(getattr(row, "outcomes", ()) or ())
    primary = next((i for i, o in enumerate(outcomes) if found is not None and o is found[1]), None)
    experiment = getattr(row, "experiment", None)
    return {"run": label, **record, "primary": primary,
            "platform": platform_facts(records if records is not None else pd.DataFrame(), experiment)}


def platform_facts(records: pd.DataFrame, experiment: str | None) -> dict[str, Any]:
    """What the finished launches of ``experiment`` in ``records`` ran on, each value once, sorted.

    Returns:
        ``launches`` (how many), ``nodes`` (per launch: its ``fact.cluster_nodes``, else the nodes its
        records name), ``ranks`` (per launch: its largest ``world_size``) and ``facts``: every ``fact.*``
        record of those launches (:mod:`hpcbench.system.facts`: cluster, link rate in bits/s,
        InfiniBand, GPUs, the regime reached), by name without the prefix, a list of its distinct values.
    """
    empty: dict[str, Any] = {"launches": 0, "nodes": [], "ranks": [], "facts": {}}
    if not experiment or records.empty or "experiment" not in records.columns:
        return empty
    rows = records[records["experiment"] == experiment]
    if rows.empty:
        return empty
    launches = rows.groupby(["run_id", "task_id"], observed=True, sort=False)
    facts = rows[rows["metric"].astype(str).str.startswith("fact.")]
    node_facts = facts[facts["metric"] == "fact.cluster_nodes"]
    counted = node_facts.groupby(["run_id", "task_id"], observed=True)["value"].max()
    nodes = {int(counted[key]) if key in counted.index and math.isfinite(counted[key]) else int(group["node"].nunique())
             for key, group in launches}
    ranks = {int(w) for w in launches["world_size"].max() if w is not None and math.isfinite(w)}
    by_name: dict[str, set] = {}
    for metric, value, text in zip(facts["metric"], facts["value"], facts["text"]):
        if value is not None and math.isfinite(value):
            shown: Any = int(value) if float(value).is_integer() else float(value)
        elif isinstance(text, str) and text:
            shown = text
        else:
            continue
        by_name.setdefault(str(metric)[len("fact."):], set()).add(shown)
    return {"launches": launches.ngroups, "nodes": sorted(n for n in nodes if n > 0), "ranks": sorted(ranks),
            "facts": {name: sorted(values, key=lambda v: (isinstance(v, str), v)) for name, values in
                      sorted(by_name.items())}}


def write_report_manifest(out_dir: str | Path, manifest: Mapping[str, Any]) -> Path:
    """Write ``out_dir/report.json`` atomically (a reader never sees half a file); returns its path.

    The mode follows the umask, like every file hpcbench writes (:func:`hpcbench.core.atomic.atomic_write`).
    """
    path = Path(out_dir) / REPORT_JSON
    with atomic_write(path, "w") as fh:
        fh.write(json.dumps(manifest, indent=2) + "\n")
    return path


# -- reading -------------------------------------------------------------------------

def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``.

    Raises:
        HpcbenchError: naming ``path`` when it cannot be read, is not JSON or not an object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HpcbenchError(f"{path}: {what} is not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise HpcbenchError(f"{path}: {what} is not a JSON object")
    return data


def check_report_json(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``data``, checked to be a report.json of version :data:`SCHEMA_VERSION` (see SCHEMA.md).

    Raises:
        SchemaError: naming ``path`` and the version, or the first field that is missing or of the wrong type.
    """
    version = data.get("schema_version")
    if version is None and data.get("schema") == 1:
        raise SchemaError(f"{path}: schema version 1 (written by an older hpcbench); this hpcbench reads version "
                          f"{SCHEMA_VERSION}: rebuild the report from its run directories with `hpcbench report`")
    if not isinstance(version, int) or isinstance(version, bool):
        raise SchemaError(f"{path}: no integer 'schema_version': not a report.json that hpcbench wrote")
    if version != SCHEMA_VERSION:
        newer = " (written by a newer hpcbench: upgrade this one)" if version > SCHEMA_VERSION else \
            " (written by an older hpcbench: rebuild the report with `hpcbench report`)"
        raise SchemaError(f"{path}: schema version {version}{newer}; this hpcbench reads version {SCHEMA_VERSION}")
    types = {"title": str, "generated": str, "runs": list, "claims": int, "verdicts": dict, "ledger": list,
             "unreadable": list}
    for key, kind in types.items():
        if not isinstance(data.get(key), kind):
            raise SchemaError(f"{path}: field '{key}' must be a {_TYPE_NAMES[kind]}")
    for key, required in (("runs", ("label",)), ("ledger", LEDGER_REQUIRED), ("unreadable", ("path", "reason"))):
        for i, entry in enumerate(data[key]):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(f), str) for f in required):
                raise SchemaError(f"{path}: field '{key}[{i}]' must be an object with string "
                                  + ", ".join(f"'{f}'" for f in required))
    return dict(data)


_TYPE_NAMES = {str: "string", list: "list", int: "integer", dict: "object"}


def read_report_json(path: str | Path) -> dict[str, Any]:
    """The checked report.json at ``path``: the file, or a report folder holding it.

    Raises:
        HpcbenchError: naming the path when it does not exist or is not JSON; :class:`SchemaError` when it is
            of another version or a field is wrong (:func:`check_report_json`).
    """
    path = Path(path)
    if path.is_dir():
        path = path / REPORT_JSON
    if not path.is_file():
        raise HpcbenchError(f"{path}: no such file; give a report folder or its {REPORT_JSON}")
    return check_report_json(read_json_object(path, REPORT_JSON), path)


__all__ = ["DIFFERS", "LEDGER_REQUIRED", "SCHEMA_VERSION", "SchemaError", "UnreadableInputs", "check_report_json",
           "count",
           "ledger_record", "platform_facts", "read_json_object", "read_report_json", "report_manifest",
           "utc_stamp", "write_report_manifest"]
