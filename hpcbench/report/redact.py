"""Keep the machine out of a report: every path and name that says where it was built, replaced.

A report is published (:mod:`hpcbench.report.publish`), so nothing in it may name the machine that
ran or built it. Paths reach a report from many places: records (a data set's folder in a
``data`` fact, ``repaired <staged copy> from <original>`` in a repair note), environment facts (the
interpreter's full path), a task's error, a failed notebook's traceback, an unreadable input's
reason. Rather than chase each of them, the report runs everything it writes through one
:class:`Redactor`, built from its run directories and this machine, at the last moment: the page
(:meth:`Redactor.html`), ``report.json`` (:meth:`Redactor.data`) and the files it copies into
``files/`` (:meth:`Redactor.file_bytes`). The run directory itself is never changed.

What becomes what, the most specific first:

* a run directory (as given, absolute, resolved): a path inside it becomes relative to it
  (``tasks/t/data``); the folder alone, its name; a path recorded where the run lay before it was
  moved (``.../<run name>/tasks/...``) is relative to it too;
* an interpreter (``<prefix>/bin/python3.11``): ``Python 3.11.2 (.venv)``, its version (from the
  environment's ``pyvenv.cfg``, this interpreter's own, or the file name) and its environment's
  folder name (``system`` for ``/usr``);
* this interpreter's environment (``sys.prefix``): ``<venv>``; the folder holding the hpcbench
  package: ``<src>``; the current directory: ``<cwd>``; the temporary folder: ``<tmp>``; ``$HOME``:
  ``<home>``;
* this machine's host name (short and fully qualified), as a whole word: ``<host>``.

Placeholders are bracketed so that nobody takes one for a real path; in HTML they are escaped.
"""

from __future__ import annotations

import base64
import json
import os
import platform
import re
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from markupsafe import escape

TMP = "<tmp>"
HOME = "<home>"
HOST = "<host>"
VENV = "<venv>"
SRC = "<src>"
CWD = "<cwd>"
#: A character that may stand right before a path, or inside one: a path only starts after none of them
#: (so that ``/tmp`` inside base64 data or ``a/tmp`` is left alone).
_PATH_CHAR = r"\w.~+/-"
#: Suffixes of copied files that are markup: their placeholders are escaped as in the page.
_MARKUP_SUFFIXES = (".html", ".htm", ".svg", ".xml")
#: Where a path starts: after none of :data:`_PATH_CHAR`, or after ``file://``.
_PATH_START = rf"(?:(?<![{_PATH_CHAR}])|(?<=file://))"
_INTERPRETER = re.compile(rf"{_PATH_START}(/(?:[^\s/\"'<>:;,|&()=]+/)+)bin/python(\d+(?:\.\d+)?)?(?![{_PATH_CHAR}])")
_BASE64_DATA = re.compile(r"(data:[\w/+.-]+;base64,[A-Za-z0-9+/=]*)")
_SVG_DATA = re.compile(r"(data:image/svg\+xml;base64,)([A-Za-z0-9+/=]+)")


@dataclass(frozen=True)
class _Rule:
    """Where ``prefix`` starts a path: ``prefix/rest`` becomes ``inside + rest``, ``prefix`` alone ``alone``."""

    prefix: str
    inside: str
    alone: str


def interpreter_text(prefix: str, name_version: str | None = None) -> str:
    """``Python 3.11.2 (.venv)`` for the interpreter ``<prefix>/bin/python...``.

    Args:
        prefix: the interpreter's environment folder (``/work/x/.venv``), with or without a trailing slash.
        name_version: the version in the executable's name (``3.11`` of ``python3.11``), if any.
    """
    folder = Path(prefix.rstrip("/") or "/")
    version = _venv_version(folder)
    if version is None and os.path.realpath(folder) == os.path.realpath(sys.prefix):
        version = platform.python_version()
    version = version or name_version
    name = "system" if str(folder) in ("/usr", "/usr/local", "/") else folder.name
    return f"Python {version} ({name})" if version else f"Python ({name})"


def _venv_version(folder: Path) -> str | None:
    """The Python version a virtual environment's ``pyvenv.cfg`` names, if it is readable."""
    try:
        text = (folder / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    values = {k.strip(): v.strip() for k, v in values.items()}
    return values.get("version_info") or values.get("version") or None


def _hostnames() -> list[str]:
    names = {socket.gethostname(), socket.getfqdn()}
    names |= {n.split(".")[0] for n in names}
    # "localhost" names no machine; a one-letter name would take words apart.
    return sorted((n for n in names if len(n) >= 2 and n not in ("localhost", "localhost.localdomain")),
                  key=len, reverse=True)


def _spellings(path: str | os.PathLike) -> list[str]:
    """A folder as it may appear in text: absolute as given and resolved (symbolic links followed)."""
    out = []
    for p in (os.path.abspath(path), os.path.realpath(path)):
        p = p.rstrip("/")
        if p and p not in out:
            out.append(p)
    return out


def machine_folders() -> dict[str, str]:
    """This machine's folders a report must not name, by placeholder: this interpreter's environment, the
    folder holding the hpcbench package, the current directory, the temporary folder and ``$HOME``."""
    return {VENV: sys.prefix, SRC: str(Path(__file__).resolve().parents[2]), CWD: os.getcwd(),
            TMP: tempfile.gettempdir(), HOME: os.path.expanduser("~")}


class Redactor:
    """Replaces the paths and names of a machine in what a report writes (see the module).

    :meth:`for_report` builds the one a report uses: its run directories and this machine.

    Args:
        run_dirs: the report's run directories.
        folders: other folders to hide, by placeholder (:func:`machine_folders`).
        hostnames: the machine's names, replaced by :data:`HOST` as whole words.
    """

    def __init__(self, run_dirs: Sequence[str | os.PathLike] = (), folders: Mapping[str, str | None] | None = None,
                 hostnames: Iterable[str] = ()) -> None:
        rules: list[_Rule] = []
        for run_dir in run_dirs:
            name = Path(os.path.abspath(run_dir)).name
            rules += [_Rule(p, "", name) for p in _spellings(run_dir)]
        for placeholder, folder in (folders or {}).items():
            # "/" would take every path apart, and says nothing about the machine anyway.
            if folder and os.path.abspath(folder) != "/":
                rules += [_Rule(p, placeholder + "/", placeholder) for p in _spellings(folder)]
        by_prefix: dict[str, _Rule] = {}
        for rule in rules:  # the first spelling wins: a run directory over a folder it lies in
            by_prefix.setdefault(rule.prefix, rule)
        # The most specific first: a run inside the temporary folder is relative to the run, not <tmp>/...
        self.rules = sorted(by_prefix.values(), key=lambda r: len(r.prefix), reverse=True)
        self.run_names = sorted({Path(os.path.abspath(d)).name for d in run_dirs}, key=len, reverse=True)
        self.hostnames = sorted({h for h in hostnames if h}, key=len, reverse=True)
        self._text = self._compile(markup=False)
        self._markup = self._compile(markup=True)

    @classmethod
    def for_report(cls, run_dirs: Sequence[str | os.PathLike]) -> Redactor:
        """The redactor of a report of ``run_dirs`` built on this machine."""
        return cls(run_dirs, machine_folders(), _hostnames())

    def _compile(self, markup: bool) -> list[tuple[re.Pattern[str], Any]]:
        quote = (lambda s: str(escape(s))) if markup else (lambda s: s)
        # The interpreter first: its whole path says more than <venv>/bin/python.
        passes: list[tuple[re.Pattern[str], Any]] = [
            (_INTERPRETER, lambda m: quote(interpreter_text(m.group(1), m.group(2))))]
        if self.run_names:
            # Recorded where the run lay before a move: .../<run name>/tasks/... (as resolve_stored_path reads it).
            names = "|".join(re.escape(quote(n)) for n in self.run_names)
            passes.append((re.compile(rf"{_PATH_START}(?:/[^\s/\"'<>]+)*?/(?:{names})/(?=tasks/)"), ""))
        if self.rules:
            table = {quote(r.prefix): r for r in self.rules}
            alternatives = "|".join(re.escape(p) for p in table)
            pattern = re.compile(rf"{_PATH_START}({alternatives})(?:(/)|(?![\w.~+-]))")

            def paths(m: re.Match[str]) -> str:
                rule = table[m.group(1)]
                return quote(rule.inside) if m.group(2) else quote(rule.alone)

            passes.append((pattern, paths))
        if self.hostnames:
            names = "|".join(re.escape(quote(h)) for h in self.hostnames)
            passes.append((re.compile(rf"(?<![\w.+/-])(?:{names})(?![\w+/-]|\.\w)"), quote(HOST)))
        return passes

    # -- what the report writes ---------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` (plain: a record, a message, a line of ``report.json``) with the machine replaced."""
        return self._sub(text, self._text)

    def html(self, text: str) -> str:
        """HTML or SVG text (the page): paths matched as they are escaped there, placeholders escaped; the SVG images
        inlined as base64 ``data:`` URLs are decoded, redacted and encoded again; other data is left alone."""
        out, last = [], 0
        for m in _SVG_DATA.finditer(text):
            out.append(self._markup_plain(text[last:m.start()]))
            svg = base64.b64decode(m.group(2)).decode("utf-8", errors="surrogateescape")
            out.append(m.group(1) + base64.b64encode(
                self._markup_plain(svg).encode("utf-8", errors="surrogateescape")).decode("ascii"))
            last = m.end()
        out.append(self._markup_plain(text[last:]))
        return "".join(out)

    def _markup_plain(self, text: str) -> str:
        # Other data: URLs (PNG images) are binary: a path cannot be in them, a pattern could be by chance.
        pieces = _BASE64_DATA.split(text)  # the data: URLs at odd places
        return "".join(p if i % 2 else self._sub(p, self._markup) for i, p in enumerate(pieces))

    @staticmethod
    def _sub(text: str, passes: list[tuple[re.Pattern[str], Any]]) -> str:
        for pattern, repl in passes:
            text = pattern.sub(repl, text)
        return text

    def data(self, value: Any) -> Any:
        """JSON-ready data (``report.json``) with every string, key or value, redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def file_bytes(self, content: bytes, name: str) -> bytes:
        """A copied file's content: redacted when it is UTF-8 text (a notebook, a trace, a log), as markup
        when its name says so; binary content is kept as it is."""
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            return content
        if name.lower().endswith(_MARKUP_SUFFIXES):
            redacted = self.html(text)
        elif name.lower().endswith((".json", ".ipynb")):
            redacted = self._json_text(text)
        else:
            redacted = self.text(text)
        return content if redacted == text else redacted.encode("utf-8")

    def _json_text(self, text: str) -> str:
        """JSON redacted string by string (its escapes read, not matched); as text when it does not parse."""
        try:
            data = json.loads(text)
        except ValueError:
            return self.text(text)
        # A notebook's HTML outputs are markup inside JSON: their paths are escaped the way the page's are,
        # and a plain placeholder in them would read as a tag.
        redacted = self._json_value(data)
        # Written anew (as nbformat writes a notebook) only when something changed: else byte for byte.
        return text if redacted == data else json.dumps(redacted, indent=1, ensure_ascii=False) + "\n"

    def _json_value(self, value: Any, markup: bool = False) -> Any:
        if isinstance(value, str):
            return self._sub(value, self._markup) if markup else self.text(value)
        if isinstance(value, dict):
            return {k: self._json_value(v, markup or k in ("text/html", "image/svg+xml")) for k, v in value.items()}
        if isinstance(value, list):
            return [self._json_value(v, markup) for v in value]
        return value


__all__ = ["CWD", "HOME", "HOST", "SRC", "TMP", "VENV", "Redactor", "interpreter_text", "machine_folders"]
