"""The parent/worker contract: plans and spool messages survive the trip, and nothing else passes."""

import dataclasses
import subprocess
import sys

import pytest

from bench import protocol
from bench.cases import Case, DeviceConfig
from bench.profiles import timing
from bench.protocol import Fatal, Heartbeat, Record, Skipped, WorkerPlan


def _plan(**kw) -> WorkerPlan:
    cases = (
        Case("mlp", "train", "gpu", 2, False, "mixed_bfloat16", True, 128, nodes=2, backend="tensorflow"),
        Case("mlp", "infer", "gpu", 2, False, "fp32", True, 128, nodes=2, backend="tensorflow"),
    )
    base = dict(
        run_id="r1",
        profile="smoke",
        device=DeviceConfig("gpu", 2, False),
        timing=timing("smoke"),
        cases=cases,
        gpu={"uuids": ["GPU-a", "GPU-b"], "pci_bus_ids": ["0000:17:00.0", "0000:65:00.0"]},
        idle_power_w={"GPU-a": 61.5},
        sampler_interval_s=0.05,
        sampler=False,
        nvml_status="ok",
        cluster={"launcher": "slurm", "rank": 1, "world": 2, "workers": ["n1:1", "n2:1"]},
        skip=(cases[1].id,),
    )
    return WorkerPlan(**{**base, **kw})


def test_a_plan_survives_the_file_with_every_field(tmp_path):
    plan = _plan()
    plan.write(tmp_path / "plan.json")
    back = WorkerPlan.read(tmp_path / "plan.json")
    assert back == plan  # frozen dataclasses compare field by field: nothing dropped or retyped
    assert back.ids == [c.id for c in plan.cases] and back.case(plan.cases[1].id) == plan.cases[1]
    with pytest.raises(KeyError):
        back.case("nope")
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.profile = "standard"  # type: ignore[misc]


def test_the_plan_fingerprint_is_stable_across_processes_and_covers_what_nodes_share(tmp_path):
    plan = _plan()
    plan.write(tmp_path / "plan.json")
    here = plan.fingerprint(("2.21.0", "3.15.1"))
    code = (
        "import sys; from bench.protocol import WorkerPlan; "
        "print(WorkerPlan.read(sys.argv[1]).fingerprint(('2.21.0', '3.15.1')))"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "plan.json")],
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": "."},
            check=True,
        )
        assert int(out.stdout) == here
    assert here < 2**53  # exact in the float64 the nodes all-gather
    for other in (
        _plan(profile="standard"),
        _plan(cases=_plan().cases[:1]),
        _plan(timing=timing("standard")),
        _plan(device=DeviceConfig("gpu", 1, False)),
    ):
        assert other.fingerprint(("2.21.0", "3.15.1")) != here
    assert plan.fingerprint(("2.21.0", "3.16.0")) != here
    # what each node may have of its own: its rank, its GPUs, its idle power
    assert _plan(cluster={"rank": 0}, gpu={}, idle_power_w={}).fingerprint(("2.21.0", "3.15.1")) == here


@pytest.mark.parametrize(
    "msg",
    [
        Heartbeat("mlp-train-cpu-fp32-b64", "round 2 of 6", 1.5),
        Heartbeat(None, "starting TensorFlow", 2.0),
        Skipped("mlp-train-cpu-fp32-b64"),
        Fatal("nodes disagree on the plan"),
        Record({"extra_info": {"case_id": "mlp-train-cpu-fp32-b64", "status": "oom"}, "stats": None}),
    ],
)
def test_each_message_survives_a_spool_line(msg):
    line = protocol.encode(msg)
    assert "\n" not in line
    assert protocol.decode(line) == msg


@pytest.mark.parametrize("line", ["not json", "[1, 2]", '{"stats": {}}', '{"extra_info": {"status": "ok"}}'])
def test_anything_else_is_a_protocol_error(line):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(line)


def test_the_reader_takes_complete_lines_and_waits_for_a_partial_one(tmp_path):
    path = tmp_path / "spool.jsonl"
    assert protocol.read_new(path, 0) == ([], 0)  # not written yet
    spool = protocol.SpoolWriter(path)
    spool.send(Heartbeat("a", "building", 1.0))
    spool.send(Record({"extra_info": {"case_id": "a", "status": "ok"}}))
    with open(path, "a") as f:
        f.write('{"skipped": "b"')  # the worker is still writing this one
    msgs, offset = protocol.read_new(path, 0)
    assert [type(m) for m in msgs] == [Heartbeat, Record] and msgs[1].case_id == "a" and msgs[1].status == "ok"
    assert protocol.read_new(path, offset) == ([], offset)
    with open(path, "a") as f:
        f.write("}\n")
    msgs, end = protocol.read_new(path, offset)
    assert msgs == [Skipped("b")] and end == path.stat().st_size


def test_a_worker_run_by_hand_without_a_spool_writes_nothing(tmp_path):
    protocol.SpoolWriter(None).send(Fatal("x"))  # no file to write: a no-op, not an error
    assert list(tmp_path.iterdir()) == []
