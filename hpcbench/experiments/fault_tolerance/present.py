"""The report section of ``fault_tolerance``."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from hpcbench.experiments.fault_tolerance.claims import C11_OVERHEAD_PCT, GUIDE_C11_LIGHT_EVERY_S, affordable_save_s
from hpcbench.experiments.fault_tolerance.plot import draw_survival
from hpcbench.judge.verdict import clopper_pearson
from hpcbench.present.kit import (Cell, ExperimentData, Figure, Section, Table, check_note, evidence_tables, fmt_number,
                                  image_of, pick, present_stats, source_variants, text_table)

TIER_ORDER = {"full": 0, "light": 1}


def attempt_table(stats: pd.DataFrame, pairs: list[tuple[str, str]]) -> Table | None:
    """The wrapper arm's failed share of tries by attempt (1st, 2nd, 3rd), exact intervals: context for the
    p_try^3 model, which takes every try as failing alike (records of older hpcbench versions lack it: None)."""
    per = pick(stats[stats["phase"] == "attempts"], "attempt_failed")
    if not len(per) or "attempt" not in per.columns:
        return None
    rows = []
    for s, v in pairs:
        mine = per[(per["source"] == s) & (per["variant"] == v)]
        for attempt, g in sorted(mine.groupby(mine["attempt"].astype(float).astype(int)), key=lambda kv: kv[0]):
            n = int(g["n"].sum())
            k = round(float((g["mean"] * g["n"]).sum()))
            low, high = clopper_pearson(k, n)
            rows.append([Cell(f"{s} · {v}"), Cell(str(attempt)), Cell(str(n)),
                         Cell(f"{fmt_number(k / n, 3)} [{fmt_number(low, 3)}, {fmt_number(high, 3)}]")])
    if not rows:
        return None
    return Table(columns=["series", "attempt", "tries", "failed share [95 % exact]"], rows=rows,
                 id="fault-tolerance-attempts",
                 caption="the wrapper arm's tries by attempt: p_try^3 takes a retry (on repaired data, after a kill) "
                         "to fail as often as a first try; this table is what to read when the measured share of "
                         "failed jobs departs from it (context, not a verdict; all repetitions pooled)")


def _value(frame: pd.DataFrame, src: str, var: str, column: str = "p50", **where: Any) -> float:
    sel = frame[(frame["source"] == src) & (frame["variant"] == var)]
    for key, val in where.items():
        sel = sel[sel[key] == val] if key in sel.columns else sel.iloc[0:0]
    return float(sel[column].iloc[0]) if len(sel) else math.nan


def _ms(seconds: float) -> str:
    return fmt_number(seconds * 1e3, 3)


def present_fault_tolerance(data: ExperimentData) -> list[Section]:
    """Checkpoint size and time per tier, compression by level, stall, recovery, work lost, survival."""
    stats = data.stats
    if not len(stats) or "phase" not in stats.columns:
        return present_stats(data)
    section = Section(title="Fault tolerance: checkpoints and the job wrapper", id="exp-fault-tolerance")
    pairs = source_variants(stats, data.sources)
    groups = lambda n: [(f"{s} · {v}", n) for s, v in pairs]  # noqa: E731 - one header row per table
    save = stats[stats["phase"] == "save"]
    keys = sorted({(r.model, r.dtype, r.tier) for r in save.itertuples()},
                  key=lambda k: (k[0], k[1], TIER_ORDER.get(k[2], 9)))
    rows = []
    for model, dtype, tier in keys:
        at = dict(model=model, dtype=dtype, tier=tier)
        row = [Cell(model), Cell(dtype), Cell(tier)]
        for s, v in pairs:
            parts = [_value(pick(save, m), s, v, **at) for m in ("serialize_seconds", "compress_seconds",
                                                                "write_seconds")]
            row += [Cell(fmt_number(_value(pick(save, "bytes_raw"), s, v, **at) / 1e6, 4)),
                    Cell(fmt_number(_value(pick(save, "bytes_written"), s, v, **at) / 1e6, 4)),
                    Cell(fmt_number(_value(pick(save, "compression_ratio"), s, v, **at), 4)),
                    Cell(fmt_number(_value(pick(save, "save_seconds"), s, v, **at), 3)),
                    Cell(" / ".join(fmt_number(x, 2) for x in parts)),
                    Cell(fmt_number(_value(pick(save, "overhead_share"), s, v, **at), 3))]
        rows.append(row)
    section.tables.append(Table(
        columns=["model", "dtype", "tier"] + [c for _ in pairs for c in (
            "MB raw", "MB written", "raw / written", "save p50 (s)", "serialize / zstd / write p50 (s)",
            "overhead at interval (%)")],
        rows=rows, groups=[("checkpoint", 3)] + groups(6), id="fault-tolerance-tiers",
        caption="one synchronous save per row's tier (light: model + optimizer + progress; full: also RNG of every "
                "rank, scheduler, scaler), zstd at the run's level; overhead = save / (interval + save) at the "
                "guide's interval (light 600 s, full 3600 s)"))

    comp = stats[stats["phase"] == "compression"]
    if len(comp):
        keys = sorted({(r.model, r.dtype, int(r.level)) for r in comp.itertuples() if pd.notna(r.level)})
        rows = []
        for model, dtype, level in keys:
            at = dict(model=model, dtype=dtype, level=level)
            row = [Cell(model), Cell(dtype), Cell("raw" if level == 0 else str(level))]
            for s, v in pairs:
                raw = _value(pick(comp, "bytes_raw"), s, v, **at)
                secs = _value(pick(comp, "compress_seconds"), s, v, **at)
                row += [Cell(fmt_number(_value(pick(comp, "compression_ratio"), s, v, **at), 4)),
                        Cell(fmt_number(raw / secs / 1e6 if secs > 0 else math.nan, 3))]
            rows.append(row)
        section.tables.append(Table(columns=["model", "dtype", "zstd level"] + [c for _ in pairs for c in
                                                                                 ("raw / compressed", "MB/s")],
                                    rows=rows, groups=[("weights", 3)] + groups(2), id="fault-tolerance-levels",
                                    caption="the model's weights (state_dict) serialized, then compressed by zstd "
                                            "at each level: ratio and compression speed (p50 over repeats)"))

    stall = pick(stats[stats["phase"] == "stall"], "stall_seconds")
    slowdown = pick(stats[stats["phase"] == "stall"], "overlap_slowdown_seconds")
    if len(stall):
        keys = sorted({(r.model, r.dtype) for r in stall.itertuples()})
        rows = []
        for model, dtype in keys:
            row = [Cell(model), Cell(dtype)]
            for s, v in pairs:
                sync = _value(stall, s, v, model=model, dtype=dtype, mode="sync")
                asyn = _value(stall, s, v, model=model, dtype=dtype, mode="async")
                row += [Cell(_ms(sync)), Cell(_ms(asyn)), Cell(fmt_number(asyn / sync * 100, 3)),
                        Cell(_ms(_value(slowdown, s, v, model=model, dtype=dtype, mode="async")))]
            rows.append(row)
        section.tables.append(Table(columns=["model", "dtype"] + [c for _ in pairs for c in (
            "sync stall p50 (ms)", "async stall p50 (ms)", "async / sync (%)", "overlapped steps slower by (ms)")],
            rows=rows, groups=[("light save", 2)] + groups(4), id="fault-tolerance-stall",
            caption="time the training loop waits per light save: the whole save when synchronous; the snapshot "
                    "(and any wait for the previous write) when asynchronous; last column: how much longer the "
                    "steps that ran during the background write took than the median step (cores shared with "
                    "zstd and the write)"))

    rec = stats[stats["phase"].isin(["recovery", "failure"])]
    if len(rec):
        rows = []
        recovery = pick(rec, "recovery_seconds", phase="recovery")
        for model, dtype, tier in sorted({(r.model, r.dtype, r.tier) for r in recovery.itertuples()}):
            row = [Cell(model), Cell(dtype), Cell(f"recover newest valid {tier}")]
            for s, v in pairs:
                row += [Cell(fmt_number(_value(recovery, s, v, model=model, dtype=dtype, tier=tier), 3) + " s")]
            rows.append(row)
        lost = pick(rec, "work_lost_share")
        newest = pick(rec, "restored_newest")
        for model, dtype in sorted({(r.model, r.dtype) for r in lost.itertuples()}):
            row = [Cell(model), Cell(dtype), Cell("work lost per failure, share of the light cadence")]
            for s, v in pairs:
                mean = _value(lost, s, v, "mean", model=model, dtype=dtype)
                top = _value(lost, s, v, "max", model=model, dtype=dtype)
                n = _value(newest, s, v, "n", model=model, dtype=dtype)
                ok = _value(newest, s, v, "mean", model=model, dtype=dtype) * n
                row += [Cell(f"mean {fmt_number(mean, 3)}, max {fmt_number(top, 3)} (x 600 s: mean "
                             f"{fmt_number(mean * 600, 3)} s); restored the newest checkpoint in "
                             f"{fmt_number(ok, 3)} of {fmt_number(n, 3)}")]
            rows.append(row)
        section.tables.append(Table(columns=["model", "dtype", "what"] + [f"{s} · {v}" for s, v in pairs], rows=rows,
                                    id="fault-tolerance-recovery",
                                    caption="recovery = find the newest valid checkpoint + load + restore (p50); work "
                                            "lost = wall time from a failure injected at a drawn moment (exponential, "
                                            "independent of the cadence) until the resumed training is back where it "
                                            "was, restore included, over the scaled-down light cadence; x 600 s "
                                            "maps it to the guide's interval"))

    over = pick(stats[stats["phase"] == "overhead"], "save_stall_seconds")
    if len(over):
        share = pick(stats[stats["phase"] == "overhead"], "overhead_share")
        written = pick(stats[stats["phase"] == "overhead"], "bytes_written")
        rows = []
        for model, dtype in sorted({(r.model, r.dtype) for r in over.itertuples()}):
            row = [Cell(model), Cell(dtype)]
            for s, v in pairs:
                stall = _value(over, s, v, model=model, dtype=dtype)
                mb = _value(written, s, v, model=model, dtype=dtype) / 1e6 if len(written) else math.nan
                row += [Cell(fmt_number(stall, 3)), Cell(fmt_number(_value(share, s, v, model=model, dtype=dtype), 3)),
                        Cell(fmt_number(mb, 4)), Cell(fmt_number(mb / stall if stall > 0 else math.nan, 3)),
                        Cell(fmt_number(mb / affordable_save_s(GUIDE_C11_LIGHT_EVERY_S), 3))]
            rows.append(row)
        section.tables.append(Table(columns=["model", "dtype"] + [c for _ in pairs for c in (
            "light save stall p50 (s)", "share of a 600 s interval (%)", "MB written", "MB/s through the save",
            f"MB/s for {C11_OVERHEAD_PCT:g} %")], rows=rows,
            groups=[("training loop", 2)] + groups(5), id="fault-tolerance-overhead",
            caption="how long a synchronous light save stops the training loop of overhead_model (serialize + zstd + "
                    "write + fsyncs), and its share of the wall time at the guide's 10-minute cadence; the rate the "
                    "save moved its compressed bytes at, against the rate at which it would cost C11's bound. The "
                    "storage decides much of it: a save writes a new file into fresh blocks, which a thin-provisioned "
                    "virtual disk allocates far slower than it rewrites blocks it holds"))

    surv = stats[stats["phase"] == "survival"]
    failed = pick(surv, "job_failed")
    if len(failed):
        rows, points = [], []
        tried = pick(surv, "try_failed")
        repaired = pick(stats[stats["phase"] == "repair"], "shard_repaired")
        unjudged = pick(stats[stats["phase"] == "repair"], "repair_unjudged")
        for s, v in pairs:
            arms = failed[(failed["source"] == s) & (failed["variant"] == v)]
            tries_here = tried[(tried["source"] == s) & (tried["variant"] == v)]
            made = float(tries_here["n"].sum())
            p_try = float((tries_here["mean"] * tries_here["n"]).sum() / made) if made else math.nan
            fixed = repaired[(repaired["source"] == s) & (repaired["variant"] == v)]
            fix_text = (f"{fmt_number(float(fixed['mean'].iloc[0]) * int(fixed['n'].iloc[0]), 3)} of "
                        f"{int(fixed['n'].iloc[0])}" if len(fixed) else "—")
            left = unjudged[(unjudged["source"] == s) & (unjudged["variant"] == v)]
            if len(left):  # checks a flip across a try's end left undecidable, counted neither way
                fix_text += f" ({int(left['n'].sum())} not judged: flipped across a try's end)"
            for r in sorted(arms.itertuples(), key=lambda r: -int(r.tries)):
                jobs, share = int(r.n), float(r.mean)
                k = round(share * jobs)
                low, high = clopper_pearson(k, jobs)
                predicted = p_try ** int(r.tries)
                arm = f"{r.mode} ({int(r.tries)} {'tries' if int(r.tries) > 1 else 'try'})"
                interval = f"{fmt_number(share, 3)} [{fmt_number(low, 3)}, {fmt_number(high, 3)}]"
                rows.append([Cell(f"{s} · {v}"), Cell(arm), Cell(str(jobs)), Cell(interval),
                             Cell(fmt_number(p_try, 3)), Cell(fmt_number(predicted, 3)),
                             Cell(fmt_number(share / predicted, 3) if predicted else "—"),
                             Cell(fix_text if int(r.tries) > 1 else "")])
                points.append((f"{s} · {v} · {r.mode}", p_try, int(r.tries), k, jobs))
        section.tables.append(Table(columns=["series", "arm", "jobs", "failed share [95 % exact]", "p_try (measured)",
                                             "model p_try^tries", "measured / model", "damaged shards repaired"],
                                    rows=rows, id="fault-tolerance-survival",
                                    caption="the same jobs run through slurm/run_with_retries.sh with 3 tries and with "
                                            "1, under one independent injector (SIGKILL of the running try, or a "
                                            "flipped byte in a data shard, at exponential times); p_try = failed tries "
                                            "/ tries of both arms; all repetitions pooled"))
        attempts = attempt_table(stats, pairs)
        if attempts is not None:
            section.tables.append(attempts)
        from matplotlib.figure import Figure as MplFigure

        fig = MplFigure(figsize=(5.5, 3.6))
        ax = fig.subplots()
        draw_survival(ax, points)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        section.figures.append(Figure(title="job wrapper: failed share of jobs against p_try^tries",
                                      data=image_of(fig), alt="points of measured failure share on p^t lines"))
    checks = stats[stats["metric"].isin(["restore_equal", "checkpoint_named", "torn_checkpoint_skipped"])]
    check_note(section, checks, fail="a correctness check failed: a restored state differed, a name lacked host or "
                                     "job id, or a torn checkpoint was not skipped (those launches do not count)",
               ok="every restored state equalled the saved one; names carry host and job id; torn checkpoints skipped")
    table = text_table(data.text, caption="Facts and values not measured")
    if table is not None:
        section.tables.append(table)
    section.tables += evidence_tables(data, ["phase", "model", "dtype", "tier", "mode", "level", "ratio",
                                             "save_p50_s", "overhead_share_p50", "stall_p50_s", "recovery_p50_s",
                                             "work_lost_mean_s", "work_lost_share_mean", "failure_fraction", "p_try",
                                             "n"])
    return [section]
