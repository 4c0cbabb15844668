"""One ``io_formats`` launch's records -> its summary and the sanity check."""

from __future__ import annotations

import json
import math

import pandas as pd

from hpcbench.core.results import expand_labels


def _expand(records: pd.DataFrame) -> pd.DataFrame:
    rows = expand_labels(records[records["experiment"] == "io_formats"])
    for key in ("format", "workers", "prefetch_factor", "buffer_samples", "phase"):
        if key not in rows.columns:
            rows[key] = None
    return rows


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (phase, format, workers, prefetch_factor): means over epochs, latency percentiles.

    ``samples`` holds the per-step (per-batch) samples/s and ``idle_samples`` the per-step
    accelerator idle share, the rules' inputs; ``ok`` is False when an epoch of the
    series did not deliver every sample exactly once (such a series never counts).
    """
    rows = _expand(records)
    rows = rows[rows["phase"].isin(["sweep", "staged"]) & rows["value"].notna()]
    keys = ["phase", "format", "workers", "prefetch_factor", "buffer_samples"]
    out = []
    for key, g in rows.groupby(keys, sort=False):
        def mean(metric: str) -> float:
            v = g.loc[g["metric"] == metric, "value"]
            return float(v.mean()) if len(v) else math.nan
        lat = g.loc[g["metric"] == "read_latency", "value"]
        exact = g.loc[g["metric"] == "exactly_once", "value"]
        ok = bool((exact >= 1).all())
        out.append({**dict(zip(keys, key)), "samples_per_s": mean("samples_per_s"), "MB_per_s": mean("mb_per_s"),
                    "read_p50_ms": float(lat.quantile(0.5) * 1e3) if len(lat) else math.nan,
                    "read_p99_ms": float(lat.quantile(0.99) * 1e3) if len(lat) else math.nan,
                    "opens_per_epoch": mean("file_opens"), "accel_util": mean("accelerator_util"),
                    "accel_idle": mean("accelerator_idle"), "page_cache_resident": mean("page_cache_resident"),
                    "exactly_once": mean("exactly_once"),
                    "steps": int((g["metric"] == "step_samples_per_s").sum()),
                    "samples": tuple(float(v) for v in g.loc[g["metric"] == "step_samples_per_s", "value"]),
                    "idle_samples": tuple(float(v) for v in g.loc[g["metric"] == "step_idle", "value"]),
                    "ok": ok, "problem": "" if ok else f"{key[1]}: an epoch lost or repeated samples"})
    return pd.DataFrame(out)


def verify_records(records: pd.DataFrame) -> str:
    """PASS/FAIL lines: exact coverage in every epoch, eviction, repairs accounted for."""
    rows = _expand(records)
    lines = []
    exact = rows[rows["metric"] == "exactly_once"]
    bad = exact[exact["value"] < 1]
    lines.append(("PASS" if len(exact) and bad.empty else "FAIL")
                 + f": {len(exact) - len(bad)} of {len(exact)} epochs delivered every sample exactly once")
    evict = rows[rows["metric"] == "page_cache_resident"]
    if evict["value"].notna().any():
        from hpcbench.data.page_cache import RESIDENT_LIMIT

        kept = evict[evict["value"] > RESIDENT_LIMIT]
        lines.append(("PASS" if kept.empty else "WARN") + f": page cache evicted before {len(evict) - len(kept)} "
                     f"of {len(evict)} measured epochs (<= {RESIDENT_LIMIT:.0%} of pages resident)")
    else:
        lines.append("INFO: warm page cache (cold_cache off)")
    res = rows[(rows["phase"] == "resilience")]
    if len(res):
        repairs = res.loc[res["metric"] == "repairs", "value"].sum()
        corrupted = max((json.loads(s).get("corrupted_shards", 0) for s in res["labels"]), default=0)
        lost = res.loc[res["metric"] == "lost_samples", "value"].sum()
        ok = repairs >= corrupted and lost == 0
        lines.append(("PASS" if ok else "FAIL") + f": {corrupted} corrupted shard(s), {int(repairs)} repair(s), "
                     f"{int(lost)} samples lost")
    return "\n".join(lines)
