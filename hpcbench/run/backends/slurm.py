"""The SLURM backend of the suite runner: sbatch, then poll until every task is final.

* Node-local tasks (one node each) become ONE array job, ``--array=0-K[%M]``; array
  element i runs task i of a JSON manifest on whichever node SLURM gives it, and
  its records name that node, so a slow node shows up in the report.
* Multi-node tasks become one job each with ``--nodes=N``; the notebook runs on the
  first node and starts every rank as a task of one srun step.
* The scripts come from the templates in ``slurm/`` (``HPCBENCH_SLURM_TEMPLATES``
  for a copy) and are written into ``RUN_DIR/slurm/`` before submission.
* Parameter values never pass through a shell: they travel in the manifest.
* ``options["retries"] = N`` (``--retries N``): a task whose *job* failed is resubmitted up
  to N times after the repair step (:mod:`hpcbench.fault.retry`); each earlier try is kept
  under ``RUN_DIR/attempts/`` and listed in the new status's ``tries``.

Every SLURM client call has a timeout; ``SLURM_CONF`` and friends come from the
environment (``hpcbench cluster up`` prints what to export for the emulated cluster).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from string import Template
from typing import Any, Mapping

from hpcbench.core.errors import HpcbenchError
from hpcbench.core.paths import TEMPLATES_ENV, templates_dir
from hpcbench.experiments import EXPERIMENTS
from hpcbench.fault.retry import RetryPolicy, job_failure_reason, repair, repair_targets
from hpcbench.run.backends.base import Backend, RunContext
from hpcbench.run.rundir import (TaskStatus, now, read_status, set_aside_attempt, task_dir, write_json_atomic,
                                 write_status)
from hpcbench.run.suite import TaskSpec

CLIENT_TIMEOUT_S = 60
#: sbatch options a user may set per run; values are checked, never shell-evaluated.
SBATCH_OPTIONS = ("partition", "account", "time", "gres", "cpus_per_task", "qos", "constraint")
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:,=+/@%-]+$")
FINAL_STATES = ("done", "failed", "interrupted")
#: After scancel, seconds to wait for the jobs to leave the queue before marking them
#: interrupted anyway (SLURM's KillWait is 30 s by default).
CANCEL_WAIT_S = 60.0


class SlurmError(HpcbenchError):
    """A SLURM command failed or SLURM is not reachable; names the command and its answer."""


def render_template(name: str, values: dict[str, str]) -> str:
    """Fill ``${placeholders}`` of a template; shell variables such as
    ``${SLURM_ARRAY_TASK_ID}`` are left for the job's shell."""
    path = templates_dir() / name
    if not path.is_file():
        raise SlurmError(f"SLURM template {path} does not exist (set {TEMPLATES_ENV} to a folder holding it)")
    text = path.read_text()
    missing = [k for k in values if f"${{{k}}}" not in text and k != "directives"]
    if missing:
        raise SlurmError(f"SLURM template {path} lacks the placeholder(s) {missing}")
    return Template(text).safe_substitute(values)


def sbatch_directives(options: dict[str, Any]) -> str:
    """``#SBATCH`` lines for the site options (partition, account, time, ...) and raw extras."""
    lines = []
    for key in SBATCH_OPTIONS:
        value = options.get(key)
        if value in (None, ""):
            continue
        value = str(value)
        if not _SAFE_VALUE.match(value):
            raise SlurmError(f"--{key.replace('_', '-')} {value!r}: only letters, digits and _.:,=+/@%- are allowed")
        lines.append(f"#SBATCH --{key.replace('_', '-')}={value}")
    for extra in options.get("sbatch_args") or []:
        if not extra.startswith("--") or not _SAFE_VALUE.match(extra.lstrip("-")):
            raise SlurmError(f"--sbatch-arg {extra!r}: expected one option like --qos=debug "
                             "(letters, digits and _.:,=+/@%- only)")
        lines.append(f"#SBATCH {extra}")
    return "\n".join(lines)


def _client(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]} is not installed: the SLURM backend needs the SLURM client "
                         "commands (Debian: apt-get install slurm-client)") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{shlex.join(argv)}` did not answer within {CLIENT_TIMEOUT_S} s: "
                         "is slurmctld up and SLURM_CONF right?") from None
    if check and proc.returncode != 0:
        raise SlurmError(f"`{shlex.join(argv)}` failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc


def unreachable_message(answer: str, slurm_conf: str | None) -> str:
    """Why the SLURM backend cannot start here, in one paragraph: squeue's own verdict and where to look.

    squeue's answer without a cluster is several lines of DNS and config-source errors; only
    the last one ("fatal: ...") says what went wrong, and none says what to do about it.
    """
    lines = [ln.strip() for ln in answer.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if "fatal" in ln), lines[-1] if lines else "no answer")
    said = said.removeprefix("squeue: ")
    conf = (f"SLURM_CONF={slurm_conf}: is that the cluster's slurm.conf, and is its slurmctld up?" if slurm_conf
            else "SLURM_CONF is not set: point it at the cluster's slurm.conf (on a login node the default "
                 "/etc/slurm/slurm.conf usually is).")
    return (f"--backend slurm: no slurmctld answers (squeue: {said}). Hint: {conf} For the emulated cluster: "
            f"`hpcbench cluster up` (root), then export what it prints; or run on this machine with --backend local")


#: The #SBATCH options that say what a job asks for: what a refusal names as the request.
REQUEST_OPTIONS = ("--job-name", "--nodes", "--ntasks", "--ntasks-per-node", "--cpus-per-task", "--gres", "--gpus",
                   "--gpus-per-node", "--gpus-per-task", "--mem", "--exclusive", "--partition", "--constraint",
                   "--time", "--qos", "--account", "--array")


def refusal_message(script: Path, answer: str) -> str:
    """sbatch's refusal of ``script`` in one line: the job's request (its resource ``#SBATCH`` lines) and
    SLURM's own reason, e.g. ``... (--nodes=1 --gres=gpu:9 ...): Requested node configuration is not
    available``.

    sbatch may say several lines; its last ``error:`` line is SLURM's verdict on the request.
    """
    try:
        text = script.read_text()
    except OSError:
        text = ""
    asked = []
    for line in text.splitlines():
        if not line.startswith("#SBATCH "):
            continue
        for option in line[len("#SBATCH "):].split():
            if option.split("=", 1)[0] in REQUEST_OPTIONS:
                asked.append(option)
    lines = [ln.strip() for ln in answer.splitlines() if ln.strip()]
    said = next((ln for ln in reversed(lines) if "error:" in ln), lines[-1] if lines else "no answer")
    said = said.split("error:", 1)[-1].strip()
    return f"SLURM refused the job ({' '.join(asked) or 'no #SBATCH request'}): {said} (script {script})"


def submit(script: Path) -> str:
    """Submit a job script with ``sbatch --parsable``; its job id.

    Raises:
        SlurmError: sbatch refused it (:func:`refusal_message`: the request and SLURM's reason).
    """
    proc = _client(["sbatch", "--parsable", str(script)], check=False)
    if proc.returncode != 0:
        raise SlurmError(refusal_message(script, proc.stderr or proc.stdout))
    return proc.stdout.strip().split(";")[0]


def cancel(*job_ids: str) -> None:
    """``scancel`` jobs; its answer is not checked (a job may have ended meanwhile)."""
    _client(["scancel", *job_ids], check=False)


def squeue_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """``{job_id or array element id: (state, nodes)}`` of the jobs SLURM still knows."""
    if not job_ids:
        return {}
    proc = _client(["squeue", "-h", "-r", "-j", ",".join(sorted(set(job_ids))), "-o", "%i|%T|%N"], check=False)
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:
            return {}  # every job has left the queue
        raise SlurmError(f"squeue failed ({proc.returncode}): {proc.stderr.strip()}")
    out = {}
    for line in proc.stdout.splitlines():
        jid, state, nodes = (line.split("|") + ["", ""])[:3]
        out[jid.strip()] = (state.strip(), nodes.strip())
    return out


def scontrol_state(job_id: str) -> str | None:
    """The final ``JobState`` while slurmctld still remembers the job (MinJobAge), else None."""
    proc = _client(["scontrol", "show", "job", job_id], check=False)
    m = re.search(r"JobState=(\S+)", proc.stdout)
    return m.group(1) if m else None


def _job_name(suite: str, kind: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"hpcb-{suite}-{kind}")[:64]


def _log_tail(path: str | None, limit: int = 64 << 10) -> str:
    """The last ``limit`` bytes of a log ('' when there is none)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - limit))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


#: Seconds between the runner's looks at its jobs (squeue and the tasks' status files): a job's end is seen up
#: to this late. 2 s by default; a site that asks for gentle squeue use can raise it, the tests lower it.
POLL_ENV = "HPCBENCH_SLURM_POLL_S"


def poll_interval_s(env: Mapping[str, str] = os.environ) -> float:
    """``$HPCBENCH_SLURM_POLL_S`` (default 2), refused with its name unless a number of seconds in [0.1, 600]."""
    raw = env.get(POLL_ENV, "2")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.1 <= value <= 600:
        raise SlurmError(f"{POLL_ENV}={raw!r}: expected the seconds between two looks at the jobs, 0.1 to 600")
    return value


class SlurmBackend(Backend):
    name = "slurm"
    #: ``options["retries"]`` is honoured (the runner refuses it for backends without this).
    retries_supported = True

    def check(self, options: dict[str, Any]) -> None:
        for exe in ("sbatch", "squeue", "scontrol"):
            if shutil.which(exe) is None:
                raise SlurmError(f"{exe} is not on PATH: the SLURM backend needs the SLURM client commands "
                                 "(Debian: apt-get install slurm-client; for the emulated cluster: hpcbench cluster up)")
        sbatch_directives(options)  # bad site options fail before the run dir exists
        poll_interval_s()
        proc = _client(["squeue", "-h", "-o", "%i"], check=False)
        if proc.returncode != 0:
            raise SlurmError(unreachable_message(proc.stderr or proc.stdout, os.environ.get("SLURM_CONF")))

    def run_tasks(self, tasks: list[TaskSpec], ctx: RunContext) -> list[TaskStatus]:
        """Submit ``tasks``, poll them to the end; resubmit job failures ``options["retries"]`` times.

        What is retried is :func:`hpcbench.fault.retry.job_failure_reason`'s rule: a job that
        ended without its task (NODE_FAIL, a killed batch step...) or workers that failed because
        a rank was killed from outside or srun lost a node. A notebook's own error, a stop by
        signal, TIMEOUT and OUT_OF_MEMORY are final.
        """
        retries = int(ctx.options.get("retries") or 0)
        policy = RetryPolicy(max_tries=1 + retries,
                             delay_s=ctx.options.get("retry_delay_s", RetryPolicy.delay_s))
        final: dict[str, TaskStatus] = {}
        todo = list(tasks)
        for try_index in range(policy.max_tries):
            reasons: dict[str, str] = {}
            for t in todo:
                final.pop(t.task_id, None)  # a task not submitted again (stop) keeps its pending file
            ended = self._submit_and_poll(todo, ctx, reasons if try_index + 1 < policy.max_tries else None)
            final.update({s.task_id: s for s in ended})
            if not reasons:
                break
            retry = [t for t in todo if t.task_id in reasons]
            if ctx.stop.requested:
                for t in retry:
                    ctx.progress.done(final[t.task_id])
                break
            self._prepare_retry(retry, reasons, policy, try_index + 1, ctx)
            todo = retry
        order = {t.task_id: i for i, t in enumerate(tasks)}
        return sorted(final.values(), key=lambda s: order[s.task_id])

    def _prepare_retry(self, tasks: list[TaskSpec], reasons: dict[str, str], policy: RetryPolicy,
                       retry_number: int, ctx: RunContext) -> None:
        """Repair, set each failed try aside (``RUN_DIR/attempts/``), write the new attempt's status."""
        run_dir = Path(ctx.run_dir).resolve()
        report = None
        if policy.repair:
            data, checkpoints = [], []
            for t in tasks:
                d, c = repair_targets(t.params)
                data += [p for p in d if p not in data]
                checkpoints += [p for p in c if p not in checkpoints]
            report = repair(data, checkpoints, verify=policy.verify)
            ctx.progress.say(f"repair before retry {retry_number}: {report.summary()}")
        for t in tasks:
            old = read_status(task_dir(run_dir, t.task_id) / "status.json")
            record = {"attempt": old.attempt, "job_id": old.job_id, "state": old.state,
                      "slurm_state": old.slurm_state, "reason": reasons[t.task_id],
                      "error": (old.error or "").splitlines()[0][:300] or None, "node": old.node,
                      "started": old.started, "finished": old.finished,
                      "repair": report.summary() if report else None}
            attempt = set_aside_attempt(run_dir, t.task_id)
            new = TaskStatus.for_task(t)
            new.attempt, new.tries = attempt, [*old.tries, record]
            write_status(run_dir, new)
            ctx.progress.say(f"{t.task_id}: attempt {old.attempt} failed ({reasons[t.task_id]}); resubmitted as "
                             f"attempt {attempt} (retry {retry_number} of {policy.max_tries - 1}); the failed "
                             f"try is kept in {run_dir / 'attempts' / t.task_id / str(old.attempt)}")
        deadline = time.monotonic() + policy.delay_s
        while time.monotonic() < deadline and not ctx.stop.requested:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _submit_and_poll(self, tasks: list[TaskSpec], ctx: RunContext,
                         retry_reasons: dict[str, str] | None) -> list[TaskStatus]:
        """One submission of ``tasks``; fills ``retry_reasons`` with the failures worth another try."""
        run_dir, suite, jobs, options = Path(ctx.run_dir).resolve(), ctx.suite, ctx.jobs, ctx.options
        slurm_dir = run_dir / "slurm"
        log_dir = slurm_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        attempt = 1 + len(list(slurm_dir.glob("submission-*.json")))
        local, multi = [], []
        for t in tasks:
            exp = EXPERIMENTS.get(t.experiment)
            (multi if exp.resources(exp.config.from_dict(t.params)).nodes > 1 else local).append(t)
        base = {"run_dir": shlex.quote(str(run_dir)), "log_dir": shlex.quote(str(log_dir)),
                "python": shlex.quote(sys.executable), "directives": sbatch_directives(options)}
        # --jobs 1 means one task at a time on the whole cluster, multi-node jobs included: the array's %1
        # serialises its elements, and each later job starts after the one submitted before it ends
        # (afterany). Without the chain a 2-node job runs beside an array element or another 2-node job
        # wherever the cluster has free nodes, and on nodes that share cores they measure each other.
        previous: str | None = None

        def after(job: str | None) -> str:
            chain = f"#SBATCH --dependency=afterany:{job}" if jobs == 1 and job else ""
            return "\n".join(line for line in (base["directives"], chain) if line)

        submitted: dict[str, str] = {}  # task id -> job id
        logs: dict[str, str] = {}
        if ctx.stop.requested:
            return []
        try:
            if local:
                manifest = slurm_dir / f"array-{attempt}.json"
                write_json_atomic(manifest, [asdict(t) for t in local])
                name = _job_name(suite, "array")
                script = slurm_dir / f"array-{attempt}.sbatch"
                script.write_text(render_template("array.sbatch.template", {
                    **base, "directives": after(previous), "job_name": name, "last_index": str(len(local) - 1),
                    "concurrency": f"%{jobs}" if jobs else "", "manifest": shlex.quote(str(manifest))}))
                job = previous = submit(script)
                ctx.stop.cancel_commands.append(["scancel", job])
                for i, t in enumerate(local):
                    submitted[t.task_id] = f"{job}_{i}"
                    logs[t.task_id] = str(log_dir / f"{name}-{job}_{i}.out")
            for t in multi:
                manifest = slurm_dir / f"{t.task_id}-{attempt}.json"
                write_json_atomic(manifest, [asdict(t)])
                exp = EXPERIMENTS.get(t.experiment)
                nodes = exp.resources(exp.config.from_dict(t.params)).nodes
                name = _job_name(suite, t.task_id)
                script = slurm_dir / f"{t.task_id}-{attempt}.sbatch"
                script.write_text(render_template("multinode.sbatch.template", {
                    **base, "directives": after(previous), "job_name": name, "nodes": str(nodes), "index": "0",
                    "manifest": shlex.quote(str(manifest))}))
                job = previous = submit(script)
                ctx.stop.cancel_commands.append(["scancel", job])
                submitted[t.task_id] = job
                logs[t.task_id] = str(log_dir / f"{name}-{job}.out")
        except SlurmError:
            # A refused job (more GPUs than a node has...) ends the submission: the jobs already queued
            # for this run would otherwise run with nobody polling them.
            jobs_in = sorted({j.split("_")[0] for j in submitted.values()})
            if jobs_in:
                cancel(*jobs_in)
            raise
        write_json_atomic(slurm_dir / f"submission-{attempt}.json",
                          {"jobs": submitted, "logs": logs, "options": options})
        for t in tasks:
            st = read_status(task_dir(run_dir, t.task_id) / "status.json")
            st.job_id, st.batch_log, st.slurm_state = submitted[t.task_id], logs[t.task_id], "PENDING"
            write_status(run_dir, st)
        ctx.progress.say(f"submitted {len(local)} array element(s) and {len(multi)} multi-node job(s); "
                         f"scripts in {slurm_dir}")
        return self._poll(tasks, run_dir, submitted, logs, ctx, retry_reasons)

    def _poll(self, tasks: list[TaskSpec], run_dir: Path, submitted: dict[str, str], logs: dict[str, str],
              ctx: RunContext, retry_reasons: dict[str, str] | None = None) -> list[TaskStatus]:
        """Poll until every task is final; with ``retry_reasons``, record there the failures to retry."""
        final: dict[str, TaskStatus] = {}
        array_jobs = {j.split("_")[0] for j in submitted.values()}
        cancelled_at: float | None = None
        while len(final) < len(tasks):
            if ctx.stop.requested and cancelled_at is None:
                # scancel makes SLURM signal every job step; each task's `hpcbench task`
                # ends its kernel and ranks and records itself as interrupted.
                _client(["scancel", *sorted(array_jobs)], check=False)
                ctx.progress.say(f"cancelled SLURM job(s) {', '.join(sorted(array_jobs))}; waiting for them to end")
                cancelled_at = time.monotonic()
            queue = squeue_states(sorted(array_jobs))
            counts = {"PENDING": 0, "RUNNING": 0}
            running = []
            for t in tasks:
                if t.task_id in final:
                    continue
                job = submitted[t.task_id]
                st = read_status(task_dir(run_dir, t.task_id) / "status.json")
                if job in queue and (cancelled_at is None or time.monotonic() - cancelled_at < CANCEL_WAIT_S):
                    state = queue[job][0]
                    counts[state] = counts.get(state, 0) + 1
                    if state == "RUNNING":
                        running.append(t.task_id)
                    continue
                ended_early = st.state not in FINAL_STATES
                if ended_early:
                    # The job left the queue without the task writing a final status:
                    # cancelled (by our stop or by someone), killed (time, memory, node
                    # failure) or never started.
                    slurm = scontrol_state(job) or "unknown (no longer known to slurmctld)"
                    st.slurm_state = slurm
                    if ctx.stop.requested:
                        st.state, st.error = "interrupted", f"{ctx.stop.reason()}; SLURM job {job} cancelled ({slurm})"
                    else:
                        st.state = "failed"
                        st.error = f"SLURM job {job} ended ({slurm}) before the task finished; see {logs[t.task_id]}"
                    st.finished = st.finished or now()
                    write_status(run_dir, st)
                else:
                    st.slurm_state = "COMPLETED" if st.state == "done" else (scontrol_state(job) or st.slurm_state)
                    if ctx.stop.requested and st.state == "interrupted":
                        # The task saw scancel's SIGTERM; what stopped it was the run's signal.
                        st.error = f"{ctx.stop.reason()}; SLURM job {job} cancelled ({st.error})"
                    write_status(run_dir, st)
                final[t.task_id] = st
                reason = None
                if retry_reasons is not None and not ctx.stop.requested:
                    reason = job_failure_reason(state=st.state, ended_early=ended_early, slurm_state=st.slurm_state,
                                                error=st.error, logs=[_log_tail(st.log), _log_tail(st.batch_log)])
                if reason:
                    retry_reasons[t.task_id] = reason
                    ctx.progress.say(f"{t.task_id}: failed ({reason}); it will be retried")
                else:
                    ctx.progress.done(st)
            ctx.progress.tick(running, pending=counts.get("PENDING", 0), running=counts.get("RUNNING", 0))
            if len(final) < len(tasks):
                time.sleep(poll_interval_s())
        order = {t.task_id: i for i, t in enumerate(tasks)}
        return sorted(final.values(), key=lambda s: order[s.task_id])

    def live_tasks(self, statuses: list[TaskStatus]) -> dict[str, str]:
        """Tasks whose SLURM job is still queued or running (``suite resume`` leaves them be)."""
        jobs = {s.task_id: s.job_id for s in statuses if s.job_id and s.state not in FINAL_STATES}
        if not jobs or shutil.which("squeue") is None:
            return {}
        queue = squeue_states(sorted({j.split("_")[0] for j in jobs.values()}))
        return {task: queue[job][0] for task, job in jobs.items() if job in queue}
