"""Verdict rules of ``collectives``: C10 (the guide's NCCL settings) and the context of C16.

C10 compares two tasks of one suite: the same sweep with the guide's four NCCL settings
("tuned") and with none ("default"). Launches pair by run and repetition; everything else
(parameters but the NCCL fields, recorded facts) must be equal, so tuned and default are
measured on the same hosts and the same groups. The claims, C10's settings and band are declared in
:mod:`~hpcbench.experiments.collectives.claims`.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pandas as pd

from hpcbench.core.facts import LINK_PEAKS_GBPS
from hpcbench.core.units import format_gbps
from hpcbench.experiments.collectives.claims import C10_APPLIES, C10_GAIN, GUIDE_C10_NCCL_SETTINGS
from hpcbench.guide.claims import Claim
from hpcbench.judge.evidence import CONTEXT, NO_VALUE, Evidence, Judgement
from hpcbench.judge.rulekit import Comparison, judge_comparisons
from hpcbench.judge.verdict import Reference

#: The collectives config fields that set NCCL variables (0 / "" leave them unset).
NCCL_SETTING_FIELDS = {"nccl_algo": "NCCL_ALGO", "nccl_buffsize": "NCCL_BUFFSIZE",
                       "nccl_nsocks_perthread": "NCCL_NSOCKS_PERTHREAD",
                       "nccl_socket_nthreads": "NCCL_SOCKET_NTHREADS"}


def _nccl_settings_of(params_json: str) -> dict[str, str]:
    """NCCL_* settings in a task's params: the collectives fields ``nccl_algo``, ``nccl_buffsize``...
    (0 or "" is unset), or NCCL_* keys anywhere (e.g. an ``nccl_env`` mapping)."""
    found: dict[str, str] = {}

    def walk(obj: Any) -> None:
        if isinstance(obj, Mapping):
            for key, value in obj.items():
                if isinstance(key, str) and key.startswith("NCCL_") and not isinstance(value, (Mapping, list)):
                    found[key] = str(value)
                else:
                    walk(value)
        elif isinstance(obj, list):
            for item in obj:
                walk(item)

    try:
        params = json.loads(params_json)
        walk(params)
    except (TypeError, ValueError):
        return found
    if isinstance(params, Mapping):
        for field, name in NCCL_SETTING_FIELDS.items():
            value = params.get(field)
            if value not in (None, "", 0, "0"):
                found[name] = str(value)
    return found


def settings_kind(params_json: str) -> str | None:
    """``tuned`` when a launch set all four of the guide's NCCL values, ``default`` when it set none."""
    settings = _nccl_settings_of(params_json)
    if all(settings.get(k) == v for k, v in GUIDE_C10_NCCL_SETTINGS.items()):
        return "tuned"
    if not any(k in settings for k in GUIDE_C10_NCCL_SETTINGS):
        return "default"
    return None


def rule_c10(claim: Claim, evidence: Evidence) -> Judgement:
    """C10: all_reduce busbw with the guide's NCCL settings over NCCL's defaults, matched launches."""
    s = evidence.summaries
    if len(s):
        evidence.summaries = s.assign(kind=[settings_kind(p) for p in s["params"]])

    def comparisons(launch: pd.Series) -> list[Comparison]:
        rows = evidence.summaries
        rows = rows[(rows["run_id"] == launch["run_id"]) & (rows["op"] == "all_reduce")]
        for group in ("inter_node", "world"):
            at = rows[rows["group"] == group]
            tuned = set(at[at["kind"] == "tuned"]["size_bytes"])
            default = set(at[at["kind"] == "default"]["size_bytes"])
            if tuned & default:
                size = max(tuned & default)
                return [Comparison(f"all_reduce {group} {size} B: tuned / default",
                                   {"kind": "tuned", "op": "all_reduce", "group": group, "size_bytes": size},
                                   {"kind": "default", "op": "all_reduce", "group": group, "size_bytes": size},
                                   Reference(C10_GAIN, lower=C10_GAIN, source="'recommended NCCL tuning'"),
                                   match=("run_id", "repetition"))]
        return []

    what = (f"Paired by run and repetition: median busbw of all_reduce at the largest size both measured, on the "
            f"inter-node groups (world if none), with the guide's four NCCL settings over NCCL's defaults; "
            f"reference: >= {C10_GAIN}x; applies only with NCCL.")
    return judge_comparisons(evidence, comparisons, applies=C10_APPLIES, what=what,
                             ignore_params=tuple(NCCL_SETTING_FIELDS))


def _largest(rows: pd.DataFrame) -> pd.Series | None:
    rows = rows[rows["busbw_p50_GBps"].notna()]
    if rows.empty:
        return None
    return rows.loc[rows["size_bytes"].idxmax()]


def rule_c16(claim: Claim, evidence: Evidence) -> Judgement:
    """C16 is the guide's setting, not a testable claim: what this cluster measured, beside it.

    Shown: the inter-node and intra-node busbw of all_reduce at the largest size (median over
    launches of the per-launch medians), their ratio (the guide's platform: NVLink ~300 GB/s per
    GPU vs 25 GB/s HDR per NIC), the recorded link, and the GPU / InfiniBand inventory.
    """
    s = evidence.summaries
    parts: list[str] = []
    if len(s):
        ar = s[s["op"] == "all_reduce"]
        found = {}
        for group in ("inter_node", "intra_node", "world"):
            per_launch = [_largest(g) for _, g in ar[ar["group"] == group].groupby(["run_id", "task_id"])]
            values = [float(r["busbw_p50_GBps"]) for r in per_launch if r is not None]
            if values:
                found[group] = float(pd.Series(values).median())
                parts.append(f"{group} all_reduce busbw at its largest size: {format_gbps(found[group])} "
                             f"(median of {len(values)} launch(es))")
        if "inter_node" in found and "intra_node" in found and found["inter_node"] > 0:
            parts.append(f"intra/inter-node busbw ratio {found['intra_node'] / found['inter_node']:.1f}:1 "
                         f"(the guide's platform: NVLink {LINK_PEAKS_GBPS['NVLink 3 (A100, per GPU)']:.0f} GB/s "
                         f"per GPU vs HDR {LINK_PEAKS_GBPS['HDR InfiniBand (200 Gb/s)']:.0f} GB/s per NIC)")
    links = evidence.launches.get("link_rate_bps") if len(evidence.launches) else None
    if links is not None and links.notna().any():
        parts.append(f"shaped inter-node link: {', '.join(sorted({f'{v / 1e6:g} Mbit/s' for v in links.dropna()}))}")
    inventory = environment_inventory(evidence.records)
    if inventory:
        parts.append(f"inventory: {inventory}")
    layouts = topologies_measured(evidence.records)
    if layouts:
        parts.append(f"topology measured here: {layouts}")
    return Judgement(CONTEXT, "; ".join(parts) or NO_VALUE,
                     "A setting, not a testable claim, so no verdict: what this cluster measured, set beside "
                     "the guide's platform." + evidence.excluded_note())


RULES = {"C10": rule_c10, "C16": rule_c16}


def environment_inventory(records: pd.DataFrame, prefixes: tuple[str, ...] = ("gpu.", "infiniband."),
                          limit: int = 12) -> str:
    """The ``environment`` facts whose metric starts with one of ``prefixes``, as text.

    Environment rows carry either a number with a unit or a text (value NaN); both
    are read. A fact recorded on several nodes is shown once, from the first node.
    """
    if records.empty:
        return ""
    env = records[records["experiment"] == "environment"]
    env = env[env["metric"].str.startswith(prefixes)]
    if env.empty:
        return ""
    facts: dict[str, str] = {}
    for row in env.sort_values(["node", "metric"]).itertuples(index=False):
        if row.metric in facts:
            continue
        if isinstance(row.text, str) and row.text:
            facts[row.metric] = row.text
        elif row.value is not None and not pd.isna(row.value):
            facts[row.metric] = f"{row.value:g} {row.unit}".strip()
    items = [f"{metric} = {text}" for metric, text in facts.items()]
    more = f"; +{len(items) - limit} more" if len(items) > limit else ""
    nodes = env["node"].nunique()
    where = f" (first of {nodes} nodes)" if nodes > 1 else ""
    return "; ".join(items[:limit]) + more + where


def topologies_measured(records: pd.DataFrame) -> str:
    """The node x rank layouts of the multi-rank tasks in ``records``, and whether they were emulated."""
    if records.empty:
        return ""
    found: set[str] = set()
    for params, nodes in records.groupby("params")["node"]:
        try:
            p = json.loads(params)
        except (TypeError, ValueError):
            continue
        if not isinstance(p, Mapping) or "nodes" not in p or "ranks_per_node" not in p:
            continue
        emulated = any("/node" in str(n) for n in nodes.unique())
        how = "emulated on one machine" if emulated else f"{nodes.nunique()} host(s)"
        found.add(f"{p['nodes']} node(s) x {p['ranks_per_node']} rank(s) ({how})")
    return ", ".join(sorted(found))
