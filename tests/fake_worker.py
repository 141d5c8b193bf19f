"""Stands in for ``python -m bench.worker PLAN SPOOL`` in the runner tests (no TensorFlow).

With 3 or more cases it finishes the first and then, "during" the second, dies by SIGKILL as an
OOM-killed worker would (FAKE_WORKER=kill, the default; FAKE_WORKER=oom prints an allocator's out of
memory first) or hangs forever after a heartbeat, as a
worker stuck in an NCCL all-reduce would (FAKE_WORKER=hang); otherwise it finishes every case.
FAKE_WORKER=hang-start makes every worker hang in its first case, as a persistent hang would.
FAKE_WORKER=fail:TEXT instead finishes every case, recording those whose id contains TEXT as
failed (as a broken GPU path would be). FAKE_WORKER=fatal:TEXT stops at once with TEXT as the
reason to end the run (a cluster worker finding that the nodes disagree on the plan).
Serve cases carry the figures of the real rate search, run on a virtual clock against a fake device.
"""

import json
import os
import signal
import sys
import time

from bench import protocol, rate_search, serve, storage
from bench.protocol import WorkerPlan


def serve_case(c, timing) -> dict:
    """A serve case's figures: a GPU serves a batch of b in 1 ms + 10 us x b, a CPU in 2 ms + 100 us x b."""
    fixed, per_row = (0.001, 0.00001) if c.device_kind == "gpu" else (0.002, 0.0001)
    clock = serve.VirtualClock()
    out = rate_search.run_case(
        lambda b: clock.advance(fixed + per_row * b),
        c.per_replica_batch,
        c.slo_ms,
        0.05,  # the harness floor's p99, ms
        clock,
        timing.serve_trial_s,
        timing.serve_max_trial_s,
        timing.serve_max_trials,
    )
    return out


plan = WorkerPlan.read(sys.argv[1])
if os.environ.get("FAKE_WORKER_PLANS"):  # let a test see every plan a worker was given
    with open(os.environ["FAKE_WORKER_PLANS"], "a") as f:
        f.write(json.dumps(plan.to_dict()) + "\n")
spool = protocol.SpoolWriter(sys.argv[2])
if os.environ.get("FAKE_WORKER", "").startswith("fatal:"):  # a cluster worker whose nodes disagree
    spool.send(protocol.Fatal(os.environ["FAKE_WORKER"][6:]))
    sys.exit(2)
for i, c in enumerate(plan.cases):
    mode = os.environ.get("FAKE_WORKER", "kill")
    spool.send(protocol.Heartbeat(c.id, "building"))
    if mode == "hang-start":  # every worker hangs in its first case (a persistent NCCL or driver hang)
        print("initialising NCCL ...", flush=True)
        while True:
            time.sleep(60)
    if i == 1 and len(plan.cases) >= 3 and not mode.startswith("fail:"):
        if mode == "hang":
            spool.send(protocol.Heartbeat(c.id, "round 1 of 6"))
            print("all-reduce started ...", flush=True)
            while True:
                time.sleep(60)
        print("allocating a lot ...", flush=True)
        if mode == "oom":  # what the allocator prints before the process dies of it
            print("2026-12-03 W external/xla: RESOURCE_EXHAUSTED: CUDA_ERROR_OUT_OF_MEMORY: out of memory", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if c.id in plan.skip:  # a cluster resume: an earlier attempt measured it
        spool.send(protocol.Skipped(c.id))
        continue
    info = {
        "case_id": c.id,
        **c.to_dict(),
        "run_id": plan.run_id,
        "global_batch": c.global_batch,
        "status": "ok",
        "reason": "",
        "steps_per_round": 10,
        "rounds": 6,
        "ci_looks": list(plan.timing.looks),  # the plan's looks: a second worker's are its first look only
        # FAKE_WORKER_SPREAD: each worker process measures a little differently, as real ones do
        "samples_per_s": 6400.0 * (1 + 0.01 * (os.getpid() % 7 - 3) if os.environ.get("FAKE_WORKER_SPREAD") else 1),
    }
    if c.mode == "serve":  # the real rate search on a virtual clock, against a fake device's service times
        info.update(serve_case(c, plan.timing))
    if mode.startswith("fail:") and mode[5:] in c.id:
        info.update(status="error", reason="InternalError: NCCL operation ncclAllReduce failed: unhandled system error")
    rec = {
        "group": None,
        "name": f"test_case[{c.id}]",
        "fullname": storage.suite_name(c.id)[1],
        "params": {"case_id": c.id},
        "param": c.id,
        "extra_info": info,
        "options": {},
        # rounds of 0.1 s, as the real worker stores them: per sample (schema 2)
        "stats": storage.per_sample_stats([0.1] * 6, info["global_batch"] * 10) if info["status"] == "ok" else None,
    }
    spool.send(protocol.Record(rec))
