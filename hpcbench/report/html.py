"""Build the one-file HTML report of one or more run directories.

``build_report`` checks the run directories, starts (or joins) a dask cluster,
aggregates the records there (:mod:`hpcbench.report.aggregate`), evaluates the
claims ledger per source, asks each experiment's presenter for its sections and
renders ``template.html`` with jinja2 (autoescape on: every string that comes from
a config, a record, a status file or a notebook is escaped; nothing is marked safe).
Plots are inline base64 PNGs and the CSS is inline, so ``index.html`` is self-contained;
files of the run the page links (notebooks, traces) are copied into the folder's ``files/``
and linked relatively (:class:`hpcbench.report.report_folder.LinkedFiles`), so the folder is.
The folder is written aside and swapped in whole (:mod:`hpcbench.report.report_folder`).

Everything the report writes (the page, ``report.json``, the copies in ``files/``) goes through one
:class:`~hpcbench.report.redact.Redactor` last, so that no path or name of the machine reaches a
published page; the run directories stay as they are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import pandas as pd

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.results import COLUMNS, empty_frame
from hpcbench.practice.gate_table import gate_table
from hpcbench.present.kit import (Cell, ExperimentData, Section, Table, file_link, present_stats, rank_binding_table,
                                  slug, split_binding_rows)
from hpcbench.report.aggregate import Aggregate, Source, aggregate, check_sources, load_sources, print_warning
from hpcbench.report.ledger_page import ledger_section
from hpcbench.report.redact import Redactor
from hpcbench.report.report_folder import FILES_SUBDIR, LinkedFiles, dask_slurm_log_dir, replacing_report_folder
from hpcbench.report.report_json import UnreadableInputs, ledger_record, report_manifest, write_report_manifest
from hpcbench.report.templates import page_template

if TYPE_CHECKING:
    from hpcbench.report.dask_slurm import DaskSlurmConfig

def build_report(run_dirs: Sequence[str | Path], out_dir: str | Path, *, scheduler: str | None = None,
                 dask_slurm: DaskSlurmConfig | None = None, files_per_partition: int = 25,
                 title: str | None = None, progress: Callable[[str], None] = print,
                 warn: Callable[[str], None] = print_warning, traces: bool = False,
                 allow_unreadable: bool = True) -> Path:
    """Write ``out_dir/index.html``, the report of ``run_dirs`` side by side.

    The report is written into a hidden sibling of ``out_dir`` and swapped in whole at the
    end (:mod:`hpcbench.report.report_folder`): a failure or an interrupt leaves the
    previous report as it was.

    Args:
        run_dirs: run directories; each is one source (labelled by its run id, or its name).
            One given twice (``R`` and ``./R/``) is read once, with a warning.
        out_dir: where ``index.html`` goes, with ``report.json``, the report's metadata as
            data (title, runs, verdict counts) for ``hpcbench publish``. A new folder, an
            empty one, or an earlier report (one with a ``report.json``), which is replaced.
        scheduler: address of a running dask scheduler to use; None starts a local
            cluster for the duration of the call.
        dask_slurm: start the dask workers as SLURM jobs instead (dask-jobqueue; see
            :mod:`hpcbench.report.dask_slurm`); their logs go beside ``out_dir``, never into it
            (:func:`~hpcbench.report.report_folder.dask_slurm_log_dir`), unless its
            ``log_directory`` says otherwise.
        files_per_partition: records files read by one dask task.
        title: the page title (default: names the sources).
        progress: receives short progress lines.
        warn: receives warnings (a run dir given twice, one whose tasks have no records
            yet); default: printed to stderr.
        traces: copy the ranks' profiler traces into the report too (a few MiB each); by
            default their cells say how to include them. A failed task's notebook is always copied.
        allow_unreadable: write the report although some inputs could not be read (a corrupt,
            truncated or foreign records file, an unreadable ``status.json``); they are named through
            ``warn`` either way, listed on the page and in ``report.json`` (which ``hpcbench publish``
            then refuses unless told otherwise). False: raise :class:`UnreadableInputs` instead, and
            leave ``out_dir`` as it was (``hpcbench report`` without ``--allow-unreadable``).

    Returns:
        The path of ``index.html``.

    Raises:
        HpcbenchError: before any cluster is started, naming the path: a run directory is
            missing, is not a directory, or has no task and no records (an empty folder);
            ``out_dir`` is a file or a non-empty folder that is not an earlier report.
            Later: the scheduler cannot be reached, or the SLURM workers do not start
            (naming their jobs and logs).
        UnreadableInputs: some inputs could not be read and ``allow_unreadable`` is false.
    """
    sources = load_sources(run_dirs, warn=warn)
    check_sources(sources, warn=warn)
    if files_per_partition < 1:
        raise HpcbenchError(f"files_per_partition must be >= 1, got {files_per_partition}")
    out = Path(out_dir)
    claims = _claims_api()
    raw_experiments = _raw_experiments()
    with replacing_report_folder(out, warn) as building:
        if dask_slurm is not None and not dask_slurm.log_directory:
            dask_slurm = dataclasses.replace(dask_slurm, log_directory=str(dask_slurm_log_dir(out)))
        with _dask_client(scheduler, dask_slurm, progress) as client:
            agg = aggregate(sources, client, files_per_partition, raw_experiments=raw_experiments,
                            progress=progress)
        unreadable = unreadable_inputs(agg)
        for entry in unreadable:
            warn(f"unreadable input: {entry['shown']} ({entry['reason']})")
        if unreadable and not allow_unreadable:
            raise UnreadableInputs(f"{len(unreadable)} input(s) unreadable (named above), so the report was not "
                                   f"written and {out} is unchanged; write it anyway, listing them, with "
                                   "--allow-unreadable")
        # Resolved here so that the page and report.json carry the same title.
        title = title or "hpcbench report: " + ", ".join(agg.labels)
        ledger = evaluate_ledger(agg, claims)
        redactor = Redactor.for_report([s.run_dir for s in agg.sources])
        files = LinkedFiles(building, {s.label: s.run_dir for s in agg.sources}, traces=traces,
                            redact=redactor.file_bytes, local_links=False)
        html = render(agg, claims=claims, title=title, ledger=ledger, files=files)
        if files.copies:
            progress(f"report: copied {len(files.copies)} linked file(s), {files.copied_bytes / (1 << 20):.1f} MiB, "
                     f"into {out / FILES_SUBDIR}")
        _warn_not_copied(files, warn)
        progress(f"report: writing {out / 'index.html'}")
        (building / "index.html").write_text(redactor.html(html), encoding="utf-8")
        manifest = report_manifest(title, agg.sources, _verdicts_by_source(agg, ledger),
                                   ledger=_ledger_records(agg, ledger),
                                   unreadable=[{k: e[k] for k in ("run", "path", "reason")} for e in unreadable])
        write_report_manifest(building, redactor.data(manifest))
    return out / "index.html"


def unreadable_inputs(agg: Aggregate) -> list[dict[str, str]]:
    """Each unreadable input: its ``run`` (source label), ``path`` relative to that run's directory,
    ``reason``, and ``shown``: the path for the terminal, relative to the current directory where it lies
    below it, else to the run directory's parent."""
    out = []
    for u in agg.unreadable:
        absolute = os.path.abspath(u.path)
        source = next((s for s in agg.sources if Path(absolute).is_relative_to(os.path.abspath(s.run_dir))), None)
        if source is None:
            out.append({"run": "", "path": Path(absolute).name, "reason": u.reason, "shown": u.path})
            continue
        relative = os.path.relpath(absolute, os.path.abspath(source.run_dir))
        here = os.path.relpath(absolute)
        shown = here if not here.startswith("..") else os.path.join(Path(os.path.abspath(source.run_dir)).name,
                                                                    relative)
        out.append({"run": source.label, "path": Path(relative).as_posix(), "reason": u.reason, "shown": shown})
    return out


def _warn_not_copied(files: LinkedFiles, warn: Callable[[str], None]) -> None:
    """One warning for the linked files left out of the report folder: the page names them without a link."""
    if not files.not_copied:
        return
    first, reason = next(iter(files.not_copied.items()))
    more = f" and {len(files.not_copied) - 1} more" if len(files.not_copied) > 1 else ""
    warn(f"{len(files.not_copied)} linked file(s) not copied into the report, the page names them without a "
         f"link: {first} ({reason}){more}")


def evaluate_ledger(agg: Aggregate, claims: _Claims) -> dict[str, list | Exception]:
    """Each source's ledger rows, evaluated once for the page and for report.json;
    an exception where evaluating failed (the ledger section shows it)."""
    if claims.evaluate is None:  # the claims module is unavailable: no rows, not zeros
        return {}
    out: dict[str, list | Exception] = {}
    for label in agg.labels:
        try:
            out[label] = _evaluate_source(agg, claims, label)
        except Exception as exc:  # noqa: BLE001 - the report shows the failure and goes on
            out[label] = exc
    return out


def _verdicts_by_source(agg: Aggregate, ledger: dict[str, list | Exception]) -> dict[str, dict[str, str] | None]:
    """Each source's verdict per claim id, for report.json; None where evaluating failed."""
    return {label: ({str(r.claim_id): str(r.verdict) for r in rows} if isinstance(rows := ledger.get(label), list)
                    else None) for label in agg.labels}


def _ledger_records(agg: Aggregate, ledger: dict[str, list | Exception]) -> list[dict[str, Any]]:
    """The ledger as data for report.json: each evaluated source's rows, labelled with the source, with
    their deciding comparison and their launches' platform (:func:`~hpcbench.report.report_json.ledger_record`)."""
    return [ledger_record(label, row, agg.records_by_source.get(label)) for label in agg.labels
            if isinstance(rows := ledger.get(label), list) for row in rows]


@contextlib.contextmanager
def _dask_client(scheduler: str | None, dask_slurm: DaskSlurmConfig | None = None,
                 progress: Callable[[str], None] = print) -> Iterator[Any]:
    from distributed import Client, LocalCluster

    if scheduler and dask_slurm is not None:
        raise HpcbenchError("--scheduler and --dask-slurm exclude each other: pick one dask cluster")
    if dask_slurm is not None:
        from hpcbench.report.dask_slurm import slurm_dask_client

        with slurm_dask_client(dask_slurm, progress=progress) as client:
            yield client
        return
    if scheduler:
        try:
            client = Client(scheduler, timeout="20s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise HpcbenchError(f"cannot reach the dask scheduler {scheduler}: {exc}") from None
        try:
            yield client
        finally:
            client.close()
        return
    # Threads in this process: starts in ~0.1 s, needs no __main__ guard in the
    # caller and no pickling; reading Parquet releases the GIL, so 2 workers overlap.
    with warnings.catch_warnings():
        # The scheduler's HTTP server falls back to a free port when 8787 is taken.
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)
    with cluster, Client(cluster, set_as_default=False) as client:
        yield client


# -- the claims ledger -----------------------------------------------------------

class _Claims:
    def __init__(self, evaluate: Callable[..., list] | None, verdicts: Sequence[str], problem: str | None):
        self.evaluate = evaluate
        self.verdicts = tuple(verdicts)
        self.problem = problem


def _claims_api() -> _Claims:
    try:
        from hpcbench.report.ledger import VERDICTS, evaluate_claims
    except ImportError as exc:
        if getattr(exc, "name", None) not in (None, "hpcbench.report.ledger"):
            raise  # a dependency of the ledger is missing: that is a bug to see
        return _Claims(None, (), f"the claims ledger is not available ({exc})")
    return _Claims(evaluate_claims, VERDICTS, None)


def _evaluate_source(agg: Aggregate, claims: _Claims, label: str) -> list:
    """The ledger rows of one source, from its raw records and the summaries the workers computed."""
    records = agg.records_by_source.get(label)
    return claims.evaluate(empty_frame() if records is None else records[COLUMNS],
                           summaries=agg.summaries_by_source.get(label))


def _raw_experiments() -> list[str]:
    """Experiments whose raw rows come back: those with rules (and what they read) or raw presenters."""
    from hpcbench.experiments import EXPERIMENTS

    wanted: set[str] = set()
    for name in EXPERIMENTS.names():
        spec = EXPERIMENTS.get(name)
        if spec.claims.rules or spec.raw_rows or spec.summarize is not None:
            wanted.add(name)
            wanted.update(spec.reads)
    return sorted(wanted)


# -- the other sections ----------------------------------------------------------

def failed_tasks_section(agg: Aggregate) -> Section:
    failed = [t for t in agg.tasks if t.state not in ("done", "pending", "running")]
    section = Section(title="Failed, interrupted and stale tasks", id="failed-tasks")
    if not failed:
        section.notes.append(Cell("no task failed, was interrupted or is stale", "ok"))
        return section
    rows = []
    for t in failed:
        notebook = Cell("–")
        if t.notebook is not None:
            notebook = file_link(t.notebook, str(t.notebook), folder=(t.source, t.task_id))
        rows.append([Cell(t.source), Cell(t.task_id), Cell(t.experiment), Cell(t.variant), Cell(t.state),
                     Cell(t.error or "", "error"), notebook])
    section.tables.append(Table(columns=["source", "task", "experiment", "variant", "state", "error", "notebook"],
                                rows=rows, id="failed-tasks-table", row_classes=["fail"] * len(rows)))
    return section


def unreadable_section(agg: Aggregate) -> Section:
    section = Section(title="Unreadable inputs", id="unreadable")
    if not agg.unreadable:
        section.notes.append(Cell("every input was readable", "ok"))
        return section
    rows = [[Cell(u["run"] or "–"), Cell(u["path"]), Cell(u["reason"], "error")] for u in unreadable_inputs(agg)]
    section.notes.append(Cell(f"{len(rows)} input(s) could not be read: what they held is missing from the tables "
                              "and the ledger below", "fail"))
    section.tables.append(Table(columns=["source", "path (in its run directory)", "reason"], rows=rows,
                                id="unreadable-inputs", row_classes=["fail"] * len(rows)))
    return section


def runs_table(sources: list[Source]) -> Table:
    columns = ["source", "run id", "suite", "created", "host", "backend", "hpcbench", "tasks done",
               "tasks failed", "other tasks", "records files", "run directory (name)"]
    rows = []
    for s in sources:
        info = s.info
        other = len(s.tasks) - s.count("done") - s.count("failed")
        rows.append([Cell(s.label), *(Cell(str(info.get(k) or "–")) for k in
                                      ("run_id", "suite", "created", "host", "backend", "hpcbench_version")),
                     Cell(str(s.count("done"))), Cell(str(s.count("failed")), "fail" if s.count("failed") else ""),
                     Cell(str(other)), Cell(str(len(s.files))),
                     # The name only: the page is published, the path is the building machine's.
                     Cell(Path(s.run_dir).name)])
    return Table(columns=columns, rows=rows, id="runs")


def _notebook_order(name: str) -> tuple[str, str]:
    """Experiments in the order of their notebooks (00_environment, 01_..., 10_collectives)."""
    from hpcbench.experiments import EXPERIMENTS

    return (EXPERIMENTS.get(name).notebook if name in EXPERIMENTS else "~", name)


def experiment_sections(agg: Aggregate) -> list[Section]:
    from hpcbench.experiments import EXPERIMENTS

    names = sorted(agg.experiments(), key=_notebook_order)
    sections: list[Section] = []
    for name in names:
        spec = EXPERIMENTS.get(name) if name in EXPERIMENTS else None
        present = spec.present if spec is not None and spec.present is not None else present_stats
        raw = None
        if spec is not None and spec.raw_rows:
            parts = [frame[frame["experiment"] == name].assign(source=label)
                     for label, frame in agg.records_by_source.items()]
            raw = pd.concat(parts, ignore_index=True) if parts else None
        text, binding = split_binding_rows(agg.experiment_text(name))
        data = ExperimentData(experiment=name, sources=agg.labels, stats=agg.experiment_stats(name),
                              text=text, raw=raw, summaries=agg.summaries(name))
        try:
            presented = present(data)
            table = rank_binding_table(binding)
            if presented and table is not None:
                presented[0].tables.append(table)
            gates = gate_table(agg.experiment_gates(name), table_id=f"gate-{slug(name)}")
            if presented and gates is not None:
                presented[0].tables.append(gates)
            sections += presented
        except Exception as exc:  # noqa: BLE001 - one broken presenter must not hide the rest
            sections.append(Section(title=f"Experiment: {name}", id=f"exp-{slug(name)}",
                                    notes=[Cell(f"presenting failed: {type(exc).__name__}: {exc}", "fail")]))
    return sections


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("hpcbench")
    except Exception:  # noqa: BLE001 - not installed: running from a checkout
        return "unknown"


def render(agg: Aggregate, *, claims: _Claims | None = None, title: str | None = None,
           ledger: dict[str, list | Exception] | None = None, files: LinkedFiles | None = None) -> str:
    """The report page as a string.

    Args:
        files: copies the files cells link into the report folder and links them relatively;
            default: no folder, so such links stay absolute ``file:`` URLs, marked as such.
    """
    claims = claims or _claims_api()
    if ledger is None:
        ledger = evaluate_ledger(agg, claims)
    sections = [ledger_section(agg.labels, ledger, claims.problem),
                Section(title="Runs", id="runs-section", tables=[runs_table(agg.sources)]),
                failed_tasks_section(agg), unreadable_section(agg), *experiment_sections(agg)]
    if files is None:
        files = LinkedFiles(None, {s.label: s.run_dir for s in agg.sources})
    files.resolve_tables([t for s in sections for t in s.tables])
    counts = {state: sum(1 for t in agg.tasks if t.state == state) for state in ("done", "failed")}
    counts["other"] = len(agg.tasks) - counts["done"] - counts["failed"]
    created = sorted({str(s.info["created"]) for s in agg.sources if s.info.get("created")})
    return page_template("template.html").render(
        title=title or "hpcbench report: " + ", ".join(agg.labels),
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        version=_version(),
        sources=agg.labels,
        created=", ".join(created) or "–",
        counts=counts,
        sections=sections,
        n_series=len(agg.stats),
        n_unreadable=len(agg.unreadable),
    )


__all__ = ["build_report", "evaluate_ledger", "render"]
