"""The rank side of hpcbench's SLURM launcher, without SLURM: two processes given the variables srun gives its
tasks (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) meet at rank 0's TCP store, run an experiment's entry and
write their records; when rank 0 cannot create its store, the ranks say so and leave no records."""

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict

from hpcbench.core.results import RecordContext, find_record_files
from hpcbench.dist.launcher import RENDEZVOUS_FAILURE
from hpcbench.experiments.collectives.config import CollectivesConfig


def _spec(tmp_path) -> str:
    cfg = CollectivesConfig(nodes=1, ranks_per_node=2, ops=["all_reduce"], min_bytes="1K", max_bytes="1K",
                            warmup_iters=1, iters=2, backend="gloo")
    spec = {"entry": "hpcbench.experiments.collectives.worker:run_worker",
            "config_class": "hpcbench.experiments.collectives.config:CollectivesConfig", "config": cfg.to_dict(),
            "context": json.loads(RecordContext(experiment="collectives", task_id="t").to_json()),
            "records_dir": str(tmp_path / "records"), "tag": "collectives", "backend": "gloo", "bind": "none"}
    (tmp_path / "records").mkdir()
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return str(path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(spec: str, port: int) -> list[subprocess.CompletedProcess]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-m", "hpcbench", "rank", spec], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**base, "HPCBENCH_SRUN_RANKS": "1", "SLURM_PROCID": str(r), "SLURM_NTASKS": "2",
                                   "SLURM_LOCALID": str(r), "SLURM_STEP_NUM_NODES": "1", "OMP_NUM_THREADS": "1",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "HPCBENCH_RDZV_TIMEOUT_S": "5"})
             for r in (0, 1)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_ranks_numbered_by_srun_meet_at_rank_0s_store_and_write_their_records(tmp_path):
    runs = _ranks(_spec(tmp_path), _free_port())
    assert [r.returncode for r in runs] == [0, 0], [r.stderr[-2000:] for r in runs]
    records = sorted(p.name for p in find_record_files(tmp_path / "records"))
    assert records == ["collectives-rank00000.parquet", "collectives-rank00001.parquet"]
    import pandas as pd

    topo = pd.read_parquet(tmp_path / "records" / records[1])
    assert set(topo["rank"]) == {1} and set(topo["world_size"]) == {2}


def test_a_store_port_taken_is_said_and_leaves_no_records(tmp_path):
    import threading

    # the port held on every address by a listener that hangs up on whoever connects (as in
    # tests/test_slurm_backend.py, where it is held on the first node)
    with socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True) as holder:
        port = holder.getsockname()[1]

        def hang_up() -> None:
            while True:
                try:
                    conn, _ = holder.accept()
                except OSError:
                    return
                conn.close()

        threading.Thread(target=hang_up, daemon=True).start()
        runs = _ranks(_spec(tmp_path), port)
    assert runs[0].returncode == 1
    assert f"{RENDEZVOUS_FAILURE} rank 0" in runs[0].stderr and f"store 127.0.0.1:{port} (create" in runs[0].stderr
    assert runs[1].returncode == 1  # it could not meet rank 0 either (srun would have ended it at once)
    assert not list(find_record_files(tmp_path / "records"))
