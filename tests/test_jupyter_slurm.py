"""slurm/jupyter.sbatch on the emulated cluster: JupyterLab on a node, reached with its token.

The job is submitted as a user would, from a folder with a results/ subfolder, where the
script's own ``--output`` puts its log (0600: it holds the token); the test reads the URL
and the tunnel line from that output, then talks to the server from the host over the node's address
(the host reaches the node namespaces through the bridge, as a login node reaches
compute nodes): /api/status with and without the token, /api/kernelspecs, and a small
notebook run through the server's own API (a REST session starts the kernel, the
cells go through the kernel's websocket channels, the result is saved back through
the contents API). Finally ``scancel`` stops the job and the server.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest

from conftest import REPO

SCRIPT = REPO / "slurm" / "jupyter.sbatch"
URL_RE = re.compile(r"^\s*http://(?P<addr>[\d.]+):(?P<port>\d+)/lab\?token=(?P<token>\w+)\s*$", re.MULTILINE)
TUNNEL_RE = re.compile(r"^\s*ssh -N -L (?P<port>\d+):(?P<addr>[\d.]+):(?P<port2>\d+) (?P<user>\S+)@(?P<host>\S+)\s*$",
                       re.MULTILINE)
CELLS = ["import socket, sys\nprint(socket.gethostname())\nsys.executable", "1+1"]


def _api(base: str, path: str, token: str | None, method: str = "GET", body: dict | None = None):
    """(status, decoded JSON or None) of one request to the server."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"token {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, None


def _execute(ws, code: str) -> dict:
    """Run ``code`` on the kernel behind websocket ``ws``: its stdout and its result's text/plain."""
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    out = {"stdout": "", "result": None, "status": None, "outputs": []}
    idle = replied = False
    while not (idle and replied):
        msg = json.loads(ws.recv())
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content.get("name") == "stdout":
            out["stdout"] += content["text"]
            out["outputs"].append(nbformat.v4.new_output("stream", name="stdout", text=content["text"]))
        elif kind == "execute_result":
            out["result"] = content["data"].get("text/plain")
            out["outputs"].append(nbformat.v4.new_output("execute_result", data=content["data"],
                                                         execution_count=content["execution_count"]))
        elif kind == "error":
            raise AssertionError(f"cell {code!r} raised {content['ename']}: {content['evalue']}")
        elif kind == "execute_reply":
            out["status"], replied = content["status"], True
        elif kind == "status" and content["execution_state"] == "idle":
            idle = True
    return out


def _squeue(job_id: str, env: dict) -> str:
    proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                          env=env, timeout=30)
    return proc.stdout.strip()


def _wait_for(pattern: re.Pattern, out_file: Path, job_id: str, env: dict, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = out_file.read_text() if out_file.exists() else ""
        match = pattern.search(text)
        if match:
            return match
        if not _squeue(job_id, env) and not pattern.search(out_file.read_text() if out_file.exists() else ""):
            pytest.fail(f"job {job_id} ended before printing its URL; its output:\n{text}")
        time.sleep(0.5)
    pytest.fail(f"no URL line in {out_file} within {timeout} s; it holds:\n"
                f"{out_file.read_text() if out_file.exists() else '(nothing)'}")


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_jupyter_job_serves_the_venv_kernel(emulated_cluster, tmp_path):
    websocket = pytest.importorskip("websocket", reason="websocket-client comes with jupyter_server")
    env = {**os.environ, **emulated_cluster.env(),
           "HPCBENCH_VENV": sys.prefix, "HPCBENCH_NOTEBOOK_DIR": str(tmp_path)}
    (tmp_path / "results").mkdir()  # the script's --output folder, which SLURM does not create
    submit = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", str(SCRIPT)],
                            capture_output=True, text=True, env=env, timeout=30)
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.strip().split(";")[0]
    out_file = tmp_path / "results" / f"jupyter-{job_id}.out"
    try:
        url = _wait_for(URL_RE, out_file, job_id, env, timeout=90)
        addr, port, token = url["addr"], url["port"], url["token"]
        output = out_file.read_text()
        node = next(n for n in emulated_cluster.nodes if n.address == addr)  # a compute node's address
        assert f"JupyterLab is up on {node.name} ({addr}), port {port}, job {job_id}" in output
        tunnel = TUNNEL_RE.search(output)
        assert tunnel, output
        assert (tunnel["port"], tunnel["addr"], tunnel["port2"]) == (port, addr, port)
        assert tunnel["host"].split(".")[0] == emulated_cluster.controller_host  # where sbatch ran: the "login node"
        assert f"http://localhost:{port}/lab?token={token}" in output
        assert stat.S_IMODE(out_file.stat().st_mode) == 0o600  # the token is for the user's eyes only

        base = f"http://{addr}:{port}"
        status, body = _api(base, "/api/status", token)
        assert status == 200 and "started" in body
        assert _api(base, "/api/status", None)[0] in (401, 403)  # the token is required
        status, specs = _api(base, "/api/kernelspecs", token)
        assert status == 200 and specs["default"] == "hpcbench"
        assert specs["kernelspecs"]["hpcbench"]["spec"]["display_name"] == "hpcbench (Python 3)"

        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
        nb.metadata["kernelspec"] = {"name": "hpcbench", "display_name": "hpcbench (Python 3)", "language": "python"}
        nbformat.write(nb, tmp_path / "check.ipynb")
        status, session = _api(base, "/api/sessions", token, "POST", {
            "path": "check.ipynb", "name": "check.ipynb", "type": "notebook", "kernel": {"name": "hpcbench"}})
        assert status == 201, status
        kernel_id = session["kernel"]["id"]
        channels = f"ws://{addr}:{port}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}"
        ws = websocket.create_connection(channels, header=[f"Authorization: token {token}"], timeout=60)
        try:
            results = [_execute(ws, cell) for cell in CELLS]
        finally:
            ws.close()
        assert results[0]["stdout"].strip() == node.name  # the kernel runs on the compute node
        assert results[0]["result"] == repr(sys.executable)  # ...with the venv's python
        assert results[1]["result"] == "2" and results[1]["status"] == "ok"

        for cell, res in zip(nb.cells, results):
            cell.outputs = res["outputs"]
        status, _ = _api(base, "/api/contents/check.ipynb", token, "PUT",
                         {"type": "notebook", "format": "json", "content": nb})
        assert status == 200
        saved = nbformat.read(tmp_path / "check.ipynb", as_version=4)
        assert saved.cells[1].outputs[0]["data"]["text/plain"] == "2"
        assert _api(base, f"/api/sessions/{session['id']}", token, "DELETE")[0] == 204
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=30, check=False)
    deadline = time.monotonic() + 30
    while _squeue(job_id, env) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _squeue(job_id, env), f"job {job_id} still queued 30 s after scancel"
    with pytest.raises(OSError):  # URLError and connection refused are both OSErrors
        urllib.request.urlopen(f"http://{addr}:{port}/api/status", timeout=5)
