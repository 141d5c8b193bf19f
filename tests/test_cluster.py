"""Cluster identity from TF_CONFIG and Slurm (no TensorFlow)."""

import dataclasses
import json
from datetime import datetime, timezone

import pytest

from bench import cluster as cl
from bench.errors import UserError


def tfc(cluster, task):
    return json.dumps({"cluster": cluster, "task": task})


def test_tf_config_workers_and_chief_ranks():
    c = cl.parse_tf_config(tfc({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 1}))
    assert (c.rank, c.world, c.hosts) == (1, 2, ["a", "b"])
    c = cl.parse_tf_config(tfc({"chief": ["c:1"], "worker": ["a:1", "b:2"]}, {"type": "worker", "index": 0}))
    assert c.rank == 1 and c.workers == ("c:1", "a:1", "b:2")
    assert cl.parse_tf_config(tfc({"chief": ["c:1"], "worker": ["a:1"]}, {"type": "chief", "index": 0})).rank == 0
    kubeflow = json.loads(
        tfc({"worker": ["j-worker-0.ns.svc:2222", "j-worker-1.ns.svc:2222"]}, {"type": "worker", "index": 0})
    )
    kubeflow["environment"] = "cloud"
    assert cl.parse_tf_config(json.dumps(kubeflow)).world == 2
    # what the worker gets: workers only, this rank's index
    assert json.loads(c.tf_config()) == {
        "cluster": {"worker": ["c:1", "a:1", "b:2"]},
        "task": {"type": "worker", "index": 1},
    }


@pytest.mark.parametrize(
    "text, msg",
    [
        (None, "TF_CONFIG is not set"),
        ("{nope", "not valid JSON"),
        (
            tfc({"worker": ["a:1", "b:2"], "ps": ["p:1"]}, {"type": "worker", "index": 0}),
            "only chief and worker tasks; got ps",
        ),
        (tfc({"worker": ["a:1", "b:2"], "evaluator": ["e:1"]}, {"type": "worker", "index": 0}), "got evaluator"),
        (tfc({"worker": ["a:1", "b:2"]}, None), "needs a 'task'"),
        (tfc({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 2}), "worker 2 is out of range"),
        (tfc({"worker": ["a:1"]}, {"type": "worker", "index": 0}), "at least 2"),
        (tfc({"worker": ["a", "b:2"]}, {"type": "worker", "index": 0}), "host:port"),
        (tfc({"worker": ["a:1", "a:1"]}, {"type": "worker", "index": 0}), "appears twice"),
    ],
)
def test_tf_config_rejections(text, msg):
    with pytest.raises(UserError, match=msg):
        cl.parse_tf_config(text)


def test_slurm_node_lists_in_slurms_order_not_string_order():
    assert cl.expand_nodelist("n[9-10]") == ["n9", "n10"]  # sorted() would give n10 first
    assert cl.expand_nodelist("node[01-03],gpu5") == ["node01", "node02", "node03", "gpu5"]
    assert cl.expand_nodelist("a[1,3-4],c") == ["a1", "a3", "a4", "c"]
    assert cl.expand_tasks_per_node("2(x2),1") == [2, 2, 1]
    with pytest.raises(UserError, match="node list"):
        cl.expand_nodelist("n[3-1]")


def slurm(procid, nodes="n[9-10]", tasks="1(x2)", **more):
    return {"SLURM_PROCID": str(procid), "SLURM_STEP_NODELIST": nodes, "SLURM_STEP_TASKS_PER_NODE": tasks, **more}


def test_slurm_ranks_hosts_and_ports():
    c = cl.parse_slurm(slurm(0, SLURMD_NODENAME="n9"), port=20000)
    assert c.workers == ("n9:20000", "n10:20000") and c.rank == 0
    c = cl.parse_slurm(slurm(2, nodes="g[1-2],h7", tasks="2(x2),1", SLURM_LOCALID="0", SLURM_NTASKS="5"), port=100)
    assert c.workers == ("g1:100", "g1:101", "g2:100", "g2:101", "h7:100") and c.hosts[c.rank] == "g2"
    with pytest.raises(UserError, match="maps to n10 but runs on n9"):
        cl.parse_slurm(slurm(1, SLURMD_NODENAME="n9"))
    with pytest.raises(UserError, match="SLURM_STEP_NODELIST"):
        cl.parse_slurm({"SLURM_PROCID": "0"})
    with pytest.raises(UserError, match="SLURM_NTASKS 3"):
        cl.parse_slurm(slurm(0, SLURM_NTASKS="3"))


def test_run_id_is_the_same_on_every_rank():
    c = cl.parse_slurm(slurm(1))
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    assert cl.run_id(None, c, {"SLURM_JOB_ID": "812", "SLURM_STEP_ID": "3"}, now) == "20261202-slurm812.3"
    assert cl.run_id("given", c, {"SLURM_JOB_ID": "812"}) == "given"
    t = cl.parse_tf_config(tfc({"worker": ["a:1", "b:2"]}, {"type": "worker", "index": 0}))
    assert cl.run_id(None, t, {"ACCELBENCH_RUN_ID": "nightly-7"}) == "nightly-7"
    with pytest.raises(UserError, match="--run-id"):
        cl.run_id(None, t, {})


# ----- planner and cases in cluster mode (no TensorFlow)


def test_case_ids_and_global_batch_of_multi_node_cases():
    from bench.cases import Case

    c = Case("cnn", "train", "gpu", 8, False, "mixed_bfloat16", False, 256, nodes=2)
    assert c.id == "cnn-train-gpu8x2nodes-mixed_bfloat16-b256" and c.global_batch == 256 * 16
    assert Case("mlp", "train", "cpu", 1, False, "fp32", False, 64, nodes=2).id == "mlp-train-cpux2nodes-fp32-b64"
    old = Case("mlp", "train", "cpu", 1, False, "fp32", False, 64).to_dict()
    del old["nodes"]  # results written before multi-node runs
    assert Case.from_dict(old).nodes == 1


def test_planner_in_cluster_mode():
    from test_capability import machine

    from bench.planning import RunOptions, plan

    p = plan(RunOptions(profile="smoke", workloads=("mlp",), devices=("cpu",), xla="both", nodes=2), machine())
    ids = {c.id: s for c, s in p}
    assert set(ids) >= {"mlp-train-cpux2nodes-fp32-b64", "mlp-infer-cpux2nodes-fp32-b64"}
    assert all(c.nodes == 2 and c.device_count == 1 for c, _ in p)
    xla = ids["mlp-train-cpux2nodes-fp32-xla-b64"]
    assert not xla.supported and "RING" in xla.reason
    for bad, msg in (
        (dict(virtual_devices=2), "no virtual devices"),
        (dict(devices=("cpu", "gpu:1")), "one --devices"),
        (dict(shard="1/2"), "do not mix"),
    ):
        with pytest.raises(UserError, match=msg):
            RunOptions(nodes=2, **bad)


def test_several_tasks_per_node_with_gpus_are_refused_before_they_share_gpus(tmp_path):
    """gpu-review-2 finding 6: every task of a node would open the same first K GPUs."""
    from test_capability import machine

    from bench import runner
    from bench.planning import RunOptions

    two_gpus = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))] * 2, nvml_gpus=2)
    c = cl.parse_slurm(slurm(1, nodes="g[1-2]", tasks="2(x2)", SLURM_LOCALID="1", SLURMD_NODENAME="g1"))
    assert c.tasks_here == 2 and c.local_rank == 1
    opts = RunOptions(profile="smoke", workloads=("mlp",), modes=("train",), devices=("gpu:1",), nodes=4)
    with pytest.raises(UserError, match="2 tasks on this node \\(g1\\) with GPU cases.*--ntasks-per-node=1"):
        runner.Run.new(opts, two_gpus, tmp_path, ["run"], cluster=c)
    cpu = RunOptions(profile="smoke", workloads=("mlp",), modes=("train",), devices=("cpu",), nodes=4)
    assert runner.Run.new(cpu, two_gpus, tmp_path, ["run"], cluster=c).plan  # CPU tasks share nothing
    one = cl.parse_slurm(slurm(1, nodes="g[1-2]", tasks="1(x2)", SLURMD_NODENAME="g2"))
    assert (
        one.tasks_here == 1
        and runner.Run.new(
            dataclasses.replace(opts, nodes=2), two_gpus, tmp_path, ["run"], cluster=one, run_id="r1"
        ).plan
    )
