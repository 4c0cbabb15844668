"""C10 and C16 declared: the guide's words and figures, C10's comparison and its band.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C10 and C16 is here:

* **words and figures**: :data:`C10` and :data:`C16` (the guide's sentences, their figures quoted, their
  kinds, their arithmetic); :data:`GUIDE_C10_NCCL_SETTINGS`, the four NCCL values C10 recommends. C16's
  platform (8 GPUs per node, HDR InfiniBand) is a statement of setting every prediction at the guide's scale
  reads, so it lives in :mod:`hpcbench.guide.statements`; the link rates it is set beside are vendor data
  (:data:`hpcbench.core.facts.LINK_PEAKS_GBPS`);
* **the guide's consistency**: none to check; C10 is a technique, judged on whether it works as described,
  and C16 is the guide's setting, shown as context (the ``environment`` experiment informs it too);
* **the regime**: none;
* **the comparison and its band**: C10, all_reduce busbw with the guide's four settings over NCCL's defaults,
  at least :data:`C10_GAIN`;
* **what the platform can show**: no cap is computed; C10 applies only with NCCL (:data:`APPLICABILITY`);
* **the rules**: :func:`hpcbench.experiments.collectives.rules.rule_c10` and
  :func:`hpcbench.experiments.collectives.rules.rule_c16` (context, no verdict).
"""

from __future__ import annotations

from hpcbench.core.facts import LINK_PEAKS_GBPS, NCCL_DEFAULT_BUFFSIZE, NCCL_SOCKET_THREADS_LIMIT
from hpcbench.core.units import format_bytes, format_gbps
from hpcbench.guide.claims import ANECDOTE, S4, S11, TECHNIQUE, Claim
from hpcbench.judge.applicability import NCCL, requires

#: C10's "recommended NCCL tuning": the four variables and their values, as the guide writes them.
GUIDE_C10_NCCL_SETTINGS = {"NCCL_ALGO": "Tree", "NCCL_NSOCKS_PERTHREAD": "4",
                           "NCCL_SOCKET_NTHREADS": "8", "NCCL_BUFFSIZE": "4194304"}
#: A tuned/default busbw ratio counts as an improvement from here (5 % is run-to-run noise on a fabric).
C10_GAIN = 1.05


def _link_peak(fragment: str) -> tuple[str, float]:
    """The (name, GB/s) entry of LINK_PEAKS_GBPS whose name contains ``fragment``."""
    for name, peak in LINK_PEAKS_GBPS.items():
        if fragment in name:
            return name, peak
    raise KeyError(f"no link containing {fragment!r} in LINK_PEAKS_GBPS: {list(LINK_PEAKS_GBPS)}")


def _c10_predicted() -> str:
    settings = GUIDE_C10_NCCL_SETTINGS
    threads = int(settings["NCCL_SOCKET_NTHREADS"]) * int(settings["NCCL_NSOCKS_PERTHREAD"])
    default = ("is NCCL's default, so it changes nothing"
               if int(GUIDE_C10_NCCL_SETTINGS["NCCL_BUFFSIZE"]) == NCCL_DEFAULT_BUFFSIZE
               else "differs from NCCL's default")
    return (f"NCCL_BUFFSIZE=4194304 ({format_bytes(NCCL_DEFAULT_BUFFSIZE)}) {default}; the two socket "
            f"settings ({threads} socket threads, within NCCL's limit of {NCCL_SOCKET_THREADS_LIMIT}) "
            f"only affect NCCL's TCP socket transport, not IB verbs; NCCL_ALGO=Tree overrides NCCL's "
            f"own choice, which usually prefers ring for large messages on few nodes: expect equal "
            f"or lower busbw for large all_reduce there, and gains, if any, on many nodes or small messages")


def _c16_predicted() -> str:
    hdr_name, hdr = _link_peak("HDR")
    nvl_name, nvl = _link_peak("NVLink")
    return (f"{hdr_name}: {hdr * 8:.0f} Gb/s = {format_gbps(hdr)} per direction per link; a ring "
            f"all_reduce's busbw is bounded by its slowest link, so at the guide's scale inter-node "
            f"busbw <= {format_gbps(hdr)} per node NIC (the guide does not say how many NICs a node "
            f"has), while inside a node {nvl_name} allows up to {format_gbps(nvl)}")


C10 = Claim("C10", TECHNIQUE, S4,
            "The recommended NCCL tuning is NCCL_ALGO=Tree, NCCL_NSOCKS_PERTHREAD=4, "
            "NCCL_SOCKET_NTHREADS=8 and NCCL_BUFFSIZE=4194304 (with NCCL 2.18).",
            tuple((k, v) for k, v in GUIDE_C10_NCCL_SETTINGS.items()) + (("NCCL version", "2.18"),),
            _c10_predicted(),
            title="Recommended NCCL settings", headline="Tree, 4 sockets x 8 threads")
C16 = Claim("C16", ANECDOTE, S11,
            "The guide's platform has fat nodes with 8 A100 GPUs each, connected by 200 Gb/s HDR "
            "InfiniBand.",
            (("GPUs per node", "8 x A100"), ("inter-node fabric", "200 Gb/s HDR InfiniBand")),
            _c16_predicted(),
            title="The guide's platform", headline="8 x A100, 200 Gb/s HDR")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C10, C16)
#: C10's settings are NCCL's: any other backend ignores them.
C10_APPLIES = requires(NCCL.because(", which ignores NCCL_* settings"))
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C10": C10_APPLIES}
