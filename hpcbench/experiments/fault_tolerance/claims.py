"""C11 and C15 declared: the guide's words and figures, each once, and the bands the rules judge with.

Everything the ledger, ``hpcbench list``, the catalogue and the notebook know about C11 and C15 is here:

* **words and figures**: :data:`C11` and :data:`C15` (the guide's sentences, their figures quoted, their
  kinds, their arithmetic); :data:`GUIDE_C11_FULL_EVERY_S`, :data:`GUIDE_C11_LIGHT_EVERY_S` and
  :data:`GUIDE_C15_TRIES`, the numbers they state (the config's defaults, the worker's arms and the
  rules read them from here);
* **C11's bands**: a save repeated at the guide's interval costs at most :data:`C11_OVERHEAD_PCT` % of the
  wall time (our bound for "affordable"; :func:`affordable_save_s`, the longest save that does); zstd writes
  at least :data:`C11_MIN_RATIO` x fewer bytes than the raw state; at least :data:`C11_MIN_NEWEST_SHARE` of
  failures restore from the newest complete checkpoint; the mean work lost per failure is at most one light
  interval;
* **C15's bands**: at least :data:`C15_MIN_SHARE` of jobs follow the wrapper's policy and of damaged shards
  are repaired before the next try; failed jobs with the wrapper over ``p_try^3`` within
  :func:`survival_reference`; what the platform can show: fewer than :data:`MIN_EXPECTED_FAILURES` expected
  failures cannot tell 3 tries from 2 or 4;
* **the regime**: none (techniques, judged on whether they work as described); C11 applies only where the
  checkpoints go to storage, not to a file system held in memory (:data:`APPLICABILITY`);
* **the rules**: :func:`hpcbench.experiments.fault_tolerance.rules.rule_c11` and
  :func:`hpcbench.experiments.fault_tolerance.rules.rule_c15`.
"""

from __future__ import annotations

from hpcbench.guide.claims import S6, S25, TECHNIQUE, Claim
from hpcbench.judge.applicability import STORAGE_WRITE, requires
from hpcbench.judge.verdict import Reference

#: C11 (guide sec. 6, "Best practices"): "save the full training state every hour".
GUIDE_C11_FULL_EVERY_S = 3600
#: C11: "and a light checkpoint every 10 minutes".
GUIDE_C11_LIGHT_EVERY_S = 600
#: C15 (guide sec. 2.5, "Too little fault tolerance"): the job wrapper reruns srun "up to 3 times" (retry from 0
#: while < 3): 3 runs in all.
GUIDE_C15_TRIES = 3

#: C11: a save repeated at the guide's interval may cost at most this share of the wall time, in %.
C11_OVERHEAD_PCT = 1.0
#: C11: zstd must write at least 1 % fewer bytes than the raw state.
C11_MIN_RATIO = 1.01
#: C11: failures restored from the newest complete checkpoint (or a newer one), at least.
C11_MIN_NEWEST_SHARE = 0.9
#: C15: jobs whose wrapper followed its policy, and damaged shards repaired before the next try, at least.
C15_MIN_SHARE = 0.9
#: C15: fewer failures than this expected at p_try^3 over all launches cannot tell 3 tries from 2 or 4.
MIN_EXPECTED_FAILURES = 10


def affordable_save_s(interval_s: float, pct: float = C11_OVERHEAD_PCT) -> float:
    """The longest save that costs at most ``pct`` % of the wall time at ``interval_s``:
    save / (interval + save) <= pct / 100  <=>  save <= interval x pct / (100 - pct)."""
    return interval_s * pct / (100.0 - pct)


def survival_reference(p: float) -> Reference:
    """measured / p^3 within halfway (log scale) to the 2- and 4-try models: [p^0.5, p^-0.5]."""
    return Reference(1.0, lower=p ** 0.5, upper=p ** -0.5, unit="x",
                     source=f"'reruns up to {GUIDE_C15_TRIES} times' with independent tries: p^{GUIDE_C15_TRIES}, "
                            f"not p^2 or p^4")


def _c11_arithmetic() -> str:
    return (f"at most {GUIDE_C11_LIGHT_EVERY_S // 60} minutes of work lost per failure; each light checkpoint must "
            f"write in well under {GUIDE_C11_LIGHT_EVERY_S} s to keep its overhead small")


def _c15_arithmetic() -> str:
    return (f"with retry starting at 0, the job survives {GUIDE_C15_TRIES - 1} failures ({GUIDE_C15_TRIES} runs in "
            f"all); if runs fail independently with probability p, the job fails with p^{GUIDE_C15_TRIES}")


C11 = Claim("C11", TECHNIQUE, S6,
            "Save the full training state every hour and a light checkpoint every 10 minutes, "
            "compressed with Zstandard.",
            (("full checkpoint", "every hour"), ("light checkpoint", "every 10 minutes"),
             ("compression", "Zstandard")),
            _c11_arithmetic(),
            title="Two-tier checkpoints", headline="<= 10 min of work lost")
C15 = Claim("C15", TECHNIQUE, S25,
            "Three-level fault tolerance: checkpoints named by host and SLURM job id, a dataset that "
            "repairs a shard and retries, and a job wrapper that reruns srun up to 3 times.",
            (("checkpoint", "epoch + model + optimizer state, named by hostname and SLURM job id"),
             ("dataset", "on IOError/checksum error repair shard idx // 1000, retry"),
             ("job wrapper", "srun --mpi=pmi2 rerun up to 3 times, repair_storage between tries")),
            _c15_arithmetic(),
            title="Three-level fault tolerance", headline="srun retried up to 3 times")
#: The claims this experiment declares (its SPEC's ``ClaimSet.declared``).
CLAIMS = (C11, C15)
#: C11's overhead is a storage write: a checkpoint folder in memory measures none.
C11_APPLIES = requires(STORAGE_WRITE.because(": no storage write was measured"))
#: What each claim needs of the platform (its SPEC's ``ClaimSet.applicability``; ``hpcbench doctor`` reads it).
APPLICABILITY = {"C11": C11_APPLIES}
