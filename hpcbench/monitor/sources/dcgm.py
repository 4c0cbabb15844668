"""GPU profiling fields through DCGM's command line, ``dcgmi dmon``.

Where the DCGM host engine runs (``nv-hostengine``), ``dcgmi dmon -e 1001,1002,... -c 1``
prints one row per GPU with the profiling fields the guide's table names as "DCGM":
field 1002 ``SM_ACTIVE`` is the guide's "SM efficiency" and becomes ``sm_activity``, like
NVML GPM's SM_UTIL (:mod:`~hpcbench.monitor.sources.nvml`); rows carry the label
``{"via": "dcgm"}`` to tell the two apart. DCGM averages these fields over its own
watch interval, so each call gives a rate-like value directly.

The text looks like::

    #Entity   GRACT  SMACT  SMOCC  TENSO  DRAMA
    ID
    GPU 0     0.912  0.871  0.432  0.315  0.288

"N/A" cells (a field this GPU does not support) give no row.
Reference: DCGM docs, "dcgmi dmon" and "Profiling Metrics" (field ids 1001-1005).
"""

from __future__ import annotations

import shutil
from typing import Callable, Iterable, Sequence

from hpcbench.monitor.sources.base import Sample, Source, run_command

#: DCGM field id -> (dmon column, our metric). All are fractions 0..1.
FIELDS: dict[int, tuple[str, str]] = {
    1001: ("GRACT", "gpu_gr_engine_active"),
    1002: ("SMACT", "sm_activity"),
    1003: ("SMOCC", "sm_occupancy"),
    1004: ("TENSO", "gpu_tensor_active"),
    1005: ("DRAMA", "gpu_dram_active"),
}


def parse_dmon(text: str) -> list[Sample]:
    """The samples in ``dcgmi dmon`` text: one per GPU row and known column (all rows kept)."""
    columns: list[str] = []
    by_column = {col: metric for col, metric in FIELDS.values()}
    out: list[Sample] = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0].startswith("#"):
            # "#Entity GRACT ..." or "# Entity GRACT ...": columns follow the word Entity
            words = [w.lstrip("#") for w in parts]
            words = [w for w in words if w]
            columns = words[1:] if words and words[0].lower() == "entity" else words
            continue
        if len(parts) < 2 or not columns or parts[0] not in ("GPU",):
            continue  # the "ID" line, errors, other entity kinds
        gpu, values = parts[1], parts[2:]
        for col, cell in zip(columns, values):
            metric = by_column.get(col)
            if metric is None:
                continue
            try:
                value = float(cell)
            except ValueError:
                continue  # "N/A"
            out.append(Sample(metric, value, "fraction", {"gpu": gpu, "via": "dcgm"}))
    return out


class DcgmSource(Source):
    """DCGM profiling fields by running ``dcgmi dmon -c 1`` once per sample.

    Args:
        fields: DCGM field ids (keys of :data:`FIELDS`).
        runner: ``runner(argv) -> (returncode, stdout)``; tests pass one that returns
            ``tests/fixtures/monitor/dcgmi_dmon.txt``.
        which: finds the ``dcgmi`` executable (``shutil.which`` by default).
    """

    name = "dcgm"
    metrics = tuple(metric for _, metric in FIELDS.values())

    def __init__(self, *, fields: Sequence[int] = tuple(FIELDS), runner: Callable | None = None,
                 which: Callable[[str], str | None] = shutil.which, clock: Callable[[], float] | None = None):
        super().__init__(clock=clock)
        unknown = [f for f in fields if f not in FIELDS]
        if unknown:
            raise ValueError(f"fields: unknown DCGM field ids {unknown}; known: {sorted(FIELDS)}")
        self.fields = tuple(fields)
        self._runner = runner or run_command
        self._which = which
        self._reason: str | None = None
        self._checked = False

    @property
    def argv(self) -> list[str]:
        return ["dcgmi", "dmon", "-e", ",".join(str(f) for f in self.fields), "-c", "1"]

    def available(self) -> str | None:
        if not self._checked:
            self._checked = True
            if self._runner is run_command and self._which("dcgmi") is None:
                self._reason = "dcgmi not found (DCGM is not installed)"
            else:
                rc, text = self._runner(self.argv)
                if rc != 0 or not parse_dmon(text):
                    first = (text.strip().splitlines() or ["no output"])[-1]
                    self._reason = f"dcgmi dmon failed (rc {rc}): {first}"
        return self._reason

    def _read(self) -> Iterable[Sample]:
        rc, text = self._runner(self.argv)
        return parse_dmon(text) if rc == 0 else []


SOURCE = DcgmSource
