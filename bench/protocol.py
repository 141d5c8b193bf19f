"""The contract between the parent (``bench.runner``) and a worker process (``bench.worker``).

The parent writes one :class:`WorkerPlan` as JSON; the worker appends one JSON line per message
to its spool: a :class:`Heartbeat` (progress, for the watchdog and the bar), a :class:`Record`
(a finished case, measured or failed), a :class:`Skipped` case (measured by an earlier attempt of
a cluster run) or a :class:`Fatal` reason to end the run. Both sides, and the tests' fake worker,
build and read these types only, so a field can't be spelt two ways.
Pure: imports no framework.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cases import Case, DeviceConfig
from bench.profiles import Timing
from bench.sweep import Climb


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker runs: its cases on one device configuration, and how to measure them."""

    run_id: str
    profile: str
    device: DeviceConfig
    timing: Timing
    cases: tuple[Case, ...]
    backend: str = "tensorflow"
    gpu: Mapping[str, Any] = field(default_factory=dict)  # the machine's GPU plan: uuids, bus ids, memory
    idle_power_w: Mapping[str, float] = field(default_factory=dict)  # by GPU uuid, measured before any worker
    sampler_interval_s: float = 0.1
    sampler: bool = True
    nvml_status: str = "not checked"
    cluster: Mapping[str, Any] | None = None  # Cluster.to_dict() in a multi-node run
    skip: tuple[str, ...] = ()  # cluster resume: cases an earlier attempt finished (rank 0 knows)
    # one tenant of a shared device (bench.tenant_run): index, of, go (the start file), window_s
    tenant: Mapping[str, Any] | None = None
    # matmul peaks measured earlier in the run on this device kind, by precision: tflops, n, dtype, case_id
    probes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # a batch sweep: the pairs of lines whose higher points need not be measured once answered (bench.sweep.Climb),
    # and the per-round throughput of their cases measured earlier in the run
    climb: tuple[Climb, ...] = ()
    rounds: Mapping[str, Sequence[float]] = field(default_factory=dict)

    @property
    def ids(self) -> list[str]:
        """Case ids in run order."""
        return [c.id for c in self.cases]

    def case(self, case_id: str) -> Case:
        """The case with this id (KeyError if the plan has none)."""
        for c in self.cases:
            if c.id == case_id:
                return c
        raise KeyError(case_id)

    def to_dict(self) -> dict:
        """JSON-ready; each case carries its id beside its fields."""
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "backend": self.backend,
            "device": {"kind": self.device.kind, "count": self.device.count, "virtual": self.device.virtual},
            "timing": self.timing.to_dict(),
            "cases": [{"case_id": c.id, **c.to_dict()} for c in self.cases],
            "gpu": dict(self.gpu),
            "idle_power_w": dict(self.idle_power_w),
            "sampler_interval_s": self.sampler_interval_s,
            "sampler": self.sampler,
            "nvml_status": self.nvml_status,
            "cluster": dict(self.cluster) if self.cluster else None,
            "skip": list(self.skip),
            "tenant": dict(self.tenant) if self.tenant else None,
            "probes": {k: dict(v) for k, v in self.probes.items()},
            "climb": [c.to_dict() for c in self.climb],
            "rounds": {k: list(v) for k, v in self.rounds.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(
            run_id=d["run_id"],
            profile=d["profile"],
            backend=d.get("backend", "tensorflow"),
            device=DeviceConfig(**d["device"]),
            timing=Timing(**d["timing"]),
            cases=tuple(Case.from_dict(c) for c in d["cases"]),
            gpu=d.get("gpu") or {},
            idle_power_w=d.get("idle_power_w") or {},
            sampler_interval_s=d.get("sampler_interval_s", 0.1),
            sampler=d.get("sampler", True),
            nvml_status=d.get("nvml_status", "not checked"),
            cluster=d.get("cluster") or None,
            skip=tuple(d.get("skip") or ()),
            tenant=d.get("tenant") or None,
            probes=d.get("probes") or {},
            climb=tuple(Climb.from_dict(c) for c in d.get("climb") or ()),
            rounds={str(k): [float(x) for x in v] for k, v in (d.get("rounds") or {}).items()},
        )

    def fingerprint(self, versions: Sequence[str] = ()) -> int:
        """52 bits of what every node of a cluster must agree on (exact as a float64, to all-gather).

        Cases, profile, timing, device and the framework versions given; not a node's own rank,
        GPUs or idle power.
        """
        d = self.to_dict()
        key = {"cases": self.ids, "profile": self.profile, "timing": d["timing"], "device": d["device"]}
        key["versions"] = list(versions)
        return int(hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:13], 16)

    def write(self, path: str | Path) -> None:
        """The plan file a worker is started with."""
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def read(cls, path: str | Path) -> WorkerPlan:
        """Read a plan file written by :meth:`write`."""
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class Heartbeat:
    """What the worker is doing now (never written inside a timed round)."""

    case_id: str | None
    phase: str
    t: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Record:
    """A finished case: its pytest-benchmark record (status ``ok`` or a failure with its reason)."""

    record: Mapping[str, Any]

    @property
    def case_id(self) -> str:
        """The record's case id."""
        return str(self.record["extra_info"]["case_id"])

    @property
    def status(self) -> str:
        """``ok`` or how the case failed."""
        return str(self.record["extra_info"].get("status", "ok"))


@dataclass(frozen=True)
class Skipped:
    """A case an earlier attempt of the run measured (a resumed cluster run)."""

    case_id: str


@dataclass(frozen=True)
class Fatal:
    """A one-line reason to end the whole run (exit 2), e.g. nodes that disagree on the plan."""

    message: str


Message = Heartbeat | Record | Skipped | Fatal


class ProtocolError(ValueError):
    """A spool line that is none of the messages."""


def encode(msg: Message) -> str:
    """One spool line (without its newline)."""
    if isinstance(msg, Heartbeat):
        body: Any = {"heartbeat": {"case_id": msg.case_id, "phase": msg.phase, "t": msg.t}}
    elif isinstance(msg, Skipped):
        body = {"skipped": msg.case_id}
    elif isinstance(msg, Fatal):
        body = {"fatal": msg.message}
    elif isinstance(msg, Record):
        body = msg.record
    else:
        raise TypeError(f"not a worker message: {type(msg).__name__}")
    return json.dumps(body, default=str)


def decode(line: str) -> Message:
    """Inverse of :func:`encode`; :class:`ProtocolError` for anything else."""
    try:
        body = json.loads(line)
    except json.JSONDecodeError as e:
        raise ProtocolError(f"not JSON: {line[:80]!r} ({e.msg})") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"not a message: {line[:80]!r}")
    if "heartbeat" in body:
        hb = body["heartbeat"]
        return Heartbeat(hb.get("case_id"), str(hb.get("phase", "")), float(hb.get("t", 0.0)))
    if "skipped" in body:
        return Skipped(str(body["skipped"]))
    if "fatal" in body:
        return Fatal(str(body["fatal"]))
    if isinstance(body.get("extra_info"), dict) and "case_id" in body["extra_info"]:
        return Record(body)
    raise ProtocolError(f"not a message: {line[:80]!r}")


class SpoolWriter:
    """The worker's end: append messages; records and fatal reasons fsynced (they must survive a kill)."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    def send(self, msg: Message) -> None:
        """Append one message (no-op without a spool: a worker run by hand)."""
        if self.path is None:
            return
        with open(self.path, "a") as f:
            f.write(encode(msg) + "\n")
            f.flush()
            if not isinstance(msg, Heartbeat):
                os.fsync(f.fileno())


def read_new(path: Path, offset: int) -> tuple[list[Message], int]:
    """The complete lines written after ``offset`` and the offset after them (a partial last line waits)."""
    if not path.exists():
        return [], offset
    with open(path) as f:
        f.seek(offset)
        data = f.read()
    *complete, rest = data.split("\n")
    return [decode(line) for line in complete if line.strip()], offset + len(data) - len(rest)
