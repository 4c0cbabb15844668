# JupyterHub for hpcbench: each user's JupyterLab runs as a SLURM job on a compute node, with
# hpcbench's venv and its "hpcbench (Python 3)" kernel. slurm/jupyterhub/README.md deploys it on a
# login node: the venv at a prefix every user can read, the hub as the unprivileged account hpchub
# (slurm/jupyterhub/hpcbench-jupyterhub.service), submitting each user's job through sudo
# (slurm/jupyterhub/sudoers). tests/test_jupyterhub.py deploys it so on the emulated cluster: two
# users log in, spawn, open a notebook in Chromium, run it, are refused each other's server, stop.
#
# What the unit runs, as hpchub, in the folder that keeps the hub's state (sqlite, cookie secret):
#   cd /var/lib/hpcbench-jupyterhub
#   HPCBENCH_HUB_PARTITION=cpu HPCBENCH_HUB_GROUP=jupyterhub-users \
#       /opt/hpcbench/venv/bin/jupyterhub -f /opt/hpcbench/src/slurm/jupyterhub_config.py
#
# The hub runs sbatch, squeue and scancel as each user (HPCBENCH_HUB_EXEC_PREFIX: sudo for a hub
# that is not root) and PAM checks the users' own passwords (the hub's account in group shadow).
# Users then open http://<that host>:8000/ (put TLS in front of it: the hub itself speaks HTTP).
#
# Every setting a site adapts is an environment variable read below, with its default; any other
# JupyterHub setting can be added at the end or given on the command line
# (`--JupyterHub.bind_url=...`, which wins over this file).
#
# Versions: the hub and each user's server talk a protocol that only the same major version of
# the `jupyterhub` package speaks (a mismatch shows as login redirect loops). The servers run
# `batchspawner-singleuser jupyterhub-singleuser` from HPCBENCH_VENV, so that venv must hold the
# hub's jupyterhub and batchspawner: constraints.txt pins them together, and running the hub from
# the same venv (as above) keeps them equal. This file refuses to start when they differ.
#
# The kernel: notebooks ask for the kernel named `hpcbench`. `make setup` registers it inside the
# venv, where a server started from the venv finds it. A hub whose servers start from another
# environment (a site's own JupyterHub image) does not see it; each user registers it once, from
# the venv, into their own ~/.local/share/jupyter/kernels:
#     /opt/hpcbench/venv/bin/python -m ipykernel install --user --name hpcbench \
#         --display-name "hpcbench (Python 3)"
# (or a site installs that kernel.json, whose argv[0] is the venv's python, in a system Jupyter
# path such as /usr/local/share/jupyter/kernels/hpcbench).

import glob
import os
import pwd
import re
import subprocess
import sys

import batchspawner  # noqa: F401  (registers the hub's /api/batchspawner handler the servers call)
from batchspawner import SlurmSpawner

c = get_config()  # noqa: F821  (provided by JupyterHub when it loads this file)

# -- settings a site adapts -------------------------------------------------------------------
# The venv the users' servers and kernels run from, on a file system the nodes share.
# Default: the venv this hub runs from, which is what keeps the two jupyterhub versions equal.
VENV = os.path.abspath(os.environ.get("HPCBENCH_VENV", sys.prefix))
# Where the proxy listens for users' browsers (JupyterHub's own default: every address, port 8000).
BIND_URL = os.environ.get("HPCBENCH_HUB_BIND_URL", "http://:8000")
# The hub's API, which each server calls from its node (to say its port, check logins, report
# activity): it must listen on an address the compute nodes reach. Default: every address, and
# the nodes connect to this host's name (HPCBENCH_HUB_CONNECT_IP overrides, e.g. an ib0 address).
HUB_IP = os.environ.get("HPCBENCH_HUB_IP", "0.0.0.0")
HUB_CONNECT_IP = os.environ.get("HPCBENCH_HUB_CONNECT_IP", "")
# The job each server runs in: partition and account ("" = SLURM's defaults), time limit (the
# session ends with it), cores for the kernels, memory ("" = the partition's default) and
# generic resources, e.g. "gpu:1".
PARTITION = os.environ.get("HPCBENCH_HUB_PARTITION", "")
ACCOUNT = os.environ.get("HPCBENCH_HUB_ACCOUNT", "")
RUNTIME = os.environ.get("HPCBENCH_HUB_RUNTIME", "02:00:00")
CPUS = os.environ.get("HPCBENCH_HUB_CPUS", "2")
MEMORY = os.environ.get("HPCBENCH_HUB_MEMORY", "")
GRES = os.environ.get("HPCBENCH_HUB_GRES", "")
# The job's working directory: where JupyterLab's file browser opens and the job's log
# (hpcbench-jupyterhub-<jobid>.log) goes. {homedir} and {username} are the user's.
WORKDIR = os.environ.get("HPCBENCH_HUB_WORKDIR", "{homedir}")
# Where notebooks run by hand write their results: not the repository's results/, which users
# of a shared checkout cannot write to.
RESULTS = os.environ.get("HPCBENCH_HUB_RESULTS", WORKDIR + "/hpcbench-results")
# Shell lines the job runs before the server starts, e.g. "module load cuda/12.4".
PROLOGUE = os.environ.get("HPCBENCH_HUB_PROLOGUE", "")
# Who may log in. "pam": the users' own Unix passwords (a hub that is not root reads
# /etc/shadow through its membership of group shadow). "shared-password": one password for every
# user in HPCBENCH_HUB_USERS (demos only: anyone who knows it is every one of those users).
AUTHENTICATOR = os.environ.get("HPCBENCH_HUB_AUTHENTICATOR", "pam")
PASSWORD = os.environ.get("HPCBENCH_HUB_PASSWORD", "")
# Comma-separated user names allowed in, and admins; with PAM, a Unix group works too (the group
# the sudoers rule lets the hub act for, so that both name the same people).
# Nothing set: every user who can log in on this host (the cluster's accounts).
USERS = {u.strip() for u in os.environ.get("HPCBENCH_HUB_USERS", "").split(",") if u.strip()}
ADMINS = {u.strip() for u in os.environ.get("HPCBENCH_HUB_ADMINS", "").split(",") if u.strip()}
GROUP = os.environ.get("HPCBENCH_HUB_GROUP", "")
# How the hub runs sbatch/squeue/scancel as the user: batchspawner's own default, sudo -E, for a
# hub running as a service account (slurm/jupyterhub/sudoers allows exactly those three commands);
# a hub running as root needs no sudo, and runuser (util-linux) is on every Linux. "" runs them as
# the hub's own user (a single-user demo).
EXEC_PREFIX = os.environ.get("HPCBENCH_HUB_EXEC_PREFIX",
                             "runuser -u {username} --" if os.geteuid() == 0 else "sudo -E -u {username}")
# The hub's database and cookie secret (and the proxy's pid file): the directory it starts in.
STATE_DIR = os.path.abspath(os.environ.get("HPCBENCH_HUB_STATE_DIR", os.getcwd()))
# The proxy: configurable-http-proxy, the Python port installed by `make setup` beside this hub
# (npm's Node.js original, `npm install -g configurable-http-proxy`, takes the same arguments).
PROXY = os.environ.get("HPCBENCH_HUB_PROXY", os.path.join(os.path.dirname(sys.executable),
                                                          "configurable-http-proxy"))
# ----------------------------------------------------------------------------------------------


def _installed_version(venv: str, dist: str) -> str | None:
    """The version of ``dist`` installed in ``venv`` (from its dist-info folder), or None."""
    for meta in glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", f"{dist}-*.dist-info")):
        match = re.match(rf"{dist}-([^-]+)\.dist-info$", os.path.basename(meta))
        if match:
            return match.group(1)
    return None


def _check_venv(venv: str) -> None:
    """Refuse to start with a venv whose servers could not work with this hub."""
    import jupyterhub

    for tool in ("batchspawner-singleuser", "jupyterhub-singleuser", "python"):
        if not os.access(os.path.join(venv, "bin", tool), os.X_OK):
            raise ValueError(f"HPCBENCH_VENV={venv}: no bin/{tool} there; create the venv with `make setup` "
                             "(it installs the hub extra: jupyterhub, batchspawner) or set HPCBENCH_VENV")
    theirs = _installed_version(venv, "jupyterhub")
    if theirs is None or theirs.split(".")[0] != jupyterhub.__version__.split(".")[0]:
        raise ValueError(f"HPCBENCH_VENV={venv} has jupyterhub {theirs}, this hub runs {jupyterhub.__version__}: "
                         "the single-user servers must run the hub's major version (install both from "
                         "constraints.txt, or run the hub from that venv)")

    # The hub's account can run what its users' jobs may not: a venv made from an interpreter under
    # a private home (pyenv in /root) fails in every job with "Permission denied".
    python = os.path.realpath(os.path.join(venv, "bin", "python"))
    folders = [os.path.dirname(python)]
    while folders[-1] != os.path.dirname(folders[-1]):
        folders.append(os.path.dirname(folders[-1]))
    closed = [p for p in [python, *folders] if not os.stat(p).st_mode & 0o001]
    if closed:
        print(f"warning: HPCBENCH_VENV={venv}: its interpreter {python} may not be executable by other users "
              f"({closed[0]} has no o+x): only its owner's server can start. Build the venv from a Python "
              "that every user can run, at a prefix they can read: make setup PYTHON=/usr/bin/python3 "
              "VENV=/opt/hpcbench/venv (slurm/jupyterhub/README.md)",
              file=sys.stderr)


_check_venv(VENV)
if AUTHENTICATOR not in ("pam", "shared-password"):
    raise ValueError(f"HPCBENCH_HUB_AUTHENTICATOR={AUTHENTICATOR!r}: use 'pam' or 'shared-password'")
if AUTHENTICATOR == "shared-password" and len(PASSWORD) < 8:
    raise ValueError("HPCBENCH_HUB_PASSWORD: shared-password needs a password of at least 8 characters")


class HpcbenchSlurmSpawner(SlurmSpawner):
    """batchspawner's SlurmSpawner, reaching each server at its node's SLURM NodeAddr.

    squeue names the node (``n1``); the hub host may not resolve compute nodes' names (the
    emulated cluster's host does not, and on real sites a node's name can resolve to its
    management network). NodeAddr is where slurmctld itself reaches the node.
    """

    def state_gethost(self):
        node = super().state_gethost()
        # A short blocking call, once per spawn: state_gethost is synchronous in batchspawner.
        try:
            out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                                 timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        match = re.search(r"\bNodeAddr=(\S+)", out)
        return match.group(1) if match else node


def _results_dir(spawner) -> str:
    """HPCBENCH_RESULTS for the user's server (results of notebooks run by hand go there)."""
    home = pwd.getpwnam(spawner.user.name).pw_dir
    return RESULTS.format(homedir=home, username=spawner.user.name)


def _jinja(path: str) -> str:
    """``path`` with its {homedir}/{username} as the batch script's jinja variables."""
    return path.replace("{homedir}", "{{homedir}}").replace("{username}", "{{username}}")


# -- the hub and its proxy ---------------------------------------------------------------------
c.JupyterHub.bind_url = BIND_URL
c.JupyterHub.hub_ip = HUB_IP
if HUB_CONNECT_IP:
    c.JupyterHub.hub_connect_ip = HUB_CONNECT_IP
c.JupyterHub.db_url = f"sqlite:///{os.path.join(STATE_DIR, 'jupyterhub.sqlite')}"
c.JupyterHub.cookie_secret_file = os.path.join(STATE_DIR, "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [PROXY]
c.ConfigurableHTTPProxy.pid_file = os.path.join(STATE_DIR, "jupyterhub-proxy.pid")

# -- who logs in -------------------------------------------------------------------------------
c.JupyterHub.authenticator_class = AUTHENTICATOR
if AUTHENTICATOR == "shared-password":
    c.SharedPasswordAuthenticator.user_password = PASSWORD
if USERS:
    c.Authenticator.allowed_users = USERS
if GROUP:
    c.PAMAuthenticator.allowed_groups = {GROUP}
# JupyterHub 5 admits nobody unless told whom; with no list, every account that can log in here.
c.Authenticator.allow_all = not (USERS or GROUP)
c.Authenticator.admin_users = ADMINS

# -- each user's server: a SLURM job -----------------------------------------------------------
c.JupyterHub.spawner_class = HpcbenchSlurmSpawner
c.Spawner.default_url = "/lab"
c.Spawner.cmd = [os.path.join(VENV, "bin", "jupyterhub-singleuser")]
c.SlurmSpawner.batchspawner_singleuser_cmd = os.path.join(VENV, "bin", "batchspawner-singleuser")
c.SlurmSpawner.exec_prefix = EXEC_PREFIX
# sbatch runs with only the spawner's environment: PATH to find sbatch and squeue as the hub
# does (sudo puts its secure_path in its place), SLURM_CONF for a cluster whose configuration is
# not in /etc/slurm (the emulated one).
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL", "SLURM_CONF", "JUPYTERHUB_SINGLEUSER_APP"]
c.Spawner.environment = {"HPCBENCH_RESULTS": _results_dir}
c.SlurmSpawner.req_partition = PARTITION
c.SlurmSpawner.req_account = ACCOUNT
c.SlurmSpawner.req_runtime = RUNTIME
c.SlurmSpawner.req_nprocs = CPUS
c.SlurmSpawner.req_memory = MEMORY
c.SlurmSpawner.req_gres = GRES
c.SlurmSpawner.req_prologue = PROLOGUE
# The job's script sets SLURM_EXPORT_ENV to its --export list, and srun reads it: without
# --export=ALL the step would drop PATH, JUPYTER_PATH and everything else the script sets.
c.SlurmSpawner.req_srun = "srun --export=ALL"
# A queued job may wait: the hub keeps the spawn pending this long (the user sees "Pending in queue").
c.Spawner.start_timeout = 600
# From the job running to the server answering: a venv on a network file system imports slowly.
c.Spawner.http_timeout = 180
# jinja2, rendered by batchspawner: {{cmd}} is `batchspawner-singleuser jupyterhub-singleuser ...`.
# --export={{keepvars}} passes the spawner's variables by name (the API token never appears in
# the script or on a command line); the job log holds no token. No --get-user-env: the venv's
# paths are set here, and a login shell on the node would only add its start-up time.
c.SlurmSpawner.batch_script = """#!/bin/bash
#SBATCH --job-name=hpcbench-jupyterhub
#SBATCH --output=WORKDIR/hpcbench-jupyterhub-%j.log
#SBATCH --chdir=WORKDIR
#SBATCH --export={{keepvars}}
#SBATCH --nodes=1
#SBATCH --ntasks=1
{% if partition %}#SBATCH --partition={{partition}}
{% endif %}{% if account %}#SBATCH --account={{account}}
{% endif %}{% if runtime %}#SBATCH --time={{runtime}}
{% endif %}{% if memory %}#SBATCH --mem={{memory}}
{% endif %}{% if gres %}#SBATCH --gres={{gres}}
{% endif %}{% if nprocs %}#SBATCH --cpus-per-task={{nprocs}}
{% endif %}{% if options %}#SBATCH {{options}}
{% endif %}
set -euo pipefail
# The venv's tools and kernels first, as in slurm/jupyter.sbatch.
export PATH="VENV/bin:$PATH"
export JUPYTER_PATH="VENV/share/jupyter"
{{prologue}}
{% if srun %}{{srun}} {% endif %}{{cmd}}
{{epilogue}}
""".replace("VENV", VENV).replace("WORKDIR", _jinja(WORKDIR))
