"""C4 and C5 declared: the guide's words and figures, the settings they name, the bands the rules judge with.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C4 and C5 is here:

* **words and figures**: :data:`C4` and :data:`C5` (the guide's sentences, their figures quoted, their
  kinds, their arithmetic); :data:`GUIDE_C4_IDLE`, the idle share C4 states, and :data:`GUIDE_PREFETCH`,
  C5's buffer (num_workers x batch_size samples: one batch per DataLoader worker in flight);
* **C4's band**: small files must leave the accelerator idle at least :data:`C4_IDLE_LOWER` of the time
  (the guide: 65 %);
* **C5's bands**: :data:`C5_FORMATS` (the container formats the guide names) must each read at least
  :data:`C5_SPEEDUP` x the small files' samples/s; the guide's buffer must reach :data:`C5_BUFFER_SHARE` of
  one twice as deep; node-local staging must gain :data:`C5_SPEEDUP` x;
* **the regime**: none; both claims apply only where the data is on Lustre (the launch's recorded
  ``storage.filesystem``): :data:`APPLICABILITY`;
* **the rules**: :func:`hpcbench.experiments.io_formats.rules.rule_c4` and
  :func:`hpcbench.experiments.io_formats.rules.rule_c5`.
"""

from __future__ import annotations

from hpcbench.guide.claims import FIGURE, S22, TECHNIQUE, Claim
from hpcbench.judge.applicability import LUSTRE, requires

#: C4 (guide sec. 2.2, "Storage I/O bottleneck"): reading ImageNet as small files from Lustre "left the GPUs idle
#: 65 % of the time".
GUIDE_C4_IDLE = 0.65
#: C5: "prefetching with buffer = num_workers x batch_size": PyTorch's DataLoader ``prefetch_factor`` (batches in
#: flight per worker) of 1.
GUIDE_PREFETCH = 1

#: The container formats the guide names (tar is measured too, but the claim is about these).
C5_FORMATS = ("hdf5", "tfrecord")
#: C4: small files must leave the accelerator idle at least half the time (the guide: 65 %).
C4_IDLE_LOWER = 0.5
#: C5: a container format must read >= 1.2x the small files' samples/s to "fix" the bottleneck;
#: the guide's buffer must reach >= 90 % of one twice as deep; staging must gain >= 1.2x.
C5_SPEEDUP = 1.2
C5_BUFFER_SHARE = 0.9


def _c4_arithmetic() -> str:
    busy = 1 - GUIDE_C4_IDLE
    return (f"GPU busy <= {busy * 100:.0f} %; removing the I/O stall could speed training up to "
            f"1/{busy:.2f} = {1 / busy:.2f}x")


C4 = Claim("C4", FIGURE, S22,
           "Reading many small files from Lustre overloads its metadata server; training ImageNet "
           "this way left the GPUs idle 65 % of the time.",
           (("GPU idle time", "65 %"), ("cause", "Lustre metadata-server overload from small files")),
           _c4_arithmetic(),
           title="Small files starve the GPUs", headline="65 % GPU idle")
C5 = Claim("C5", TECHNIQUE, S22,
           "Container formats (TFRecord/HDF5), prefetching with buffer = num_workers x batch_size, "
           "and a node-local NVMe cache (BeeOND) fix the storage bottleneck.",
           (("formats", "TFRecord / HDF5"), ("prefetch buffer", "num_workers x batch_size"),
            ("cache", "node-local NVMe via BeeOND")),
           f"a buffer of num_workers x batch_size samples keeps one batch per worker in flight "
           f"(PyTorch DataLoader: prefetch_factor={GUIDE_PREFETCH} batch per worker)",
           title="Formats, prefetch, NVMe cache fix I/O", headline="fixes the storage bottleneck")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C4, C5)
#: C4 is about Lustre's metadata server; C5's fixes are fixes of that bottleneck, so C5 applies exactly
#: where C4 does (each says why in its own words).
C4_APPLIES = requires(LUSTRE.because("; C4 is about Lustre's metadata server, whose small-file cost no local "
                                     "file system has"))
C5_APPLIES = requires(LUSTRE.because("; C5's fixes are for C4's Lustre metadata-server bottleneck, which no "
                                     "local file system has"))
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C4": C4_APPLIES, "C5": C5_APPLIES}
