"""One ``collectives`` launch's records -> its summary, the NCCL settings note and the sanity check."""

from __future__ import annotations

import json

import pandas as pd

from hpcbench.core.results import expand_labels
from hpcbench.core.sanity import Verification
from hpcbench.dist.topology import Topology
from hpcbench.experiments.collectives.config import NCCL_GLOO_REASON, CollectivesConfig

SUMMARY_KEYS = ["op", "group", "size_bytes"]


def summarize(records):
    """Per (op, group, size): busbw p50 and mean, algbw p50, time p50/p99 over iterations.

    Samples of every group of a kind (e.g. both intra-node groups) are pooled;
    ``groups_measured`` says how many there were. ``samples`` holds the per-iteration
    busbw (the rules' input); ``ok`` is False when any result check of the series failed.
    """
    rows = records[(records["experiment"] == "collectives") & records["value"].notna()]
    rows = rows[rows["metric"].isin(["time", "algbw", "busbw", "correct"])]
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_KEYS + ["busbw_p50_GBps"])
    wide = expand_labels(rows)
    out = []
    for key, g in wide.groupby(SUMMARY_KEYS, sort=True):
        t = g[g["metric"] == "time"]["value"]
        checks = g[g["metric"] == "correct"]["value"]
        ok = bool((checks >= 1).all())
        out.append({
            **dict(zip(SUMMARY_KEYS, key)),
            "group_ranks": int(g["group_ranks"].iloc[0]),
            "groups_measured": g["group_index"].nunique(),
            "busbw_p50_GBps": g[g["metric"] == "busbw"]["value"].median(),
            "busbw_mean_GBps": g[g["metric"] == "busbw"]["value"].mean(),
            "algbw_p50_GBps": g[g["metric"] == "algbw"]["value"].median(),
            "time_p50_us": t.quantile(0.5) * 1e6,
            "time_p99_us": t.quantile(0.99) * 1e6,
            "iterations": len(t),
            "samples": tuple(float(v) for v in g[g["metric"] == "busbw"]["value"]),
            "ok": ok,
            "problem": "" if ok else f"{key[0]} on {key[1]} at {key[2]} B returned wrong values",
        })
    return pd.DataFrame(out)


def nccl_settings_note(records, cfg: CollectivesConfig) -> str:
    """What this run's NCCL settings did: applied (NCCL), not applicable (gloo), or none set (C10)."""
    settings = cfg.nccl_settings()
    if not settings:
        return "No NCCL_* setting was set: NCCL (if used) chose its own algorithm and buffer sizes."
    listed = ", ".join(f"{k}={v}" for k, v in settings.items())
    coll = records[records["experiment"] == "collectives"]
    if (coll["metric"] == "nccl_settings").any():
        return (f"{listed}: {NCCL_GLOO_REASON}. On GPUs (backend nccl) this run would measure busbw with these "
                f"settings; the claims ledger's C10 rule compares it with the same sweep under NCCL's defaults "
                f"at the largest all_reduce size on the inter-node groups.")
    seen = coll[coll["metric"] == "nccl_setting"]
    shown = ", ".join(f"{json.loads(lab)['name']}={t}" for lab, t in zip(seen["labels"], seen["text"]))
    return f"Applied through the workers' environment before NCCL started: {shown or listed}."


_PASSED = "every op returned the expected values and every requested group and size was measured"


def verify_records(records, cfg: CollectivesConfig) -> Verification:
    """Check correctness flags and coverage of a run against its config."""
    problems = []
    coll = records[records["experiment"] == "collectives"]
    wide = expand_labels(coll) if not coll.empty else coll
    checks = wide[wide["metric"] == "correct"] if not coll.empty else wide
    for _, row in checks[checks["value"] != 1.0].iterrows():
        problems.append(f"{row['op']} on {row['group']} (group {row['group_index']}) at {row['size_bytes']} B "
                        "returned wrong values")
    if cfg.check and checks.empty:
        problems.append("no correctness checks were recorded")
    measured = set()
    if not coll.empty:
        timed = wide[wide["metric"] == "busbw"]
        measured = {(r.op, r.group) for r in timed.itertuples()}
    topo = Topology(nodes=cfg.nodes, ranks_per_node=cfg.ranks_per_node)
    for kind in cfg.groups:
        if len(topo.groups(kind)[0]) < 2:
            continue  # recorded as not applicable
        for op_name in cfg.ops:
            if (op_name, kind) not in measured:
                problems.append(f"{op_name} on {kind} groups was not measured")
    return Verification(problems, passed=_PASSED)
