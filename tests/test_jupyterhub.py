"""slurm/jupyterhub_config.py on the emulated cluster: a user's JupyterLab as a SLURM job, through the hub.

The hub (JupyterHub, its Python configurable-http-proxy, batchspawner's SlurmSpawner) runs on
the host, as it would on a login node, with the config file a site uses, adapted only through
its environment variables. A user logs in with the shared test password, the hub spawns
its server as a job on an emulated node (squeue shows it), headless Chromium logs in through the login form and
opens notebooks/00_environment.ipynb in JupyterLab, the notebook runs to the end in the
``hpcbench`` kernel through the hub's proxy (REST session + kernel websocket), its records are
read where the hub told the server to write them, and stopping the server through the hub's
API ends the job. Each step's seconds are printed.
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import nbformat
import pytest

from conftest import CHROMIUM_FLAGS, REPO, missing
from test_jupyter_slurm import _execute

CONFIG = REPO / "slurm" / "jupyterhub_config.py"
NOTEBOOK = REPO / "notebooks" / "00_environment.ipynb"
#: Who logs in and whose job runs the server: root, though a site's hub spawns for its users. The
#: venv's interpreter here is pyenv's, under /root (mode 0700), which no other user can execute,
#: so a server of another user could not start from this venv; the config lets root in with
#: HPCBENCH_HUB_ALLOW_ROOT=1 (jupyter refuses root otherwise). The path a site takes, the hub
#: running sbatch as the user through HPCBENCH_HUB_EXEC_PREFIX, is the same one.
HUB_USER = "root"
PASSWORD = "hpcbench-hub-test"  # SharedPasswordAuthenticator wants at least 8 characters
KERNEL_DISPLAY = "hpcbench (Python 3)"


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


#: The job name slurm/jupyterhub_config.py gives the servers' jobs.
JOB_NAME = "hpcbench-jupyterhub"


def _squeue_user(user: str, env: dict) -> list[list[str]]:
    """``[job id, state, node]`` of each of ``user``'s hub jobs (other tests' jobs are not the hub's)."""
    out = subprocess.run(["squeue", "-h", "-u", user, "-n", JOB_NAME, "-o", "%i %T %N"], capture_output=True,
                         text=True, env=env, timeout=30).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


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


def _open_notebook_in_chromium(exe: str, base: str, user: str, notebook: str, profile: Path, shot: Path) -> str:
    """Log in through the hub's form in headless Chromium, open ``notebook`` in JupyterLab.

    Returns:
        The page's text once the notebook shows with the hpcbench kernel.
    """
    import requests
    import websocket

    log = profile.parent / "chromium.log"
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
                     f"document.getElementById('password_input').value = {json.dumps(PASSWORD)};"
                     "document.getElementById('login_submit').click(); true")
            # The notebook's first heading and, in the toolbar, the kernel it asked for (not a
            # "Select Kernel" dialog: the server found `hpcbench`).
            text = cdp.wait_for(
                "(() => { const t = document.body ? document.body.innerText : '';"
                f" return t.includes('Environment: toolchain and topology') && t.includes({json.dumps(KERNEL_DISPLAY)})"
                " && !!document.querySelector('.jp-NotebookPanel') ? t : ''; })()",
                120, f"the notebook with kernel {KERNEL_DISPLAY!r}")
            shot.write_bytes(base64.b64decode(cdp.send("Page.captureScreenshot")["data"]))
            return text
        finally:
            cdp.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_hub_spawns_jupyterlab_as_a_slurm_job(emulated_cluster, chromium, tmp_path):
    hub_exe = Path(sys.prefix) / "bin" / "jupyterhub"
    if not hub_exe.exists():
        missing(f"no {hub_exe}: the venv lacks the hub extra (run `make setup`)")
    import requests  # both come with the hub extra (jupyterhub, jupyter_server)
    import websocket
    user = HUB_USER
    # The job's working directory, the server's file browser root and the results' parent: not
    # root's home, which the test must leave as it found it.
    work = tmp_path / "work"
    work.mkdir()
    timings: dict[str, float] = {}
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
    state = tmp_path / "hub"
    state.mkdir()
    hub_env = {**slurm_env,
               "HPCBENCH_VENV": sys.prefix,
               "HPCBENCH_HUB_BIND_URL": base,
               # The nodes reach the host at the cluster bridge's address, as compute nodes reach a login node.
               "HPCBENCH_HUB_IP": emulated_cluster.controller_address,
               "HPCBENCH_HUB_AUTHENTICATOR": "shared-password",
               "HPCBENCH_HUB_PASSWORD": PASSWORD,
               "HPCBENCH_HUB_USERS": user,
               "HPCBENCH_HUB_ALLOW_ROOT": "1",
               "HPCBENCH_HUB_WORKDIR": str(work),
               "HPCBENCH_HUB_CPUS": "1",
               "HPCBENCH_HUB_RUNTIME": "00:10:00",
               "HPCBENCH_HUB_STATE_DIR": str(state)}
    hub_log = tmp_path / "jupyterhub.log"
    # Ports that must not collide with another hub on this host: given on the command line, as a site could.
    hub = subprocess.Popen([str(hub_exe), "-f", str(CONFIG), f"--JupyterHub.hub_port={hub_port}",
                            f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api_port}"],
                           cwd=state, env=hub_env, stdout=hub_log.open("w"), stderr=subprocess.STDOUT,
                           start_new_session=True)
    job = None
    try:
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
        step("hub and proxy up")

        # Log in as a browser does (form + the _xsrf token the page carries); a wrong password is refused.
        browser = requests.Session()
        page = browser.get(f"{base}/hub/login", timeout=20)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
        bad = browser.post(f"{base}/hub/login", data={"username": user, "password": "not-it", "_xsrf": xsrf},
                           timeout=30)
        assert "/hub/login" in bad.url and "Invalid username or password" in bad.text
        ok = browser.post(f"{base}/hub/login?next=/hub/home", timeout=30,
                          data={"username": user, "password": PASSWORD, "_xsrf": xsrf})
        assert ok.status_code == 200 and ok.url.endswith("/hub/home"), (ok.status_code, ok.url)
        made = browser.post(f"{base}/hub/api/users/{user}/tokens", json={"note": "test", "expires_in": 900},
                            headers={"X-XSRFToken": browser.cookies.get("_xsrf", xsrf)}, timeout=30)
        assert made.status_code == 201, made.text
        api = requests.Session()
        api.headers["Authorization"] = f"token {made.json()['token']}"
        step("login")

        # Spawn: the hub submits the job as the user; the server on the node tells the hub its port.
        started = api.post(f"{base}/hub/api/users/{user}/server", timeout=60)
        assert started.status_code in (201, 202), started.text
        deadline = time.monotonic() + 120
        while True:
            jobs = _squeue_user(user, slurm_env)
            job = job or (jobs[0][0] if jobs else None)
            model = api.get(f"{base}/hub/api/users/{user}", timeout=20).json()
            server = model.get("servers", {}).get("")
            if server and server.get("ready"):
                break
            why = (f"squeue: {jobs}\njob log:\n{_log_tail(work / f'hpcbench-jupyterhub-{job}.log')}\n"
                   f"hub log:\n{_log_tail(hub_log)}")
            assert server, f"the spawn failed; {why}"
            assert jobs or not job, f"job {job} ended before its server was ready; {why}"
            assert time.monotonic() < deadline, f"server not ready in 120 s; {why}"
            time.sleep(1)
        jobs = _squeue_user(user, slurm_env)
        assert len(jobs) == 1, jobs
        job, job_state, node_name = jobs[0]
        assert job_state == "RUNNING", jobs
        node = next(n for n in emulated_cluster.nodes if n.name == node_name)
        # The hub routes to the node's SLURM NodeAddr (this host does not resolve node names).
        assert f"Notebook server job {job} started at {node.address}:" in hub_log.read_text()
        server_url = f"{base}/user/{user}"
        assert api.get(f"{server_url}/api/status", timeout=20).status_code == 200
        specs = api.get(f"{server_url}/api/kernelspecs", timeout=20).json()
        assert specs["kernelspecs"]["hpcbench"]["spec"]["display_name"] == KERNEL_DISPLAY
        step(f"spawn (job {job} on {node_name})")

        # The notebook as stored, into the server's root (the job's directory), then opened by a browser.
        nb = nbformat.read(NOTEBOOK, as_version=4)
        assert nb.metadata["kernelspec"]["name"] == "hpcbench"
        put = api.put(f"{server_url}/api/contents/{NOTEBOOK.name}", timeout=30,
                      json={"type": "notebook", "format": "json", "content": nb})
        assert put.status_code in (200, 201), put.text
        shot = tmp_path / "lab.png"
        text = _open_notebook_in_chromium(chromium, base, user, NOTEBOOK.name, tmp_path / "chrome", shot)
        assert KERNEL_DISPLAY in text
        step("Chromium: login form, notebook in JupyterLab")

        # Run every cell in the kernel the notebook asks for, through the proxy to the node.
        created = api.post(f"{server_url}/api/sessions", timeout=60, json={
            "path": NOTEBOOK.name, "name": NOTEBOOK.name, "type": "notebook",
            "kernel": {"name": nb.metadata["kernelspec"]["name"]}})
        assert created.status_code == 201, created.text
        session = created.json()
        assert session["kernel"]["name"] == "hpcbench"
        channels = (f"ws://127.0.0.1:{port}/user/{user}/api/kernels/{session['kernel']['id']}/channels"
                    f"?session_id={uuid.uuid4().hex}")
        ws = websocket.create_connection(channels, header=[f"Authorization: {api.headers['Authorization']}"],
                                         timeout=180)
        try:
            for cell in nb.cells:
                if cell.cell_type == "code":
                    assert _execute(ws, cell.source)["status"] == "ok", cell.source
            where = _execute(ws, "import os, socket, sys\nprint(socket.gethostname(), os.getuid(), sys.executable)")
        finally:
            ws.close()
        assert where["stdout"].split() == [node_name, str(pwd.getpwnam(user).pw_uid), sys.executable]
        step("00_environment.ipynb run through the hub")

        from hpcbench.core.results import find_record_files, read_records
        import pandas as pd

        # Where the hub's config sends results of notebooks run by hand: the job's directory, not the repository.
        out_dir = work / "hpcbench-results" / "interactive" / "environment.default"
        files = find_record_files(out_dir)
        assert files, f"no records under {out_dir}"
        records = pd.concat([read_records(p) for p in files], ignore_index=True)
        assert set(records["experiment"]) == {"environment"}
        assert set(records["node"]) == {node_name}  # measured on the compute node, not on the hub's host
        assert (records["metric"] == "toolchain.python").any()

        # Stop through the hub: the job leaves the queue.
        stopped = api.delete(f"{base}/hub/api/users/{user}/server", timeout=60)
        assert stopped.status_code in (202, 204), stopped.text
        deadline = time.monotonic() + 60
        while _squeue_user(user, slurm_env) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _squeue_user(user, slurm_env), f"job {job} still queued 60 s after the hub stopped it"
        assert api.get(f"{base}/hub/api/users/{user}", timeout=20).json()["servers"] == {}
        step("stop: job gone")
    finally:
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)  # the hub stops its servers (scancel) and its proxy
            try:
                hub.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(hub.pid, signal.SIGKILL)
                hub.wait(timeout=10)
        proxy_pid = state / "jupyterhub-proxy.pid"
        if proxy_pid.exists():
            try:
                os.kill(int(proxy_pid.read_text().strip()), signal.SIGTERM)
            except (ValueError, ProcessLookupError):
                pass
        subprocess.run(["scancel", "-u", user, "-n", JOB_NAME], env=slurm_env, timeout=30, check=False)
        if sys.exc_info()[0] is not None:  # failing: what the job said
            for log in sorted(work.glob("hpcbench-jupyterhub-*.log")):
                print(f"\n--- {log}\n{_log_tail(log)}")
        print("\nJupyterHub on the emulated cluster, seconds per step:")
        for name, seconds in timings.items():
            print(f"  {seconds:6.1f}  {name}")
        print(f"  {sum(timings.values()):6.1f}  in all (hub log: {hub_log})")
