"""Stands in for ``python -m bench.worker PLAN SPOOL`` as one tenant (no TensorFlow), through the real barrier and window.

Its "device" is a step of 5 ms of sleep: tenants sleeping side by side do not interfere (STP
= N). FAKE_TENANT=serial makes the device serialise them perfectly and fairly (time slices of one
step taken in turn, tenant I in slot I of every N, as a time-sliced GPU does: STP = 1, each tenant
N times slower; a file lock was unfair enough that a tenant could finish no round in the window). FAKE_TENANT=late:I starts tenant I's rounds 0.4 s after the start signal;
die:I kills tenant I by SIGKILL in its rounds; oom:I records an out-of-memory case;
hang:I hangs tenant I before it is ready. The index I counts from 1 and only applies to a group
of more than one worker (never to the alone baseline). FAKE_TENANT_PIDS names a file each
tenant appends its pid to.
"""

import os
import signal
import sys
import time

from bench import loop, protocol
from bench.protocol import WorkerPlan

STEP_S = 0.005

plan = WorkerPlan.read(sys.argv[1])
spool = protocol.SpoolWriter(sys.argv[2])
tenant = plan.tenant or {}
K = int(tenant.get("k") or 4)  # a mix's latency tenant: one request per round
(case,) = plan.cases
me = int(tenant.get("index", 0)) + 1 if tenant.get("of", 1) > 1 else 0  # 0: the alone baseline
mode, _, who = os.environ.get("FAKE_TENANT", "").partition(":")
hit = who and int(who) == me
if os.environ.get("FAKE_TENANT_PIDS"):
    with open(os.environ["FAKE_TENANT_PIDS"], "a") as f:
        f.write(f"{os.getpid()}\n")
N = int(tenant.get("of", 1))


def step() -> None:
    if mode == "serial" and me:  # one tenant at a time holds the device: wait for this tenant's slice
        slot = int(time.monotonic() / STEP_S)  # CLOCK_MONOTONIC is one clock for every process
        slot += (me - 1 - slot) % N
        time.sleep(max(0.0, slot * STEP_S - time.monotonic()))
        time.sleep(STEP_S)
    else:
        time.sleep(STEP_S)


spool.send(protocol.Heartbeat(case.id, "building"))
if mode == "hang" and hit:
    while True:
        time.sleep(60)
loop.wait_for_start(tenant["go"], lambda phase: spool.send(protocol.Heartbeat(case.id, phase)))
if mode == "late" and hit:
    time.sleep(0.4)
if mode == "die" and hit:
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
stamps, _ = loop.window_rounds(step, lambda: None, K, tenant["window_s"])
times = [e - s for s, e in stamps]
info = {
    "case_id": case.id,
    **case.to_dict(),
    "run_id": plan.run_id,
    "global_batch": case.global_batch,
    "flops_per_sample": 1000,
    "status": "ok",
    "reason": "",
    "steps_per_round": K,
    "rounds": len(times),
    "samples_per_s": case.global_batch * K / (sum(times) / len(times)),
    "step_time_median_s": sorted(times)[len(times) // 2] / K,
    "tenant_rounds": [list(s) for s in stamps],
    "tenant_pid": os.getpid(),
    "device_peak_mem_bytes": 2**20,
    "case_wall_s": 1.0,
}
if mode == "oom" and hit:
    info.update(status="oom", reason="RESOURCE_EXHAUSTED: out of memory under the tenant's cap")
spool.send(protocol.Record({"name": case.id, "extra_info": info}))
