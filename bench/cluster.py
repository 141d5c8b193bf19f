"""Who am I in a multi-node run: rank, world size and worker addresses, from TF_CONFIG or Slurm.

Resolved by the parent (no TensorFlow import) into one ``Cluster``; the worker is then always
given a TF_CONFIG written from it, so TensorFlow's ``TFConfigClusterResolver`` is the only path.
Slurm is read directly rather than through TensorFlow's ``SlurmClusterResolver``, which sorts host
names as strings (``n10`` before ``n9``: ranks mapped to the wrong hosts) and assumes GPUs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from bench.errors import UserError

LAUNCHERS = ("tf_config", "slurm")
DEFAULT_PORT = 12345


@dataclass(frozen=True)
class Cluster:
    """A process's place in the cluster; ``workers[rank]`` is its own address."""

    launcher: str
    rank: int
    workers: tuple[str, ...]
    local_rank: int = 0

    @property
    def world(self) -> int:
        """Number of workers (accelbench runs one worker per node)."""
        return len(self.workers)

    @property
    def tasks_here(self) -> int:
        """Tasks of the cluster on this rank's host (accelbench wants one per node)."""
        return self.hosts.count(self.hosts[self.rank])

    @property
    def hosts(self) -> list[str]:
        """Host of each rank."""
        return [w.rsplit(":", 1)[0] for w in self.workers]

    def tf_config(self) -> str:
        """The TF_CONFIG the worker process gets: workers only, in rank order."""
        return json.dumps({"cluster": {"worker": list(self.workers)}, "task": {"type": "worker", "index": self.rank}})

    def to_dict(self) -> dict:
        """Stored in the plan and in the results' run block."""
        return {"launcher": self.launcher, "rank": self.rank, "world": self.world, "workers": list(self.workers)}


def parse_tf_config(text: str | None) -> Cluster:
    """TF_CONFIG -> Cluster: ``worker`` tasks and at most one ``chief`` (rank 0, workers after it)."""
    if not text:
        raise UserError("--cluster tf_config: TF_CONFIG is not set")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"TF_CONFIG is not valid JSON ({e.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("cluster"), dict):
        raise UserError("TF_CONFIG needs a 'cluster' object")
    cluster, task = doc["cluster"], doc.get("task")
    other = sorted(set(cluster) - {"chief", "worker"})
    if other:
        raise UserError(f"TF_CONFIG: accelbench runs only chief and worker tasks; got {', '.join(other)}")
    chief, workers = cluster.get("chief", []), cluster.get("worker", [])
    if not isinstance(chief, list) or not isinstance(workers, list) or len(chief) > 1:
        raise UserError("TF_CONFIG: 'chief' must be a list of at most one address and 'worker' a list of addresses")
    addresses = [*chief, *workers]
    if len(addresses) < 2:
        raise UserError(f"TF_CONFIG lists {len(addresses)} task(s); a cluster run needs at least 2")
    if not all(isinstance(a, str) and re.fullmatch(r"[^\s:]+:\d{1,5}", a) for a in addresses):
        raise UserError(f"TF_CONFIG: every address must be host:port; got {addresses}")
    if len(set(addresses)) != len(addresses):
        raise UserError(f"TF_CONFIG: an address appears twice: {addresses}")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise UserError("TF_CONFIG needs a 'task' with 'type' and 'index' (this process's place)")
    kind, index = task["type"], task["index"]
    if kind not in ("chief", "worker") or not isinstance(index, int):
        raise UserError(f"TF_CONFIG: task must be a chief or worker with an integer index; got {task}")
    pool = chief if kind == "chief" else workers
    if not 0 <= index < len(pool):
        raise UserError(f"TF_CONFIG: task {kind} {index} is out of range ({len(pool)} {kind} task(s))")
    rank = index if kind == "chief" else len(chief) + index
    return Cluster("tf_config", rank, tuple(addresses))


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list in Slurm's order: ``n[9-10],gpu5`` -> n9, n10, gpu5 (zero padding kept)."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?(?:,|$)", text.strip()):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                    raise UserError(f"cannot read the Slurm node list {text!r} (range {part!r})")
                out += [f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
            elif part.isdigit():
                out.append(f"{prefix}{part}")
            else:
                raise UserError(f"cannot read the Slurm node list {text!r} ({part!r})")
    if not out:
        raise UserError(f"cannot read the Slurm node list {text!r}")
    return out


def expand_tasks_per_node(text: str) -> list[int]:
    """``2(x2),1`` -> [2, 2, 1]."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise UserError(f"cannot read SLURM_STEP_TASKS_PER_NODE {text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def parse_slurm(env: Mapping[str, str], port: int = DEFAULT_PORT) -> Cluster:
    """Slurm's step variables -> Cluster; address of each task = its node : port + local rank."""
    need = ("SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
    missing = [k for k in need if not env.get(k)]
    if missing:
        raise UserError(f"--cluster slurm: {', '.join(missing)} not set (run the command under srun)")
    nodes = expand_nodelist(env["SLURM_STEP_NODELIST"])
    tasks = expand_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"])
    if len(tasks) != len(nodes):
        raise UserError(
            f"Slurm: {len(nodes)} nodes but tasks per node for {len(tasks)} ({env['SLURM_STEP_TASKS_PER_NODE']})"
        )
    workers = [f"{n}:{port + local}" for n, t in zip(nodes, tasks) for local in range(t)]
    rank = int(env["SLURM_PROCID"])
    if not 0 <= rank < len(workers):
        raise UserError(f"Slurm: SLURM_PROCID {rank} is out of range for {len(workers)} tasks")
    if env.get("SLURM_NTASKS") and int(env["SLURM_NTASKS"]) != len(workers):
        raise UserError(f"Slurm: SLURM_NTASKS {env['SLURM_NTASKS']} but the node list gives {len(workers)} tasks")
    host = workers[rank].rsplit(":", 1)[0]
    if env.get("SLURMD_NODENAME") and env["SLURMD_NODENAME"] != host:
        raise UserError(f"Slurm: rank {rank} maps to {host} but runs on {env['SLURMD_NODENAME']} (node list order?)")
    local = int(env.get("SLURM_LOCALID") or 0)
    return Cluster("slurm", rank, tuple(workers), local)


def resolve(launcher: str, env: Mapping[str, str], port: int = DEFAULT_PORT) -> Cluster:
    """The cluster this process belongs to."""
    if launcher == "tf_config":
        return parse_tf_config(env.get("TF_CONFIG"))
    if launcher == "slurm":
        return parse_slurm(env, port)
    raise UserError(f"--cluster must be one of {', '.join(LAUNCHERS)}; got {launcher!r}")


def run_id(given: str | None, cluster: Cluster, env: Mapping[str, str], now: datetime | None = None) -> str:
    """The same run id on every rank: --run-id, else from Slurm's job and step, else ACCELBENCH_RUN_ID."""
    if given:
        return given
    if cluster.launcher == "slurm" and env.get("SLURM_JOB_ID"):
        day = (now or datetime.now(timezone.utc)).strftime("%Y%m%d")
        return f"{day}-slurm{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}"
    if env.get("ACCELBENCH_RUN_ID"):
        return env["ACCELBENCH_RUN_ID"]
    raise UserError("a cluster run needs the same run id on every node: pass --run-id ID (or set ACCELBENCH_RUN_ID)")
