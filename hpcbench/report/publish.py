"""Publish report folders into one static site, with an index page of every publication.

    hpcbench report results/run-a --out reports/run-a   # index.html + report.json
    hpcbench publish reports/run-a --to site/            # site/run-a-<date>/ + site/index.html

A report folder carries ``report.json`` next to its ``index.html`` (written by
:func:`hpcbench.report.html.build_report`; its shape, on both sides, is
:mod:`hpcbench.report.report_json`'s, documented in ``hpcbench/report/SCHEMA.md``): the title,
when it was generated, its runs (suite and host from each ``run.json``), its verdict counts, the
ledger as data and the inputs that could not be read. A report with unreadable inputs is refused
(:class:`~hpcbench.report.report_json.UnreadableInputs`) unless ``allow_unreadable``: its ledger
may lack what those files held.

Publishing copies the report (exactly its :data:`~hpcbench.report.report_folder.REPORT_CONTENT`:
``index.html``, ``report.json`` and ``files/``; no logs, notes or hidden files that lie beside
them) to ``SITE_DIR/<folder name>-<date>[-k]/``, never over an earlier publication (a link once
shared keeps showing what it showed), appends one entry to ``SITE_DIR/publications.json`` and
regenerates ``SITE_DIR/index.html`` from that data alone: the page is never parsed, so a changed
page layout cannot lose an earlier entry. ``SITE_DIR/claims.html`` (linked from the index) is
rebuilt too, from the ``report.json`` of every publication: each claim's estimate, interval and
verdict in every report, newest first, flagged where it moved (:mod:`hpcbench.report.claim_history`).
Files are replaced atomically (temporary file + rename) so a reader of the site never sees half a file.

Everything in ``SITE_DIR`` is served, so nothing private goes there: ``publications.json``
names each publication by its path relative to the site and its report folder by name only
(never a path of the machine that published it), and the lock that serialises publishers
lies beside the site, not in it. The same report (same content, by SHA-256) is published
once: publishing it again is refused unless ``replace``, which puts it in place of the first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from hpcbench.core.atomic import atomic_write
from hpcbench.core.errors import HpcbenchError
from hpcbench.present.kit import slug as text_slug
from hpcbench.report.claim_history import claim_history, render_claims_page
from hpcbench.report.report_folder import INDEX_HTML, REPORT_JSON, report_files, swap_in
from hpcbench.report.report_json import (DIFFERS, UnreadableInputs, read_json_object, read_report_json,
                                         report_manifest, utc_stamp, write_report_manifest)
from hpcbench.report.templates import page_template

PUBLICATIONS_JSON = "publications.json"
#: The page of every claim across the published reports, beside the index.
CLAIMS_HTML = "claims.html"
#: Left in site folders by earlier versions, which locked inside the (served) site.
OLD_LOCK_NAME = ".publish.lock"
#: The version of publications.json: bumped when a field changes meaning; readers reject what they do not know.
PUBLICATIONS_SCHEMA = 1
#: The verdicts the index shows as columns, in this order (hpcbench.judge.evidence.VERDICTS minus
#: "context", which is a setting rather than a testable claim).
INDEX_VERDICTS = ("reproduced", "not reproduced", "implausible as stated", "not testable here", "inconclusive",
                  "not measured yet")

def _write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one rename, so a reader never sees half a file.

    The mode follows the umask (``0644`` under the usual 022, so a web server's user can
    read the page; ``0664`` under a project group's 002).
    """
    with atomic_write(path, "w") as fh:
        fh.write(text)


def _read_publications_json(path: Path) -> dict[str, Any]:
    data = read_json_object(path, PUBLICATIONS_JSON)
    if data.get("schema") != PUBLICATIONS_SCHEMA:
        raise HpcbenchError(f"{path}: {PUBLICATIONS_JSON} has schema {data.get('schema')!r}, this hpcbench reads "
                            f"{PUBLICATIONS_SCHEMA}")
    return data


def read_report_manifest(report_dir: str | Path) -> dict[str, Any]:
    """The ``report.json`` of a report folder, checked (:func:`~hpcbench.report.report_json.check_report_json`).

    Raises:
        HpcbenchError: naming the folder when it is not a report folder (no ``index.html``),
            or naming ``report.json`` when it is missing, malformed or of another schema version.
    """
    folder = Path(report_dir)
    if not folder.is_dir():
        raise HpcbenchError(f"{folder}: not a report folder (no such directory)")
    if not (folder / "index.html").is_file():
        raise HpcbenchError(f"{folder}: not a report folder (no index.html); "
                            "build one with `hpcbench report RUN_DIR --out FOLDER`")
    path = folder / REPORT_JSON
    if not path.is_file():
        raise HpcbenchError(f"{path}: missing; this report predates report.json, rebuild it with "
                            "`hpcbench report`")
    return read_report_json(path)


def check_readable_inputs(report: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse a report some of whose inputs could not be read.

    Raises:
        UnreadableInputs: naming the report and its unreadable inputs, in one line.
    """
    bad = manifest.get("unreadable") or []
    if bad:
        names = ", ".join(f"{u.get('run')}: {u['path']}" if u.get("run") else u["path"] for u in bad[:3])
        more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
        raise UnreadableInputs(f"{report}: {len(bad)} input(s) of this report were unreadable ({names}{more}), so "
                               "its ledger may lack what they held; nothing was published. Publish it anyway with "
                               "--allow-unreadable")


# -- publications.json: the site's index as data ----------------------------------

@dataclass(frozen=True)
class Publication:
    """One published report: one row of the site index."""

    slug: str
    """Its folder under the site, ``<report folder name>-<YYYY-MM-DD>[-k]``."""
    published: str
    """When it was published, ``YYYY-MM-DDTHH:MM:SSZ`` (UTC; sorts as text)."""
    title: str
    generated: str | None
    """When the report itself was generated (from report.json)."""
    suites: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    """The hosts the runs were launched from (each run.json's ``host``)."""
    verdicts: dict[str, int] = field(default_factory=dict)
    claims: int | None = None
    path: str = ""
    """Its page relative to the site root, ``<slug>/index.html``."""
    report_name: str = ""
    """The name of the report folder it was copied from (a name, never the publisher's path)."""
    content_sha256: str = ""
    """The report's content hash (:func:`report_sha256`): the same report is published once."""
    unreadable: int = 0
    """How many of the report's inputs could not be read (published with ``--allow-unreadable``)."""

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any], *, slug: str, published: str,
                      report_name: str, content_sha256: str) -> Publication:
        runs = manifest.get("runs", [])

        def distinct(key: str) -> list[str]:
            return list(dict.fromkeys(str(r[key]) for r in runs if r.get(key)))

        return cls(slug=slug, published=published, title=str(manifest["title"]),
                   generated=manifest.get("generated"), suites=distinct("suite"), hosts=distinct("host"),
                   verdicts={str(k): int(v) for k, v in (manifest.get("verdicts") or {}).items()},
                   claims=manifest.get("claims"), path=f"{slug}/{INDEX_HTML}", report_name=report_name,
                   content_sha256=content_sha256, unreadable=len(manifest.get("unreadable") or []))

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Publication:
        """An entry of ``publications.json``; fields this version does not know are dropped (an
        earlier version's ``report_dir``, the publisher's absolute path, is not written again)."""
        known = set(cls.__dataclass_fields__)
        if not isinstance(data, dict) or not {"slug", "published", "title"} <= set(data):
            raise HpcbenchError(f"{where}: needs an object with 'slug', 'published' and 'title'")
        entry = cls(**{k: v for k, v in data.items() if k in known})
        return entry if entry.path else replace(entry, path=f"{entry.slug}/{INDEX_HTML}")


def load_publications(site_dir: str | Path) -> list[Publication]:
    """The publications recorded in ``site_dir/publications.json``, oldest first ([] if none).

    Raises:
        HpcbenchError: naming ``publications.json`` (and the entry) when it is malformed.
    """
    path = Path(site_dir) / PUBLICATIONS_JSON
    if not path.exists():
        return []
    data = _read_publications_json(path)
    entries = data.get("publications")
    if not isinstance(entries, list):
        raise HpcbenchError(f"{path}: needs a list 'publications'")
    return [Publication.from_dict(e, f"{path}: publications[{i}]") for i, e in enumerate(entries)]


def unique_slug(name: str, day: str, taken: set[str]) -> str:
    """``<name>-<day>``, or with ``-2``, ``-3``... the first that is not ``taken``.

    The name is reduced to ``[a-z0-9-]`` so the slug is a safe folder name and URL path.
    """
    base = f"{text_slug(name)}-{day}"
    candidate, k = base, 2
    while candidate in taken:
        candidate, k = f"{base}-{k}", k + 1
    return candidate


def newest_first(publications: Sequence[Publication]) -> list[Publication]:
    """Sorted by publication time, newest first; within one second, the later-recorded first."""
    order = sorted(enumerate(publications), key=lambda ip: (ip[1].published, ip[0]), reverse=True)
    return [p for _, p in order]


def render_index(publications: Sequence[Publication], *, title: str = "hpcbench reports",
                 generated: dt.datetime | None = None) -> str:
    """The site's ``index.html``: one row per publication, newest first, inline CSS, no script.

    Every text is escaped (jinja2 autoescape; nothing is marked safe): titles, suites and
    hosts come from run directories that anyone could have written.
    """
    rows = []
    for p in newest_first(publications):
        # A count absent from a report that has verdicts is a true 0; no verdicts at all is unknown.
        counts = [(v, p.verdicts.get(v, 0) if p.verdicts else "–") for v in INDEX_VERDICTS]
        rows.append({"slug": p.slug, "published": _readable(p.published), "title": p.title,
                     "generated": _readable(p.generated) if p.generated else None,
                     "suites": p.suites, "hosts": p.hosts,
                     "counts": counts, "differ": p.verdicts.get(DIFFERS, 0), "unreadable": p.unreadable})
    return page_template("publish_index.html").render(
        title=title, rows=rows, verdicts=INDEX_VERDICTS, differs=DIFFERS, data_file=PUBLICATIONS_JSON,
        claims_page=CLAIMS_HTML, generated=_readable(utc_stamp(generated)))


def render_claims(site_dir: str | Path, publications: Sequence[Publication], *,
                  generated: dt.datetime | None = None) -> str:
    """The site's ``claims.html``: every claim across the published reports, from each one's ``report.json``.

    A publication whose ``report.json`` cannot be read (another schema version: published by an
    older hpcbench) is left out and named on the page with why, instead of stopping every later publication.
    """
    site = Path(site_dir)
    readable, skipped = [], []
    for p in newest_first(publications):
        path = site / p.slug / REPORT_JSON
        try:
            readable.append((p, read_report_json(path)))
        except HpcbenchError as exc:
            # Named by its place in the site: the page is served, the publisher's path is private.
            skipped.append(f"{p.slug}/{REPORT_JSON}: {str(exc).removeprefix(f'{path}: ')}")
    return render_claims_page(claim_history(readable, skipped), generated=_readable(utc_stamp(generated)),
                              index=INDEX_HTML)


def _readable(stamp: str) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` as ``YYYY-MM-DD HH:MM:SS UTC``: the page is for people."""
    return str(stamp).replace("T", " ").replace("Z", " UTC")


# -- publishing ---------------------------------------------------------------------

def report_sha256(folder: Path) -> str:
    """The content hash of the report in ``folder``: SHA-256 over each of its files (see
    :func:`~hpcbench.report.report_folder.report_files`), path and bytes, in order.

    Two builds of one run differ (the page says when it was generated); one report published
    twice, or a copy of it, does not.
    """
    total = hashlib.sha256()
    for path in report_files(folder):
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        total.update(f"{path.relative_to(folder).as_posix()}\0{digest.hexdigest()}\n".encode())
    return total.hexdigest()


def site_lock_path(site_dir: Path) -> Path:
    """The publishers' lock file: beside the site (``.<site name>.publish.lock``), since everything in
    the site is served."""
    site = Path(site_dir).resolve()
    return site.with_name(f".{site.name}.publish.lock")


@contextlib.contextmanager
def _site_lock(site_dir: Path) -> Iterator[None]:
    """One publisher at a time: publications.json is read, extended and rewritten.

    Where the site's parent folder cannot be written (a web root such as ``/var/www/html``), the
    lock goes to the temporary folder, named after the site's path: publishers on this machine
    still wait for each other.
    """
    path = site_lock_path(site_dir)
    try:
        fh = open(path, "w")
    except PermissionError:
        key = hashlib.sha256(str(Path(site_dir).resolve()).encode()).hexdigest()[:16]
        fh = open(Path(tempfile.gettempdir()) / f"hpcbench-publish-{key}.lock", "w")
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _copy_report(report_dir: Path, dest: Path) -> None:
    """Copy the report's files (only them) into a hidden temporary folder, then rename: the slug
    appears whole or not at all. An existing ``dest`` (a publication being replaced) is set aside
    first and removed once the new one is in place."""
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        partial.mkdir()
        for path in report_files(report_dir):
            target = partial / path.relative_to(report_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        swap_in(partial, dest)  # the same swap a report build ends with
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _published_hash(site: Path, publication: Publication) -> str:
    """A publication's content hash; computed from its folder for entries written before hashes were kept."""
    if publication.content_sha256:
        return publication.content_sha256
    folder = site / publication.slug
    return report_sha256(folder) if folder.is_dir() else ""


def publish_report(report_dir: str | Path, site_dir: str | Path, *, now: dt.datetime | None = None,
                   replace_existing: bool = False, allow_unreadable: bool = False) -> Publication:
    """Copy the report in ``report_dir`` into ``site_dir`` under a new slug and regenerate the site index.

    Args:
        report_dir: a folder written by ``hpcbench report`` (``index.html`` + ``report.json``).
        site_dir: the site folder (created); earlier publications in it are kept as they are.
        now: the publication time (default: now), in the slug's date and the index.
        replace_existing: when this very report (same content hash) is published already, copy it
            again into that publication's folder and date it ``now``, instead of refusing.
        allow_unreadable: publish a report some of whose inputs were unreadable (its report.json
            lists them), instead of refusing.

    Returns:
        The new (or replaced) :class:`Publication`; its folder is ``site_dir/<slug>``.

    Raises:
        HpcbenchError: naming the path when ``report_dir`` is not a report folder, its
            ``report.json`` or the site's ``publications.json`` is malformed, ``site_dir``
            is not a folder or lies inside ``report_dir``, or the same report is published
            already (naming it) and ``replace_existing`` is false. Nothing is written then.
        UnreadableInputs: naming the report when some of its inputs were unreadable and
            ``allow_unreadable`` is false. Nothing is written then.
    """
    report, site = Path(report_dir), Path(site_dir)
    manifest = read_report_manifest(report)
    if not allow_unreadable:
        check_readable_inputs(report, manifest)
    if site.exists() and not site.is_dir():
        raise HpcbenchError(f"{site}: the site must be a folder, this is a file")
    if site.resolve().is_relative_to(report.resolve()):
        raise HpcbenchError(f"{site}: the site lies inside the report folder {report}; "
                            "copying the report would copy the site into itself")
    load_publications(site)  # a malformed index stops us before anything is copied
    published = utc_stamp(now)
    content = report_sha256(report)
    site.mkdir(parents=True, exist_ok=True)
    with _site_lock(site):
        publications = load_publications(site)  # again: another publisher may have written
        # Kept once computed: entries of earlier versions have no hash yet.
        publications = [replace(p, content_sha256=_published_hash(site, p)) for p in publications]
        same = [i for i, p in enumerate(publications) if p.content_sha256 == content]
        if same and not replace_existing:
            first = publications[same[-1]]
            raise HpcbenchError(f"{report}: this report is published already, unchanged, as {site / first.path} "
                                f"({first.published}); nothing was written. Publish it again in its place "
                                "with --replace, or rebuild the report to publish a new edition")
        name = report.resolve().name
        if same:
            index = same[-1]
            slug = publications[index].slug
        else:
            taken = {p.slug for p in publications} | {child.name for child in site.iterdir()}
            slug = unique_slug(name, published[:10], taken)
        _copy_report(report, site / slug)
        publication = Publication.from_manifest(manifest, slug=slug, published=published, report_name=name,
                                                content_sha256=content)
        if same:
            publications[index] = publication
        else:
            publications.append(publication)
        # Data first, page second: a failure in between leaves data the next publish renders.
        _write_atomic(site / PUBLICATIONS_JSON, json.dumps(
            {"schema": PUBLICATIONS_SCHEMA, "publications": [asdict(p) for p in publications]}, indent=2) + "\n")
        _write_atomic(site / INDEX_HTML, render_index(publications, generated=now))
        _write_atomic(site / CLAIMS_HTML, render_claims(site, publications, generated=now))
        (site / OLD_LOCK_NAME).unlink(missing_ok=True)
    return publication


__all__ = ["CLAIMS_HTML", "DIFFERS", "INDEX_VERDICTS", "PUBLICATIONS_JSON", "REPORT_JSON", "Publication",
           "check_readable_inputs", "load_publications", "newest_first", "publish_report", "read_report_manifest",
           "render_claims", "render_index", "report_manifest", "report_sha256", "site_lock_path", "unique_slug",
           "write_report_manifest"]
