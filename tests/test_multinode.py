"""Two MultiWorkerMirroredStrategy workers on 127.0.0.1 (real TensorFlow, one CPU each): a run
through TF_CONFIG, one through faked Slurm variables with rank 1 killed mid-run, and its resume."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from bench import storage

pytestmark = pytest.mark.slow
ARGS = ["--profile", "smoke", "--workloads", "mlp", "--devices", "cpu", "--precisions", "fp32"]


def _free_port(pair: bool = False) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if not pair:
            return p
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    pytest.skip("no free pair of ports on 127.0.0.1")


def _start(tmp_path, rank, env, *extra):
    out = tmp_path / f"rank{rank}.out"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "run",
            *ARGS,
            *extra,
            "--results-dir",
            str(tmp_path / f"res{rank}"),
            "--reports-dir",
            str(tmp_path / f"rep{rank}"),
        ],
        env={**os.environ, **env},
        stdout=open(out, "w"),
        stderr=subprocess.STDOUT,
    )


def _tf_config(ports, rank):
    return {
        "TF_CONFIG": json.dumps(
            {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": rank}}
        )
    }


def _pair(tmp_path, envs, *extra):
    procs = [_start(tmp_path, 0, envs[0], *extra)]
    time.sleep(3)  # the second node comes up later: the first waits for it to register
    procs.append(_start(tmp_path, 1, envs[1], *extra))
    return procs


def _descendants(procs):
    out = []
    for p in procs:
        try:
            out += psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    return out


def _gone(ps, within=10.0):
    _, alive = psutil.wait_procs(ps, timeout=within)
    return alive


def test_two_workers_on_loopback_through_tf_config(tmp_path):
    ports = [_free_port(), _free_port()]
    procs = _pair(tmp_path, [_tf_config(ports, r) for r in (0, 1)], "--cluster", "tf_config", "--run-id", "pair")
    rcs = [p.wait(timeout=400) for p in procs]
    assert rcs == [0, 0], [(tmp_path / f"rank{r}.out").read_text()[-2000:] for r in (0, 1)]
    assert not (tmp_path / "res1" / "pair.json").exists() and (tmp_path / "res1" / "pair.logs" / "rank1.log").exists()
    doc = storage.load(tmp_path / "res0" / "pair.json")
    assert doc["run"]["status"] == "complete" and doc["run"]["cluster"]["world"] == 2
    cases = {storage.case_id_of(r): r["extra_info"] for r in doc["benchmarks"]}
    assert set(cases) == {"mlp-train-cpux2nodes-fp32-b64", "mlp-infer-cpux2nodes-fp32-b64"}
    for e in cases.values():
        assert e["status"] == "ok" and e["nodes"] == 2 and e["global_batch"] == 2 * 64
        want = "CollectiveAllReduce/RING" if e["mode"] == "train" else "none (inference)"  # no gradients there
        assert e["all_reduce"] == want and e["cluster_world"] == 2
        assert len(e["per_node_host_peak_rss_bytes"]) == 2 and all(v > 0 for v in e["per_node_host_peak_rss_bytes"])
    assert cases["mlp-train-cpux2nodes-fp32-b64"]["loss_final"] > 0  # reduced over both workers
    for e in cases.values():  # the global throughput is set against both nodes' peak, not one node's
        assert e["peak_tflops_measured"] == pytest.approx(2 * e["peak_tflops_per_device"])
        assert e["mfu_measured"] == pytest.approx(e["achieved_tflops"] / e["peak_tflops_measured"])
    html = (tmp_path / "rep0" / "pair" / "index.html").read_text()
    assert "cluster: 2 workers, one per node (tf_config), on 127.0.0.1; all-reduce CollectiveAllReduce/RING" in html
    assert "2 (2 nodes)" in html  # the scaling row
    assert "Per node (a cluster run" in html and "rank 1 (127.0.0.1:" in html
    assert not _gone(_descendants(procs), 1)


def test_slurm_launch_a_killed_rank_ends_the_run_and_resume_finishes_it(tmp_path):
    port = _free_port(pair=True)
    slurm = {
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "2",
        "SLURMD_NODENAME": "localhost",
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
    }
    envs = [{**slurm, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)} for r in (0, 1)]
    procs = _pair(tmp_path, envs, "--cluster", "slurm", "--cluster-port", str(port))
    deadline = time.monotonic() + 300
    while "mlp-infer-cpux2nodes-fp32-b64: round" not in (tmp_path / "rank0.out").read_text():
        assert time.monotonic() < deadline and procs[0].poll() is None, (tmp_path / "rank0.out").read_text()[-2000:]
        time.sleep(0.2)
    workers = _descendants(procs)
    procs[1].send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    rc = procs[0].wait(timeout=120)
    took = time.monotonic() - t0
    assert rc == 1 and took < 60, took
    assert not _gone(workers), "a worker outlived its run"  # rank 1's worker died with its parent
    (path,) = (tmp_path / "res0").glob("*-slurm4242.0.json")
    doc = storage.load(path)
    assert doc["run"]["status"] == "failed" and doc["run"]["cluster"]["launcher"] == "slurm"
    recs = {storage.case_id_of(r): r["extra_info"] for r in storage.records(doc)}
    assert recs["mlp-train-cpux2nodes-fp32-b64"]["status"] == "ok"
    infer = recs["mlp-infer-cpux2nodes-fp32-b64"]
    assert infer["status"] == "error" and infer["peer_failure"] and "task:1" in infer["reason"]

    # the same command with --resume on both nodes: only the broken case runs again
    rid = path.stem
    ports = [_free_port(), _free_port()]
    procs = _pair(tmp_path, [_tf_config(ports, r) for r in (0, 1)], "--cluster", "tf_config", "--resume", rid)
    assert [p.wait(timeout=400) for p in procs] == [0, 0], (tmp_path / "rank0.out").read_text()[-2000:]
    doc = storage.load(path)
    assert doc["run"]["status"] == "complete"
    assert {storage.case_id_of(r): r["extra_info"]["status"] for r in storage.records(doc)} == {
        "mlp-train-cpux2nodes-fp32-b64": "ok",
        "mlp-infer-cpux2nodes-fp32-b64": "ok",
    }
