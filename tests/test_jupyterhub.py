"""slurm/jupyterhub/ deployed on the emulated cluster: two users' JupyterLab as SLURM jobs, through one hub.

The hub runs as slurm/jupyterhub/README.md deploys it on a login node: as the unprivileged system
account ``hpchub`` (in group shadow, so that PAM can check passwords), from a venv at a prefix
every user can run, with the config file a site uses (slurm/jupyterhub_config.py), adapted only
through its environment variables. It submits each server as ``sudo -E -u USER sbatch`` under
exactly the rule slurm/jupyterhub/sudoers ships, which the test checks with ``visudo -c -f``,
installs in /etc/sudoers.d and removes afterwards; the rule lets ``hpchub`` run nothing else, and
nothing as root.

Two system users made for the test (members of the group the rule names) log in with their own
passwords (PAM; a wrong one is refused). Each gets a server as a SLURM job under their own name.
Headless Chromium logs each in through the login form and opens notebooks/00_environment.ipynb in
JupyterLab with the ``hpcbench`` kernel; the same browser, sent to the other user's server, gets
403, and so does each user's API token. Each user's kernel runs a cell through the hub's proxy and
reports its uid and its server's: the user's, never the other's or the hub's. The first user runs
the whole notebook and its records land in their home. Stopping the servers through the hub's API
ends both jobs. Each step's seconds are printed.

The shared venv: the recipe installs a full one (``make setup PYTHON=/usr/bin/python3
VENV=/opt/hpcbench/venv``). The test builds one at a temporary prefix from the system's Python,
whose site-packages is a link to this venv's (the same packages, for the same Python minor
version), with its own console scripts and the kernel registered as the recipe registers it:
cheap, and what users run (interpreter, paths, kernel) is the shared prefix's. This venv's own
interpreter (pyenv's, under /root) is one no other user may run.
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import grp
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from conftest import CHROMIUM_FLAGS, REPO, missing
from test_jupyter_slurm import _execute

CONFIG = REPO / "slurm" / "jupyterhub_config.py"
DEPLOY = REPO / "slurm" / "jupyterhub"
SUDOERS = DEPLOY / "sudoers"
UNIT = DEPLOY / "hpcbench-jupyterhub.service"
NOTEBOOK = REPO / "notebooks" / "00_environment.ipynb"
#: Where the rule goes (a name without a dot: sudo skips files in sudoers.d whose name has one).
SUDOERS_INSTALLED = Path("/etc/sudoers.d/hpcbench-jupyterhub")
#: The names the sudoers rule and the service unit use: the hub's account, the group it may act for.
HUB_ACCOUNT = "hpchub"
HUB_GROUP = "jupyterhub-users"
USERS = ("hpcb-ann", "hpcb-bob")
#: The GECOS field of accounts the test makes: what an interrupted run left behind may be removed.
ACCOUNT_MARK = "hpcbench jupyterhub test"
#: systemd's PATH for services: what the hub's unit gives it.
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KERNEL_DISPLAY = "hpcbench (Python 3)"
#: The job name slurm/jupyterhub_config.py gives the servers' jobs.
JOB_NAME = "hpcbench-jupyterhub"


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a log, without the hub's lines for the test's own polling."""
    if not path.exists():
        return f"(no {path})"
    lines = [line for line in path.read_text(errors="replace").splitlines() if "200 GET /hub/api/users/" not in line]
    return "\n".join(lines[-n:])


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``cmd`` to completion; a failure names the command and what it printed."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=kwargs.pop("timeout", 60), **kwargs)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    return proc


def _squeue_user(user: str, env: dict) -> list[list[str]]:
    """``[job id, state, node, owner]`` of each of ``user``'s hub jobs (other tests' jobs are not the hub's)."""
    out = subprocess.run(["squeue", "-h", "-u", user, "-n", JOB_NAME, "-o", "%i %T %N %u"], capture_output=True,
                         text=True, env=env, timeout=30).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


# -- the deployment: sudo, the accounts, the shared venv -----------------------------------------

def _require_sudo() -> None:
    """sudo and visudo, installed from the distribution if absent (the recipe needs them)."""
    if shutil.which("sudo", path=SERVICE_PATH) and shutil.which("visudo", path=SERVICE_PATH):
        return
    said = "no apt-get here"
    if shutil.which("apt-get", path=SERVICE_PATH):
        apt = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "sudo"], capture_output=True,
                             text=True, timeout=300,
                             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "PATH": SERVICE_PATH})
        said = (apt.stderr.strip() or apt.stdout.strip() or f"exit {apt.returncode}").splitlines()[-1]
    if not (shutil.which("sudo", path=SERVICE_PATH) and shutil.which("visudo", path=SERVICE_PATH)):
        missing(f"sudo is not installed and `apt-get install -y sudo` did not install it ({said}): the hub "
                "runs sbatch as each user through sudo (slurm/jupyterhub/sudoers)")


def _remove_stale_account(name: str) -> None:
    """Remove account ``name`` if an interrupted run of this test left it; refuse to touch another's."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return
    if entry.pw_gecos != ACCOUNT_MARK:
        missing(f"user {name} exists and is not this test's ({entry.pw_gecos!r}): the test will not reuse it")
    _run(["userdel", "--force", name])


def _open_for_all(paths: list[Path], stack: contextlib.ExitStack) -> None:
    """Let every user traverse to ``paths`` (o+x on each folder above them), put back at the end.

    Jobs run as the test's users: they must reach this checkout (config, notebooks, the editable
    hpcbench) and this venv's site-packages. Only the execute bit is added: nothing becomes listable.
    """
    for path in paths:
        for folder in [path.resolve(), *path.resolve().parents]:
            mode = folder.stat().st_mode
            if folder.is_dir() and not mode & stat.S_IXOTH:
                folder.chmod(mode | stat.S_IXOTH)
                stack.callback(folder.chmod, stat.S_IMODE(mode))


def _shared_venv(prefix: Path) -> Path:
    """A venv at ``prefix`` that every user can run, holding this venv's packages without copying them.

    Built from the system's Python, of this venv's minor version. Its site-packages is a link to
    this venv's, and so are the data files in its ``share`` and ``etc``; its console scripts are
    this venv's with its own interpreter in their first line; its ``hpcbench`` kernel is registered
    as the recipe does (``ipykernel install --sys-prefix``), so that the kernel runs its interpreter.

    Returns:
        The venv's ``bin/python``.
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system_python = shutil.which(f"python{version}", path="/usr/local/bin:/usr/bin")
    if system_python is None:
        missing(f"no system python{version} (/usr/bin, /usr/local/bin) to build a venv every user can run")
    _run([system_python, "-m", "venv", "--without-pip", str(prefix)])
    python = prefix / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    site.rmdir()
    site.symlink_to(Path(sysconfig.get_paths()["purelib"]).resolve())
    ours = Path(sys.prefix)
    for script in (ours / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or (prefix / "bin" / script.name).exists():
            continue
        with script.open("rb") as f:
            first = f.readline()
        if first.strip() in (f"#!{ours}/bin/python".encode(), f"#!{ours}/bin/python3".encode()):
            copy = prefix / "bin" / script.name
            copy.write_bytes(f"#!{python}\n".encode() + script.read_bytes()[len(first):])
            copy.chmod(0o755)
    # The data files packages find under sys.prefix, except the kernels: JupyterHub's templates
    # (share/jupyterhub), JupyterLab's assets (share/jupyter/lab), the server extensions enabled (etc/jupyter).
    for shared, own in (("etc", ()), ("share", ("jupyter",)), ("share/jupyter", ("kernels",))):
        (prefix / shared).mkdir(exist_ok=True)
        for entry in (ours / shared).iterdir():
            if entry.name not in own:
                (prefix / shared / entry.name).symlink_to(entry)
    _run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", "hpcbench",
          "--display-name", KERNEL_DISPLAY])
    return python


@dataclass
class HubSite:
    """What the deployment fixture made: the venv, the hub's account and state, the users and their passwords."""

    venv: Path
    state: Path
    hub_uid: int
    hub_gid: int
    hub_groups: list[int]
    passwords: dict[str, str]
    #: Seconds the fixture took to make all this.
    setup_s: float

    def home(self, user: str) -> Path:
        return Path(pwd.getpwnam(user).pw_dir)


@pytest.fixture
def hub_site():
    """The deployment of slurm/jupyterhub/README.md on this host, undone afterwards (accounts, sudoers, files)."""
    if os.geteuid() != 0:
        missing("the JupyterHub test makes system accounts and a sudoers rule: run it as root")
    for tool in ("useradd", "userdel", "groupadd", "groupdel", "chpasswd"):
        if not shutil.which(tool, path=SERVICE_PATH):
            missing(f"{tool} is not installed (apt-get install passwd)")
    start = time.monotonic()
    _require_sudo()
    with contextlib.ExitStack() as stack:
        # The rule first: a file sudo cannot parse is refused before it could lock anyone out.
        _run(["visudo", "-c", "-f", str(SUDOERS)])
        saved = SUDOERS_INSTALLED.read_bytes() if SUDOERS_INSTALLED.exists() else None
        stack.callback(lambda: SUDOERS_INSTALLED.write_bytes(saved) if saved is not None
                       else SUDOERS_INSTALLED.unlink(missing_ok=True))
        _run(["install", "-m", "0440", "-o", "root", "-g", "root", str(SUDOERS), str(SUDOERS_INSTALLED)])

        # A folder every user can enter, beside pytest's (which is root's alone).
        base = Path(tempfile.mkdtemp(prefix="hpcbench-hub-"))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        _open_for_all([REPO, Path(sysconfig.get_paths()["purelib"])], stack)

        for user in (HUB_ACCOUNT, *USERS):
            _remove_stale_account(user)
        try:
            grp.getgrnam(HUB_GROUP)  # a host's own group is used, and left as it was
        except KeyError:
            _run(["groupadd", HUB_GROUP])
            stack.callback(subprocess.run, ["groupdel", HUB_GROUP], capture_output=True, timeout=60)
        state = base / "hub"
        _run(["useradd", "--system", "--user-group", "--comment", ACCOUNT_MARK, "--home-dir", str(state),
              "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", "shadow", HUB_ACCOUNT])
        stack.callback(subprocess.run, ["userdel", "--force", HUB_ACCOUNT], capture_output=True, timeout=60)
        hub = pwd.getpwnam(HUB_ACCOUNT)
        state.mkdir(mode=0o700)
        os.chown(state, hub.pw_uid, hub.pw_gid)
        (base / "home").mkdir(mode=0o755)
        passwords = {}
        for user in USERS:
            _run(["useradd", "--create-home", "--home-dir", str(base / "home" / user), "--comment", ACCOUNT_MARK,
                  "--groups", HUB_GROUP, "--shell", "/bin/bash", user])
            stack.callback(subprocess.run, ["userdel", "--force", user], capture_output=True, timeout=60)
            passwords[user] = secrets.token_urlsafe(12)
            _run(["chpasswd"], input=f"{user}:{passwords[user]}\n")

        venv = base / "venv"
        _shared_venv(venv)
        yield HubSite(venv=venv, state=state, hub_uid=hub.pw_uid, hub_gid=hub.pw_gid,
                      hub_groups=os.getgrouplist(HUB_ACCOUNT, hub.pw_gid), passwords=passwords,
                      setup_s=time.monotonic() - start)


# -- the browser ----------------------------------------------------------------------------------

class _Cdp:
    """The DevTools protocol of one Chromium page: commands, and JavaScript evaluated in it."""

    def __init__(self, websocket, url: str):
        # suppress_origin: Chromium refuses DevTools websockets that carry a foreign Origin.
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0

    def send(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)["result"]
        return result.get("value")

    def wait_for(self, expression: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.5)
        text = self.eval("document.body ? document.body.innerText.slice(0, 2000) : ''")
        raise AssertionError(f"Chromium: {what} not seen within {timeout:g} s at {self.eval('location.href')}; "
                             f"the page reads:\n{text}")


def _browse_as(exe: str, base: str, user: str, password: str, notebook: str, other: str,
               profile: Path, shot: Path) -> tuple[str, str]:
    """Log in as ``user`` through the hub's form in headless Chromium, open ``notebook`` in JupyterLab,
    then go to ``other``'s server with the same cookies.

    Returns:
        The page's text once the notebook shows with the hpcbench kernel, and the text of the page
        ``other``'s server gave.
    """
    import requests
    import websocket

    log = profile.parent / f"chromium-{user}.log"
    proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}",
                             "--window-size=1280,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        # Port 0: Chromium picks a free one and writes it to this file once it listens.
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"Chromium opened no DevTools port (exit {proc.poll()}):\n{_log_tail(log)}"
            time.sleep(0.2)
        devtools = f"127.0.0.1:{port_file.read_text().split()[0]}"
        page = next(t for t in requests.get(f"http://{devtools}/json/list", timeout=10).json() if t["type"] == "page")
        cdp = _Cdp(websocket, page["webSocketDebuggerUrl"])
        try:
            target = urllib.parse.quote(f"/user/{user}/lab/tree/{notebook}")
            cdp.send("Page.enable")
            cdp.send("Page.navigate", url=f"{base}/hub/login?next={target}")
            cdp.wait_for("!!document.getElementById('login_submit')", 30, "the hub's login form")
            cdp.eval(f"document.getElementById('username_input').value = {json.dumps(user)};"
                     f"document.getElementById('password_input').value = {json.dumps(password)};"
                     "document.getElementById('login_submit').click(); true")
            # The notebook's first heading and, in the toolbar, the kernel it asked for (not a
            # "Select Kernel" dialog: the server found `hpcbench`).
            text = cdp.wait_for(
                "(() => { const t = document.body ? document.body.innerText : '';"
                f" return t.includes('Environment: toolchain and topology') && t.includes({json.dumps(KERNEL_DISPLAY)})"
                " && !!document.querySelector('.jp-NotebookPanel') ? t : ''; })()",
                120, f"{user}'s notebook with kernel {KERNEL_DISPLAY!r}")
            shot.write_bytes(base64.b64decode(cdp.send("Page.captureScreenshot")["data"]))
            # The other user's server sends the browser to the hub's OAuth page, which refuses this user.
            cdp.send("Page.navigate", url=f"{base}/user/{other}/lab")
            refused = cdp.wait_for(
                "(() => { const t = document.body ? document.body.innerText : '';"
                " return location.pathname.startsWith('/hub/') && document.readyState === 'complete'"
                " && /\\b403\\b/.test(t) ? t : ''; })()",
                30, f"403 for {user} at {other}'s server")
            return text, refused
        finally:
            cdp.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- the test -------------------------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.timeout(300)
def test_hub_spawns_each_users_jupyterlab_as_their_slurm_job(emulated_cluster, chromium, hub_site, tmp_path):
    hub_exe = hub_site.venv / "bin" / "jupyterhub"
    if not hub_exe.exists():
        missing(f"no {hub_exe}: the venv lacks the hub extra (run `make setup`)")
    import requests  # both come with the hub extra (jupyterhub, jupyter_server)
    import websocket
    ann, bob = USERS
    timings: dict[str, float] = {"accounts, sudoers rule, shared venv (fixture)": hub_site.setup_s}
    step_start = time.monotonic()

    def step(name: str) -> None:
        nonlocal step_start
        now = time.monotonic()
        timings[name] = now - step_start
        step_start = now

    slurm_env = {**os.environ, **emulated_cluster.env()}
    port, api_port = _free_port("127.0.0.1"), _free_port("127.0.0.1")
    hub_port = _free_port(emulated_cluster.controller_address)
    base = f"http://127.0.0.1:{port}"
    # What the service unit gives the hub: systemd's PATH and HOME, the site's settings (its
    # EnvironmentFile), nothing of root's environment. HPCBENCH_VENV and the state folder are left to
    # their defaults: the hub's own venv, the folder it starts in.
    hub_env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8", "HOME": str(hub_site.state), "USER": HUB_ACCOUNT,
               **emulated_cluster.env(),
               "HPCBENCH_HUB_BIND_URL": base,
               # The nodes reach the host at the cluster bridge's address, as compute nodes reach a login node.
               "HPCBENCH_HUB_IP": emulated_cluster.controller_address,
               "HPCBENCH_HUB_GROUP": HUB_GROUP,
               "HPCBENCH_HUB_CPUS": "1",
               "HPCBENCH_HUB_RUNTIME": "00:10:00"}
    hub_log = tmp_path / "jupyterhub.log"
    # Ports that must not collide with another hub on this host: given on the command line, as a site could.
    hub = subprocess.Popen([str(hub_exe), "-f", str(CONFIG), f"--JupyterHub.hub_port={hub_port}",
                            f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api_port}"],
                           cwd=hub_site.state, env=hub_env, stdout=hub_log.open("w"), stderr=subprocess.STDOUT,
                           user=hub_site.hub_uid, group=hub_site.hub_gid, extra_groups=hub_site.hub_groups,
                           start_new_session=True)
    jobs: dict[str, list[str]] = {}
    try:
        assert os.stat(f"/proc/{hub.pid}").st_uid == hub_site.hub_uid
        # The rule lets the hub's account run the SLURM commands as the users (keeping SLURM_CONF, as
        # batchspawner's `sudo -E` does), and nothing else.
        as_hub = ["runuser", "-u", HUB_ACCOUNT, "--", "sudo", "-n", "-E"]
        assert subprocess.run([*as_hub, "-u", ann, "/usr/bin/squeue", "--version"], capture_output=True,
                              env={"PATH": SERVICE_PATH, **emulated_cluster.env()}, timeout=30).returncode == 0
        for refused in ([*as_hub, "-u", "root", "/usr/bin/squeue", "--version"], [*as_hub, "-u", ann, "/usr/bin/id"]):
            assert subprocess.run(refused, capture_output=True, env={"PATH": SERVICE_PATH},
                                  timeout=30).returncode != 0, refused

        deadline = time.monotonic() + 90
        while True:
            assert hub.poll() is None, f"the hub exited ({hub.returncode}):\n{_log_tail(hub_log)}"
            try:
                if requests.get(f"{base}/hub/api", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, f"the hub did not answer within 90 s:\n{_log_tail(hub_log)}"
            time.sleep(0.5)
        step(f"hub (uid {hub_site.hub_uid}) and proxy up")

        def log_in(user: str, password: str) -> tuple[requests.Session, str, requests.Response]:
            """Log in as a browser does (the form, with the _xsrf token the page carries): the session,
            that token and the answer."""
            browser = requests.Session()
            page = browser.get(f"{base}/hub/login", timeout=20)
            found = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
            assert found, f"no login form at {page.url} ({page.status_code}):\n{page.text[:2000]}\n{_log_tail(hub_log)}"
            answer = browser.post(f"{base}/hub/login?next=/hub/home", timeout=30,
                                  data={"username": user, "password": password, "_xsrf": found.group(1)})
            return browser, found.group(1), answer

        api: dict[str, requests.Session] = {}
        for user in USERS:
            browser, xsrf, ok = log_in(user, hub_site.passwords[user])
            assert ok.status_code == 200 and ok.url.endswith("/hub/home"), (user, ok.status_code, ok.url,
                                                                              _log_tail(hub_log))
            made = browser.post(f"{base}/hub/api/users/{user}/tokens", json={"note": "test", "expires_in": 900},
                                headers={"X-XSRFToken": browser.cookies.get("_xsrf", xsrf)}, timeout=30)
            assert made.status_code == 201, made.text
            api[user] = requests.Session()
            api[user].headers["Authorization"] = f"token {made.json()['token']}"
        step("PAM logins")

        # Spawn both at once (a request returns when its server is up, or after 10 s with 202): the hub
        # submits each job as its user; each server tells the hub its port. Meanwhile PAM refuses a
        # wrong password, after the fail delay of the host's PAM stack.
        with ThreadPoolExecutor(len(USERS) + 1) as pool:
            wrong = pool.submit(log_in, ann, "not-it")
            for started in pool.map(lambda u: api[u].post(f"{base}/hub/api/users/{u}/server", timeout=60), USERS):
                assert started.status_code in (201, 202), started.text
            bad = wrong.result()[2]
            assert "/hub/login" in bad.url and "Invalid username or password" in bad.text, (bad.status_code, bad.url)
        deadline = time.monotonic() + 120
        waiting = set(USERS)
        while waiting:
            for user in sorted(waiting):
                found = _squeue_user(user, slurm_env)
                job = jobs.get(user, [None])[0] or (found[0][0] if found else None)
                if found:
                    jobs[user] = found[0]
                server = api[user].get(f"{base}/hub/api/users/{user}", timeout=20).json().get("servers", {}).get("")
                if server and server.get("ready"):
                    waiting.discard(user)
                    continue
                log = hub_site.home(user) / f"hpcbench-jupyterhub-{job}.log"
                why = f"squeue: {found}\njob log:\n{_log_tail(log)}\nhub log:\n{_log_tail(hub_log)}"
                assert server, f"{user}'s spawn failed; {why}"
                assert found or not job, f"{user}'s job {job} ended before its server was ready; {why}"
                assert time.monotonic() < deadline, f"{user}'s server not ready in 120 s; {why}"
            time.sleep(1)
        nodes = {}
        for user in USERS:
            found = _squeue_user(user, slurm_env)
            assert len(found) == 1, found
            jobs[user] = found[0]
            job, job_state, node_name, owner = found[0]
            assert job_state == "RUNNING" and owner == user, found
            node = next(n for n in emulated_cluster.nodes if n.name == node_name)
            nodes[user] = node_name
            # The hub routes to the node's SLURM NodeAddr (this host does not resolve node names).
            assert f"Notebook server job {job} started at {node.address}:" in hub_log.read_text()
            server_url = f"{base}/user/{user}"
            assert api[user].get(f"{server_url}/api/status", timeout=20).status_code == 200
            specs = api[user].get(f"{server_url}/api/kernelspecs", timeout=20).json()
            assert specs["kernelspecs"]["hpcbench"]["spec"]["display_name"] == KERNEL_DISPLAY
        # A user's token opens neither the other's server nor the other's hub record.
        for user, other in ((ann, bob), (bob, ann)):
            assert api[user].get(f"{base}/user/{other}/api/status", timeout=20).status_code == 403
            assert api[user].delete(f"{base}/hub/api/users/{other}/server", timeout=20).status_code in (403, 404)
        step("spawn: " + ", ".join(f"{u} job {jobs[u][0]} on {nodes[u]}" for u in USERS))

        # The notebook as stored, into each server's root (the user's home), then opened by a browser.
        nb = nbformat.read(NOTEBOOK, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "hpcbench"
        for user in USERS:
            put = api[user].put(f"{base}/user/{user}/api/contents/{NOTEBOOK.name}", timeout=30,
                                json={"type": "notebook", "format": "json", "content": nb})
            assert put.status_code in (200, 201), put.text
        # Both browsers at once, as two users would.
        pairs = ((ann, bob), (bob, ann))
        with ThreadPoolExecutor(len(USERS)) as pool:
            seen = pool.map(lambda pair: _browse_as(chromium, base, pair[0], hub_site.passwords[pair[0]],
                                                    NOTEBOOK.name, pair[1], tmp_path / f"chrome-{pair[0]}",
                                                    tmp_path / f"lab-{pair[0]}.png"), pairs)
            for (user, other), (text, refused) in zip(pairs, seen):
                assert KERNEL_DISPLAY in text
                assert f"You do not have permission to access Server at /user/{other}/" in refused, refused
        step("Chromium: each logs in, opens the notebook, is refused the other's server")

        # A cell in each user's hpcbench kernel, through the proxy to the node; ann runs the whole notebook.
        where = {}
        for user in USERS:
            created = api[user].post(f"{base}/user/{user}/api/sessions", timeout=60, json={
                "path": NOTEBOOK.name, "name": NOTEBOOK.name, "type": "notebook",
                "kernel": {"name": nb.metadata["kernelspec"]["name"]}})
            assert created.status_code == 201, created.text
            session = created.json()
            assert session["kernel"]["name"] == "hpcbench"
            channels = (f"ws://127.0.0.1:{port}/user/{user}/api/kernels/{session['kernel']['id']}/channels"
                        f"?session_id={uuid.uuid4().hex}")
            ws = websocket.create_connection(channels, header=[f"Authorization: {api[user].headers['Authorization']}"],
                                             timeout=180)
            try:
                if user == ann:
                    for cell in nb.cells:
                        if cell.cell_type == "code":
                            assert _execute(ws, cell.source)["status"] == "ok", cell.source
                # The kernel's parent is the user's server.
                where[user] = _execute(ws, "import os, socket, sys\nprint(socket.gethostname(), os.getuid(),"
                                           " os.stat(f'/proc/{os.getppid()}').st_uid, sys.executable)")["stdout"]
            finally:
                ws.close()
        for user in USERS:
            uid = str(pwd.getpwnam(user).pw_uid)
            assert where[user].split() == [nodes[user], uid, uid, str(hub_site.venv / "bin" / "python")], where
        step("a cell in each user's kernel; 00_environment.ipynb in ann's")

        from hpcbench.core.results import find_record_files, read_records
        import pandas as pd

        # Where the hub's config sends results of notebooks run by hand: the user's home, not the repository.
        out_dir = hub_site.home(ann) / "hpcbench-results" / "interactive" / "environment.default"
        files = find_record_files(out_dir)
        assert files, f"no records under {out_dir}"
        records = pd.concat([read_records(p) for p in files], ignore_index=True)
        assert set(records["experiment"]) == {"environment"}
        assert set(records["node"]) == {nodes[ann]}  # measured on the compute node, not on the hub's host
        assert (records["metric"] == "toolchain.python").any()
        assert {p.stat().st_uid for p in files} == {pwd.getpwnam(ann).pw_uid}

        # Stop through the hub: the jobs leave the queue.
        with ThreadPoolExecutor(len(USERS)) as pool:
            for stopped in pool.map(lambda u: api[u].delete(f"{base}/hub/api/users/{u}/server", timeout=60), USERS):
                assert stopped.status_code in (202, 204), stopped.text
        deadline = time.monotonic() + 60
        while any(_squeue_user(u, slurm_env) for u in USERS) and time.monotonic() < deadline:
            time.sleep(0.5)
        for user in USERS:
            assert not _squeue_user(user, slurm_env), f"{user}'s job still queued 60 s after the hub stopped it"
            assert api[user].get(f"{base}/hub/api/users/{user}", timeout=20).json()["servers"] == {}
        step("stop: jobs gone")
    finally:
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)  # the hub stops its servers (scancel) and its proxy
            try:
                hub.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(hub.pid, signal.SIGKILL)
                hub.wait(timeout=10)
        proxy_pid = hub_site.state / "jupyterhub-proxy.pid"
        if proxy_pid.exists():
            try:
                os.kill(int(proxy_pid.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass
        for user in USERS:
            subprocess.run(["scancel", "-u", user, "-n", JOB_NAME], env=slurm_env, timeout=30, check=False)
        if sys.exc_info()[0] is not None:  # failing: what the jobs said
            for user in USERS:
                for log in sorted(hub_site.home(user).glob("hpcbench-jupyterhub-*.log")):
                    print(f"\n--- {log}\n{_log_tail(log)}")
        print("\nJupyterHub on the emulated cluster, seconds per step:")
        for name, seconds in timings.items():
            print(f"  {seconds:6.1f}  {name}")
        print(f"  {sum(timings.values()):6.1f}  in all (hub log: {hub_log})")


# -- the recipe's files agree with each other (no cluster needed) ---------------------------------

def test_the_unit_the_rule_and_the_readme_name_the_same_account_and_group():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(UNIT)
    assert unit["Service"]["User"] == HUB_ACCOUNT, UNIT
    # The hub keeps its state in the folder it starts in: the one systemd makes for it.
    assert unit["Service"]["WorkingDirectory"] == f"/var/lib/{unit['Service']['StateDirectory']}", UNIT
    rule = [line for line in SUDOERS.read_text().splitlines() if line.startswith(f"{HUB_ACCOUNT} ")]
    assert len(rule) == 1 and f"(%{HUB_GROUP})" in rule[0], f"{SUDOERS}: no rule for {HUB_ACCOUNT} as %{HUB_GROUP}"
    guide = (REPO / "slurm" / "README.md").read_text()
    assert f"HPCBENCH_HUB_GROUP={HUB_GROUP}" in guide and f"--groups shadow {HUB_ACCOUNT}" in guide


def test_every_variable_the_config_reads_has_a_row_in_the_settings_table():
    read = set(re.findall(r'os\.environ\.get\("([A-Z_]+)"', CONFIG.read_text()))
    rows = set(re.findall(r"^\| `([A-Z_]+)` \|", (DEPLOY / "README.md").read_text(), re.M))
    assert read and read == rows, (f"read but not in the table: {sorted(read - rows)}; "
                                   f"in the table only: {sorted(rows - read)}")
