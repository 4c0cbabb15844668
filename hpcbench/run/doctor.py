"""``hpcbench doctor``: what this machine or cluster lets the suite measure, claim by claim.

Three steps, each reading what the rest of hpcbench already reads:

1. **The survey** (:func:`hpcbench.system.preflight.survey`): SLURM, the GPUs and their links, the NICs and
   what they sit near, NCCL, the run dir's and the data's file systems, CPUs and NUMA.
2. **A launch here** (:func:`launch_here`): the facts a task on this platform would record
   (:func:`hpcbench.system.facts.launch_facts` at the nodes one task can have: ``SLURM, N node(s)``, the
   emulated cluster's shaped link, or emulated nodes on one loopback; InfiniBand; GPUs), the workers'
   backend as ``backend: auto`` picks it (NCCL with a GPU per rank, else gloo: :func:`auto_backend`) and
   the ``storage.filesystem`` the workers would record for the data and for the run dir.
3. **Claim by claim** (:func:`judge_claims`): each claim's :class:`~hpcbench.judge.applicability.Requirement`,
   declared in its experiment (``ClaimSet.applicability``), asked of those facts: the same conditions its
   rule asks of every launch group, so "cannot rule, because ..." here is the ledger's "not applicable: ..."
   there, word for word. A claim without a requirement "can rule (no platform condition)"; every claim shows
   its experiment's default layout (its ``Resources``), and one that needs more nodes than a task can have
   here cannot rule.

Then :func:`readiness`: the suite can run here when the ``demo`` suite's tasks fit what one task can have
(:func:`hpcbench.run.limits.plan_run` against the surveyed capacity), torch and papermill import, the run
dir's folder is writable and, for SLURM, ``sbatch`` is on PATH. ``hpcbench doctor`` exits 0 then, else 1
with the reasons.

``--backend slurm`` runs the survey as a one-node job (:func:`run_as_job`, ``slurm/doctor.sbatch.template``)
with the suite's sbatch options, and prints what the node answered.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hpcbench.core.errors import ConfigError, HpcbenchError
from hpcbench.core.units import approx_bytes
from hpcbench.experiments import EXPERIMENTS, Resources, all_claims, declaring_experiment
from hpcbench.judge.applicability import DATA, RUN_DIR, Requirement
from hpcbench.system.facts import launch_facts
from hpcbench.system.inventory import Probe
from hpcbench.system.preflight import is_available, is_live, survey, unavailable

__all__ = ["doctor", "launch_here", "judge_claims", "readiness", "auto_backend", "render", "run_as_job",
           "LaunchHere", "DEMO_SUITE", "EMULATED_SPLIT_NODES"]

#: The suite whose needs decide whether the suite can run here (exit 0): the one `make demo` runs.
DEMO_SUITE = "demo"
#: Nodes a task gets on one machine: emulated nodes on one loopback, as many as it asks; two show what any
#: multi-node claim would find there.
EMULATED_SPLIT_NODES = 2
#: Python packages every task needs: the workers (torch) and the notebooks' executor (papermill).
REQUIRED_PACKAGES = ("torch", "papermill")


def auto_backend(gpus: int, ranks_per_node: int) -> str:
    """The workers' backend under ``backend: auto``: NCCL when the node has a GPU for every local rank, else gloo.

    The rule of :func:`hpcbench.dist.worker.resolve_backend`, which asks torch.cuda on the node; here the GPU
    count is the driver's, read without torch.
    """
    return "nccl" if gpus > 0 and gpus >= ranks_per_node else "gloo"


@dataclass(frozen=True)
class LaunchHere:
    """What a task on this platform would be, and the facts it would record."""

    backend: str
    """The suite's backend: ``slurm`` where sinfo lists a usable node, else ``local``."""
    nodes: int
    """The most nodes one task can have (SLURM: the partition's usable nodes; local: emulated)."""
    where: str
    """The place in words: "partition gpu (4 usable node(s))", "this machine (emulated nodes, one loopback)"."""
    facts: dict[str, Any]
    """:func:`~hpcbench.system.facts.launch_facts` at :attr:`nodes`: cluster, link, infiniband, gpus."""
    gpus: int
    """GPUs of a node (the surveyed one)."""
    storage: dict[str, str]
    """``storage.filesystem`` as the workers would record it, for :data:`DATA` and :data:`RUN_DIR`."""
    layout: str = ""
    """``NODESxGPUS`` of a task spanning every node here (a sized suite's ``--layout``), or why there is none."""
    notes: list[str] = field(default_factory=list)
    """What the reader should know about the prediction (e.g. a login node without the compute nodes' GPUs)."""

    def facts_for(self, resources: Resources, storage: str = "", *, nodes: int | None = None) -> dict[str, Any]:
        """The facts a launch of an experiment with ``resources`` would record here.

        Args:
            storage: :data:`DATA` or :data:`RUN_DIR`: which folder's file system ``storage.filesystem`` names.
            nodes: the launch's nodes; default: the most a task can have here (on one machine, as many
                emulated nodes as it asks, at least :data:`EMULATED_SPLIT_NODES`).
        """
        if nodes is None:
            nodes = self.nodes if self.backend == "slurm" else max(resources.nodes, self.nodes)
        facts = {**self.facts, "params": {"nodes": nodes}, "backend": auto_backend(self.gpus, resources.ranks_per_node)}
        if storage:
            facts["storage.filesystem"] = self.storage[storage]
        return facts


def launch_here(report: Mapping[str, Any], probe: Probe) -> LaunchHere:
    """The launch a suite would make on the surveyed platform, and its facts (module docstring, step 2)."""
    slurm = report["slurm"]
    partition = slurm.get("partition")
    partitions = {p["name"]: p for p in slurm["partitions"]} if isinstance(slurm.get("partitions"), list) else {}
    gpus = int(report["gpus"].get("count") or 0)
    storage = {DATA: report["filesystems"]["data"].get("filesystem", "unknown"),
               RUN_DIR: report["filesystems"]["run_dir"].get("filesystem", "unknown")}
    storage = {k: v if is_available(v) else "unknown" for k, v in storage.items()}
    notes: list[str] = []
    if isinstance(partition, str) and partitions.get(partition, {}).get("usable"):
        usable = partitions[partition]["usable"]
        env = {**probe.env, "SLURM_JOB_NUM_NODES": str(usable)}
        facts = launch_facts(nodes=usable, env=env, root=probe.root)
        gres = partitions[partition]["gres"]
        declared = gres_gpus(gres)
        if gpus == 0 and declared:
            notes.append(f"this node has no GPU while partition {partition}'s nodes declare {', '.join(gres)}: "
                         f"read one of them with `hpcbench doctor --backend slurm --partition {partition}`")
        per_node = gpus or declared
        layout = f"{usable}x{per_node}" if per_node else unavailable(f"neither this node nor partition {partition}'s "
                                                                     f"GRES has a GPU")
        return LaunchHere("slurm", usable, f"SLURM partition {partition} ({usable} usable node(s))", facts, gpus,
                          storage, layout, notes)
    if slurm.get("reachable"):
        notes.append(f"SLURM answers but no usable node was found in the partition ({partition}): tasks would run "
                     f"on this machine")
    facts = launch_facts(nodes=EMULATED_SPLIT_NODES, env=probe.env, root=probe.root)
    layout = f"1x{gpus}" if gpus else unavailable("no GPU on this machine")
    return LaunchHere("local", EMULATED_SPLIT_NODES, f"this machine ({facts['cluster']} for multi-node tasks)",
                      facts, gpus, storage, layout, notes)


def gres_gpus(gres: list[str]) -> int:
    """GPUs per node a partition's GRES declare (``gpu:a100:8`` -> 8; the most of several kinds); 0 if none."""
    counts = [int(m.group(1)) for entry in gres for item in entry.split(",")
              if (m := re.fullmatch(r"gpu(?::[^:]+)?:(\d+)", item.strip()))]
    return max(counts, default=0)


def _needs(resources: Resources) -> str:
    return f"{resources.nodes} node(s) x {resources.ranks_per_node} rank(s)" + (", GPU" if resources.gpu else "")


def judge_claims(here: LaunchHere) -> list[dict[str, Any]]:
    """Per claim C1..C17: can this platform rule on it, and if not, why (module docstring, step 3)."""
    out = []
    for claim in all_claims():
        exp = EXPERIMENTS.get(declaring_experiment(claim.id))
        resources = exp.resources(exp.config())
        requirement: Requirement | None = exp.claims.applicability.get(claim.id)
        conditions, reasons = [], []
        for cond in (requirement.conditions if requirement is not None else ()):
            why = cond.why_not(here.facts_for(resources, cond.storage))
            conditions.append({"name": cond.name, "needs": cond.needs, "met": why is None, "why_not": why})
            if why is not None:
                reasons.append(why)
        if here.backend == "slurm" and resources.nodes > here.nodes:
            reasons.append(f"{exp.name} needs {resources.nodes} node(s) by default; {here.where} has {here.nodes}")
        if resources.gpu and here.gpus < resources.ranks_per_node:
            reasons.append(f"{exp.name} needs a GPU per rank ({resources.ranks_per_node}); this node has {here.gpus}")
        if reasons:
            verdict = "cannot rule: " + "; ".join(reasons)
        elif requirement is None:
            verdict = "can rule (no platform condition)"
        else:
            verdict = "can rule: " + requirement.needs()
            # The platform allows it; does the experiment's default layout use it? (C2 runs one node by default.)
            default = next((why for c in requirement.conditions
                            if (why := c.why_not(here.facts_for(resources, c.storage, nodes=resources.nodes)))), None)
            if default is not None:
                verdict += f" (not with its default {resources.nodes} node(s): {default}; give it -p nodes=2 or more)"
        out.append({"claim": claim.id, "kind": claim.kind, "title": claim.title, "experiment": exp.name,
                    "can_rule": not reasons, "verdict": verdict, "conditions": conditions, "why_not": reasons,
                    "needs": _needs(resources), "resources": asdict(resources)})
    return out


def _capacity(report: Mapping[str, Any], here: LaunchHere):
    """What one task can have here, from the survey (the limits' :class:`~hpcbench.run.limits.Capacity`)."""
    from hpcbench.run.limits import Capacity

    if here.backend == "slurm":
        partition = next(p for p in report["slurm"]["partitions"] if p["name"] == report["slurm"]["partition"])
        memory = partition["memory_mib_min"]
        return Capacity("slurm", f"each SLURM node of partition {partition['name']}",
                        memory_bytes=memory << 20 if memory else None, per_node=True,
                        memory_source="(the smallest node's memory in sinfo)")
    return Capacity("local", "this machine", cores=report.get("usable_cpus"),
                    memory_bytes=report.get("mem_available_bytes"),
                    memory_source="available (MemAvailable, /proc/meminfo)", gpus=here.gpus)


def readiness(report: Mapping[str, Any], here: LaunchHere, probe: Probe) -> dict[str, Any]:
    """Whether the suite can run here: the demo suite's needs, the packages, the run dir, SLURM's client.

    Returns:
        ``{"ok": bool, "backend": ..., "problems": [...], "checked": [...]}``: each problem one sentence
        naming what is missing; ``checked`` says what was looked at.
    """
    from hpcbench.run.limits import plan_run
    from hpcbench.run.suite import load_suite

    problems, checked = [], []
    for package in REQUIRED_PACKAGES:
        if importlib.util.find_spec(package) is None:
            problems.append(f"the Python package {package} is not installed in {sys.prefix} (make setup installs it)")
    checked.append(f"packages {', '.join(REQUIRED_PACKAGES)} importable")
    run_dir = report["filesystems"]["run_dir"]
    if is_live(probe):
        if run_dir.get("writable") is False:
            problems.append(f"--out {run_dir['path']}: {run_dir['checked_at']} is not writable")
        checked.append(f"run dir folder writable ({run_dir.get('checked_at', run_dir['path'])})")
    if here.backend == "slurm":
        if shutil.which("sbatch", path=probe.env.get("PATH", os.defpath)) is None:
            problems.append("sinfo answers but sbatch is not on PATH: the SLURM backend submits with it")
        checked.append("sbatch on PATH")
    suite = load_suite(DEMO_SUITE)
    plan = plan_run(suite, _capacity(report, here))
    problems += plan.problems
    if here.backend == "slurm":  # a job asking for more nodes than the partition can give pends for ever
        problems += [f"{t.task_id}: needs {t.resources.nodes} node(s); {here.where} has {here.nodes}"
                     for t in plan.tasks if t.resources.nodes > here.nodes]
    checked.append(f"the {DEMO_SUITE} suite's {len(suite.tasks)} task(s) against {plan.capacity.describe()}")
    return {"ok": not problems, "backend": here.backend, "problems": problems, "checked": checked}


def doctor(probe: Probe, *, out_dir: str | os.PathLike = "results", data_dir: str | os.PathLike | None = None,
           partition: str | None = None) -> dict[str, Any]:
    """The whole preflight, as one JSON-able dict: ``survey``, ``launch``, ``claims``, ``ready``.

    Args:
        probe: what to read (``Probe(Path("/"), os.environ)`` for this machine).
        out_dir: where run dirs go (the suite's ``--out``).
        data_dir: the data set's folder (default: the run dir, where experiments generate their data).
        partition: the SLURM partition a suite would use (default: sinfo's default partition).

    Raises:
        ConfigError: the probe's root is no folder.
    """
    if not probe.root.is_dir():
        raise ConfigError(f"--root {probe.root}: no such folder (give / or a recorded node's folder)")
    report = survey(probe, out_dir=out_dir, data_dir=data_dir, partition=partition)
    here = launch_here(report, probe)
    return {"survey": report,
            "launch": {"backend": here.backend, "nodes": here.nodes, "where": here.where, "facts": here.facts,
                       "gpus": here.gpus, "storage": here.storage, "layout": here.layout, "notes": here.notes,
                       "backend_of_workers": auto_backend(here.gpus, 1)},
            "claims": judge_claims(here),
            "ready": readiness(report, here, probe)}


# -- the text table ---------------------------------------------------------------------------

def _gib(mib: int | None) -> str:
    return approx_bytes(mib << 20) if mib else "memory unknown"


def _slurm_lines(slurm: Mapping[str, Any]) -> list[tuple[str, str]]:
    source = f" ({slurm['version_source']})" if is_available(slurm["version"]) and slurm.get("version_source") else ""
    rows = [("version", f"{slurm['version']}{source}")]
    config = slurm["config"]
    if isinstance(config, dict):
        rows.append(("configuration", ", ".join(f"{k} {v}" for k, v in config.items())))
    else:
        rows.append(("configuration", config))
    partitions = slurm["partitions"]
    if isinstance(partitions, list):
        for p in partitions:
            states = ", ".join(f"{n} {s}" for s, n in p["states"].items())
            gres = f"; GRES {', '.join(p['gres'])}" if p["gres"] else "; no GRES"
            rows.append((f"partition {p['name']}{'*' if p['default'] else ''}",
                         f"{p['nodes']} node(s): {states}; {p['usable']} usable; {p['cpus_min']} CPUs, "
                         f"{_gib(p['memory_mib_min'])} (smallest node){gres}"))
        rows.append(("nodes", ", ".join(f"{n['node']} {n['state']}" for n in slurm["nodes"])))
    else:
        rows.append(("partitions, nodes", partitions))
    job = slurm["job"]
    rows.append(("job", ", ".join(f"{k} {v}" for k, v in job.items()) if isinstance(job, dict) else job))
    return rows


def _gpu_lines(gpus: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("driver", str(gpus["driver"]))]
    devices = gpus["devices"]
    if not isinstance(devices, list):
        return rows + [("GPUs", devices)]
    for d in devices:
        memory = d["memory_gib"]
        memory = f"{memory:g} GiB" if isinstance(memory, (int, float)) else memory
        numa = d.get("numa_node", unavailable("not on the PCI bus"))
        rows.append((d["name"], f"{d['model']}, {memory}; PCI {d.get('pci', '?')}, NUMA node {numa} ({d['source']})"))
    links = gpus["links"]
    if isinstance(links, dict):
        pairs = "; ".join(f"{link} between {n} pair(s)" for link, n in links["gpu_pairs"].items())
        rows.append(("GPU links", f"{pairs} ({links['source']})"))
        devs = links["devices"]
        rows.append(("matrix", "      " + " ".join(f"{d:>5}" for d in devs)))
        for name in devs:
            rows.append(("", f"{name:<5} " + " ".join(f"{links['matrix'].get(name, {}).get(d, ''):>5}" for d in devs)))
        if links["nic_names"]:
            rows.append(("", "; ".join(f"{k} = {v}" for k, v in links["nic_names"].items())))
    else:
        rows.append(("GPU links", links))
    return rows


def _nic_lines(nics: Any) -> list[tuple[str, str]]:
    if not isinstance(nics, list):
        return [("NICs", nics)]
    rows = []
    for n in nics:
        if n["link"] == "infiniband":
            ports = n["ports"]
            link = ("; ".join(f"port {p['port']}: {p['rate']}, {p['state']}, {p['link_layer']}" for p in ports)
                    if isinstance(ports, list) else ports)
        else:
            link = f"Ethernet, {n['rate']}"
        near = n["near"]
        close = f"near {', '.join(near['gpus'])} ({near['how']})" if near["gpus"] else f"near no GPU ({near['how']})"
        rows.append((n["name"], f"{link}; NUMA node {n['numa_node']}; {close}"))
    return rows


def _fs_line(fs: Mapping[str, Any]) -> str:
    if not is_available(fs.get("filesystem")):
        return f"{fs['path']}: {fs['filesystem']}"
    free = fs["free_bytes"]
    free = f"{approx_bytes(free)} free of {approx_bytes(fs['size_bytes'])}" if isinstance(free, int) else f"free space {free}"
    return f"{fs['path']}: {fs['filesystem']} ({fs['kind']}, {fs['device']}); {free}"


def _cpu_lines(cpus: Mapping[str, Any]) -> list[tuple[str, str]]:
    memory = cpus["memory_gib"]
    memory = f"{memory:.1f} GiB memory" if isinstance(memory, (int, float)) else f"memory {memory}"
    if "numa" not in cpus:
        return [("CPUs", f"{cpus['model']}; {memory}; topology {cpus['topology']}")]
    rows = [("CPUs", f"{cpus['model']}; {cpus['sockets']} socket(s), {cpus['cores']} cores, {cpus['cpus']} CPUs"
                     f"{' (SMT)' if cpus['smt'] else ''}; {memory}")]
    for n in cpus["numa"]:
        gib = n["memory_gib"]
        rows.append((f"NUMA node {n['node']}", f"CPUs {n['cpus']}, " + (f"{gib:g} GiB" if isinstance(gib, (int, float))
                                                                     else f"memory {gib}")))
    return rows


def render(result: Mapping[str, Any]) -> str:
    """The preflight as text: one section per part, the launch here, one line per claim, the verdict."""
    s = result["survey"]
    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("SLURM", _slurm_lines(s["slurm"])),
        ("GPUs (this node)", _gpu_lines(s["gpus"])),
        ("NICs (this node)", _nic_lines(s["nics"])),
        ("NCCL", [("version", str(s["nccl"]["version"])),
                  ("torch's", str(s["nccl"]["torch"])),
                  ("libraries", ", ".join(f"{lib['version']} ({lib['path']})" for lib in s["nccl"]["libraries"])
                   if isinstance(s["nccl"]["libraries"], list) else s["nccl"]["libraries"]),
                  ("NCCL_* set", " ".join(f"{k}={v}" for k, v in s["nccl"]["variables"].items())
                   or "no NCCL_* variable set")]),
        ("File systems", [("run dir", _fs_line(s["filesystems"]["run_dir"])),
                          ("data", _fs_line(s["filesystems"]["data"]))]),
        ("CPUs and NUMA (this node)", _cpu_lines(s["cpus"])),
    ]
    launch = result["launch"]
    facts = launch["facts"]
    link = f", link {facts['link_rate_bps'] / 1e6:g} Mbit/s" if "link_rate_bps" in facts else ""
    sections.append(("A launch here (the facts the rules read)", [
        ("backend", f"{launch['backend']}: {launch['where']}"),
        ("layout", f"{launch['layout']} (nodes x GPUs per node, a sized suite's --layout)"
         if is_available(launch["layout"]) else launch["layout"]),
        ("facts", f"cluster {facts['cluster']}{link}; infiniband {facts['infiniband']}; "
                  f"{int(facts['gpus'])} GPU(s), so backend {launch['backend_of_workers']} (auto: NCCL with a GPU "
                  f"per rank); "
                  f"storage.filesystem: data {launch['storage'][DATA]}, run dir {launch['storage'][RUN_DIR]}"),
        *[("note", note) for note in launch["notes"]]]))
    width = max(len(k) for _, rows in sections for k, _ in rows)
    lines = [f"hpcbench doctor on {s['host']} (read under {s['root']})"]
    for title, rows in sections:
        lines.append(f"\n{title}")
        lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    lines.append("\nClaim by claim (each claim's platform conditions, as its rule reads them; its experiment's "
                 "default layout)")
    exp_width = max(len(c["experiment"]) for c in result["claims"])
    for c in result["claims"]:
        lines.append(f"  {c['claim']:<4} {c['kind']:<9} {c['experiment']:<{exp_width}}  {c['verdict']}; "
                     f"needs {c['needs']}")
    ready = result["ready"]
    if ready["ok"]:
        lines.append(f"\nReady: the suite can run here (--backend {ready['backend']}); checked: "
                     + "; ".join(ready["checked"]) + ".")
    else:
        lines.append(f"\nNot ready (--backend {ready['backend']}):\n  " + "\n  ".join(ready["problems"]))
    return "\n".join(lines)


# -- as a SLURM job ---------------------------------------------------------------------------

def write_job(folder: Path, *, out_dir: str, data_dir: str | None, options: Mapping[str, Any]) -> Path:
    """The one-node job script that runs ``python -m hpcbench doctor --json`` on a compute node.

    Returns:
        its path (``folder/doctor.sbatch``); the node writes ``folder/doctor.json`` and ``folder/doctor.out``.
    """
    from hpcbench.run.backends.slurm import render_template, sbatch_directives

    folder = folder.resolve()
    out = str(Path(out_dir).resolve())
    partition = options.get("partition")
    script = folder / "doctor.sbatch"
    script.write_text(render_template("doctor.sbatch.template", {
        "job_name": "hpcb-doctor", "folder": shlex.quote(str(folder)), "log": shlex.quote(str(folder / "doctor.out")),
        "directives": sbatch_directives(dict(options)), "python": shlex.quote(sys.executable),
        "out": shlex.quote(out), "data": shlex.quote(str(Path(data_dir).resolve()) if data_dir else out),
        "partition": f"--partition {shlex.quote(str(partition))}" if partition else "",
        "result": shlex.quote(str(folder / "doctor.json"))}))
    return script


def run_as_job(*, out_dir: str, data_dir: str | None, options: Mapping[str, Any],
               say=lambda text: print(text, file=sys.stderr)) -> dict[str, Any]:
    """Submit the doctor as a one-node SLURM job, wait for it, and return what the node answered.

    The job's files go to ``OUT/doctor-<timestamp>/`` (the run dirs' folder, which the nodes see).

    Raises:
        SlurmError: SLURM is not reachable or refused the job (before anything is written for a refusal
            of the options).
        HpcbenchError: the job ended without its JSON; the message names the log and its last line.
    """
    from hpcbench.run.backends.slurm import SlurmBackend, cancel, poll_interval_s, squeue_states, submit
    from hpcbench.run.rundir import new_run_dir

    SlurmBackend().check(dict(options))
    folder = new_run_dir(Path(out_dir), "doctor")
    folder.mkdir(parents=True)
    script = write_job(folder, out_dir=out_dir, data_dir=data_dir, options=options)
    job = submit(script)
    say(f"hpcbench doctor: job {job} submitted ({script}); waiting for it to end")
    try:
        while squeue_states([job]):
            time.sleep(poll_interval_s())
    except KeyboardInterrupt:
        cancel(job)
        raise
    result = folder / "doctor.json"
    try:
        return json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        log = folder / "doctor.out"
        try:
            tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-1:]
        except OSError:
            tail = ["(no log)"]
        raise HpcbenchError(f"doctor job {job} left no readable {result} ({exc.__class__.__name__}); its log "
                            f"{log} ends: {tail[0] if tail else '(empty)'}") from None
