"""Cases, device configurations and the matrix.

A case is one measurement: a workload in one mode on one device configuration in one
precision, with or without XLA, at one per-replica batch. Its id is derived from its fields and
is used everywhere: pytest id, results key, CSV row, report label.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from bench.errors import UserError
from bench.precision import PRECISIONS, PrecisionSpec
from bench.precision import spec as _precision_spec

MODES = ("train", "infer", "serve")  # serve: requests at a rate, batched, judged at a latency SLO
DEVICE_KINDS = ("cpu", "gpu")
XLA_CHOICES = {"off": (False,), "on": (True,), "both": (False, True)}
# Keras 3 backends (TensorFlow first: the default, ids unchanged), then native PyTorch beside Keras on torch
BACKENDS = ("tensorflow", "jax", "torch", "torch-native")
TORCH_BACKENDS = ("torch", "torch-native")  # their compile switch is torch.compile: "compile" in ids, never "xla"
PARALLELISMS = ("data", "model")  # model: kernels sharded over the devices (Keras ModelParallel, JAX only)


@dataclass(frozen=True, order=True)
class DeviceConfig:
    """Where a case runs: ``count`` devices of ``kind`` (logical splits of one if ``virtual``) on each of ``nodes``."""

    kind: str
    count: int = 1
    virtual: bool = False
    nodes: int = 1

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise UserError(f"device kind must be one of {', '.join(DEVICE_KINDS)}; got {self.kind!r}")
        if self.count < 1:
            raise UserError(f"device count must be >= 1; got {self.count}")
        if self.kind == "cpu" and self.count > 1 and not self.virtual:
            raise UserError("several CPU devices exist only as virtual devices (--virtual-devices N)")
        if self.nodes < 1 or (self.nodes > 1 and self.virtual):
            raise UserError(f"nodes must be >= 1 and a multi-node run has no virtual devices; got {self.nodes}")

    @property
    def label(self) -> str:
        """``cpu``, ``cpu2-virtual``, ``gpu1``, ``gpu4``, ``gpu2-virtual``, ``gpu8x2nodes``, ``cpux2nodes``."""
        base = "cpu" if self.kind == "cpu" and self.count == 1 else f"{self.kind}{self.count}"
        if self.nodes > 1:
            base += f"x{self.nodes}nodes"
        return f"{base}-virtual" if self.virtual else base

    @property
    def replicas(self) -> int:
        """Replicas in sync: devices per node x nodes."""
        return self.count * self.nodes

    @property
    def spec(self) -> str:
        """The CLI spelling: ``cpu`` or ``gpu:K`` (with ``v`` appended when virtual)."""
        s = "cpu" if self.kind == "cpu" and self.count == 1 else f"{self.kind}:{self.count}"
        return f"{s}v" if self.virtual else s


def parse_device_spec(text: str) -> DeviceConfig:
    """``cpu`` -> one CPU; ``gpu`` or ``gpu:K`` -> K GPUs under MirroredStrategy."""
    t = text.strip().lower()
    if t == "cpu":
        return DeviceConfig("cpu")
    if t == "gpu":
        return DeviceConfig("gpu", 1)
    if t.startswith("gpu:"):
        try:
            k = int(t[4:])
        except ValueError:
            k = 0
        if k >= 1:
            return DeviceConfig("gpu", k)
    raise UserError(f"device must be 'cpu' or 'gpu:K' with K >= 1; got {text!r}")


KNOB_RE = re.compile(r"[a-z]+")  # a size knob's name in an id: letters only, so its value's digits end it
MAX_KNOB = 1 << 20  # the largest batch or size value a case takes (a sweep's hostile value is one line, exit 2)


def parse_id(case_id: str) -> dict[str, str]:
    """A case id's named parts (``Case.id_parts``, the names of ``ID_TABLE``), "" where absent.

    Raises:
        ValueError: not a case id.
    """
    m = _id_re().match(case_id)
    if not m:
        raise ValueError(f"not a case id: {case_id!r}")
    return {k: m[k] or "" for k in ID_PARTS}


@dataclass(frozen=True)
class Case:
    """One measurement. ``per_replica_batch`` is fixed; the global batch grows with replicas."""

    workload: str
    mode: str
    device_kind: str
    device_count: int
    virtual: bool
    precision: str
    xla: bool
    per_replica_batch: int
    nodes: int = 1
    backend: str = "tensorflow"
    parallelism: str = "data"
    slo_ms: float | None = None  # serve: the p99 latency bound, one for every device of a run
    tenants: int = 1  # copies of the case run at once on its one device (bench.tenants)
    neighbour: str = ""  # the mix: this case beside a noisy neighbour, "<mode>-b<batch>" of the same case
    knobs: tuple[tuple[str, int], ...] = ()  # size knobs away from the profile's size (a sweep's point), in order

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise UserError(f"backend must be one of {', '.join(BACKENDS)}; got {self.backend!r}")
        if self.parallelism not in PARALLELISMS:
            raise UserError(f"parallelism must be one of {', '.join(PARALLELISMS)}; got {self.parallelism!r}")
        if self.mode not in MODES:
            raise UserError(f"mode must be one of {', '.join(MODES)}; got {self.mode!r}")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision must be one of {', '.join(PRECISIONS)}; got {self.precision!r}")
        if self.per_replica_batch < 1:
            raise UserError(f"batch size must be a positive integer; got {self.per_replica_batch}")
        if (self.mode == "serve") != (self.slo_ms is not None) or (self.slo_ms is not None and not self.slo_ms > 0):
            raise UserError(f"a serve case, and only one, has a positive latency SLO; got {self.mode} {self.slo_ms}")
        if self.tenants < 1:
            raise UserError(f"tenants must be >= 1; got {self.tenants}")
        if self.neighbour and (self.tenants != 2 or not re.fullmatch(r"(train|infer)-b[1-9][0-9]*", self.neighbour)):
            raise UserError(
                f"a mix case has 2 tenants and a neighbour like train-b64; got {self.tenants}, {self.neighbour!r}"
            )
        object.__setattr__(self, "knobs", tuple((str(k), int(v)) for k, v in self.knobs))  # from JSON: lists
        for k, v in self.knobs:
            if not KNOB_RE.fullmatch(k) or not 1 <= v <= MAX_KNOB:
                raise UserError(f"a size knob is a lower-case name and a value from 1 to {MAX_KNOB}; got {k}={v}")
        if self.per_replica_batch > MAX_KNOB:
            raise UserError(f"batch size must be at most {MAX_KNOB}; got {self.per_replica_batch}")
        self.device  # noqa: B018  (validates)

    @property
    def step_mode(self) -> str:
        """What one step computes: ``train``, or ``infer`` (a serve case's batches are inference)."""
        return "train" if self.mode == "train" else "infer"

    @property
    def device(self) -> DeviceConfig:
        """The device configuration of this case."""
        return DeviceConfig(self.device_kind, self.device_count, self.virtual, self.nodes)

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: every device (data parallel), or one model spread over the devices."""
        return self.nodes if self.parallelism == "model" else self.device.replicas

    @property
    def precision_spec(self) -> PrecisionSpec:
        """What the precision means (policy, TF32, probe dtype, loss scaling), derived in one place."""
        return _precision_spec(self.precision)

    @property
    def physical_devices(self) -> int:
        """Chips the case runs on, over all nodes: a virtual split is one chip."""
        return 1 if self.virtual else self.device_count * self.nodes

    @property
    def global_batch(self) -> int:
        """Samples per step over all replicas on all nodes (weak scaling; one replica under model parallelism)."""
        return self.per_replica_batch * self.replicas

    def id_parts(self) -> dict[str, str]:
        """The id as a table of named parts (``ID_TABLE``, in order; "" where a part is absent)."""
        return {p.name: p.text(self) for p in ID_TABLE}

    def id_without(self, *names: str) -> str:
        """The id with some named parts left out, e.g. ``"batch"``: what a largest-batch search is about."""
        return "-".join(v for k, v in self.id_parts().items() if v and k not in names)

    @property
    def id(self) -> str:
        """E.g. ``cnn-train-gpu2-mixed_bfloat16-xla-b64``, ``mlp-infer-cpu2-virtual-fp32-b64``, ``mlp-train-gpu1-jax-tf32-b1024``.

        The non-empty parts of ``id_parts`` joined by ``-``; ``parse_id`` reads them back.
        """
        return "-".join(v for v in self.id_parts().values() if v)

    def to_dict(self) -> dict:
        """The case's fields, as stored in results (``slo_ms`` only on serve cases, ``tenants`` only above 1)."""
        d = asdict(self)
        if d["slo_ms"] is None:
            del d["slo_ms"]
        if d["tenants"] == 1:
            del d["tenants"]
        if not d["neighbour"]:
            del d["neighbour"]
        if d["knobs"]:
            d["knobs"] = [list(kv) for kv in self.knobs]
        else:
            del d["knobs"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Case:
        """Inverse of :meth:`to_dict`; extra keys are ignored (older results: 1 node, TensorFlow, data parallel)."""
        optional = ("nodes", "backend", "parallelism", "slo_ms", "tenants", "neighbour", "knobs")
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d or f.name not in optional})

    @classmethod
    def of(cls, row: Any) -> Case:  # a Mapping, or a pandas Series (both have .get)
        """The case of a stored record: its ``extra_info``, a CSV/table row or a night's case line.

        Values may come as numpy or pandas scalars, and optional fields as missing or empty
        (results written before they existed): 1 node, TensorFlow, data parallel.
        """

        def get(name: str, default: Any = None) -> Any:
            v = row.get(name, default)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                return default
            return v

        return cls(
            workload=str(get("workload")),
            mode=str(get("mode")),
            device_kind=str(get("device_kind")),
            device_count=int(get("device_count", 1)),
            virtual=bool(get("virtual", False)),
            precision=str(get("precision")),
            xla=bool(get("xla", False)),
            per_replica_batch=int(get("per_replica_batch")),
            nodes=int(get("nodes", 1)),
            backend=str(get("backend", "tensorflow")),
            parallelism=str(get("parallelism", "data")),
            slo_ms=None if get("slo_ms") is None else float(get("slo_ms")),
            tenants=int(get("tenants", 1)),
            neighbour=str(get("neighbour", "") or ""),
            knobs=knobs_of(get("knobs")),
        )

    def related(self, **changes: Any) -> Case:
        """The same case with some fields changed; related ids are only ever built from fields."""
        return replace(self, **changes)

    def baseline(self) -> Case:
        """CPU fp32 of the same backend, workload, mode and per-replica batch (TensorFlow, torch: not compiled)."""
        return self.related(
            device_kind="cpu",
            device_count=1,
            virtual=False,
            nodes=1,
            precision="fp32",
            xla=self.backend == "jax",  # JAX always compiles; TensorFlow and torch: the eager or graph step
            parallelism="data",
            tenants=1,
            neighbour="",
        )

    def single_device(self) -> Case:
        """The same case on one device of one node (``gpu8x2nodes`` -> ``gpu1``, ``cpu2-virtual`` -> ``cpu``)."""
        return self.related(device_count=1, virtual=False, nodes=1, parallelism="data", tenants=1, neighbour="")

    def neighbour_case(self) -> Case:
        """A mix case's noisy neighbour: the same case in the neighbour's mode and batch, alone."""
        mode, _, batch = self.neighbour.partition("-b")
        return self.related(mode=mode, per_replica_batch=int(batch), tenants=1, neighbour="")

    def mix(self) -> Case:
        """The mix beside this (training) case: its batch-1 inference (the latency tenant) beside it."""
        return self.related(
            mode="infer", per_replica_batch=1, tenants=2, neighbour=f"{self.mode}-b{self.per_replica_batch}"
        )


def knobs_text(knobs: Iterable[Sequence[Any]]) -> str:
    """Size knobs as a CSV row holds them: ``width=2048;depth=4`` (``knobs_of`` reads it back)."""
    return ";".join(f"{k}={v}" for k, v in knobs)


def knobs_of(value: Any) -> tuple[tuple[str, int], ...]:
    """Size knobs as stored: pairs in a record, ``width=2048;depth=4`` in a CSV row (``knobs_text``), or nothing."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return ()
    if isinstance(value, str):
        pairs = [kv.partition("=") for kv in value.split(";") if kv]
        return tuple((k, int(v)) for k, _, v in pairs)
    return tuple((str(k), int(v)) for k, v in value)


@dataclass(frozen=True)
class IdPart:
    """One named part of a case id: its pattern (without the joining ``-``), whether it may be absent, its text."""

    name: str
    pattern: str
    optional: bool
    text: Callable[[Case], str]


def _compiled_text(c: Case) -> str:
    if not c.xla or c.backend == "jax":
        return ""
    return "compile" if c.backend in TORCH_BACKENDS else "xla"


def _tenants_text(c: Case) -> str:
    return f"beside-{c.neighbour}" if c.neighbour else f"t{c.tenants}" if c.tenants > 1 else ""


# The case id, part by part: the non-empty texts joined by "-", read back by one pattern built from
# the same rows. TensorFlow ids are unchanged from before the backend axis (results stay
# comparable); other backends add theirs after the device, and ``mp`` under model parallelism.
# JAX always compiles with XLA, so its ids carry no ``xla``; torch's switch is ``torch.compile``, so
# its ids say ``compile``. A sweep's size knobs follow the
# workload (none at the profile's size); the optional suffixes: the serve SLO, and N tenants or
# the mix's neighbour.
ID_TABLE: tuple[IdPart, ...] = (
    IdPart("workload", r"[a-z0-9_]+", False, lambda c: c.workload),
    IdPart("size", r"[a-z]+\d+(?:-[a-z]+\d+)*", True, lambda c: "-".join(f"{k}{v}" for k, v in c.knobs)),
    IdPart("mode", r"[a-z]+", False, lambda c: c.mode),
    IdPart("device", r"(?:cpu|gpu)\d*(?:x\d+nodes)?(?:-virtual)?", False, lambda c: c.device.label),
    IdPart(
        "backend",
        "|".join(sorted((b for b in BACKENDS if b != "tensorflow"), key=len, reverse=True)),
        True,
        lambda c: "" if c.backend == "tensorflow" else c.backend,
    ),
    IdPart("parallelism", "mp", True, lambda c: "mp" if c.parallelism == "model" else ""),
    IdPart("precision", "|".join(PRECISIONS), False, lambda c: c.precision),
    IdPart("xla", "xla|compile", True, _compiled_text),
    IdPart("batch", r"b\d+", False, lambda c: f"b{c.per_replica_batch}"),
    IdPart("slo", r"slo[0-9.e+]+ms", True, lambda c: f"slo{c.slo_ms:g}ms" if c.slo_ms is not None else ""),
    IdPart("tenants", r"t\d+|beside-.+", True, _tenants_text),
)
ID_PARTS = tuple(p.name for p in ID_TABLE)


@functools.cache
def _id_re() -> re.Pattern[str]:
    body = ""
    for i, p in enumerate(ID_TABLE):
        sep = "-" if i else ""
        group = f"(?P<{p.name}>{p.pattern})"
        body += f"(?:{sep}{group})?" if p.optional else f"{sep}{group}"
    return re.compile(f"^{body}$")


def expand(
    workloads: Sequence[str],
    modes: Sequence[str],
    devices: Sequence[DeviceConfig],
    precisions: Sequence[str],
    xla: Iterable[bool],
    batch_of: dict[str, int],
    latency_batch1: bool = False,
    backends: Sequence[str] = ("tensorflow",),
    parallelisms: Sequence[str] = ("data",),
    slo_of: dict[str, float] | None = None,
) -> list[Case]:
    """The matrix: workloads x modes x devices x backends x parallelism x precisions x xla, in that order.

    ``batch_of`` maps workload -> per-replica batch. With ``latency_batch1`` each workload,
    device and precision also gets a batch-1 inference case (real-time latency). XLA is a
    TensorFlow axis and ``torch.compile`` torch's (``xla`` True: compiled): JAX cases always
    compile (``xla`` True), once. Model parallelism exists
    only over several devices (on one device it is the data-parallel case). Serve cases get
    their workload's SLO from ``slo_of`` (the batcher's max batch is the per-replica batch).
    """
    xla = tuple(xla)
    out: list[Case] = []
    for w in workloads:
        for mode in modes:
            batches = [batch_of[w]]
            if mode == "infer" and latency_batch1 and batch_of[w] != 1:
                batches.append(1)
            for dev in devices:
                for be in backends:
                    for par in parallelisms:
                        if par == "model" and dev.count < 2:
                            continue
                        for p in precisions:
                            for x in xla if be != "jax" else (True,):
                                for b in batches:
                                    slo = (slo_of or {})[w] if mode == "serve" else None
                                    out.append(
                                        Case(
                                            w, mode, dev.kind, dev.count, dev.virtual, p, x, b, dev.nodes, be, par, slo
                                        )
                                    )
    seen: set[str] = set()
    unique = []
    for c in out:
        if c.id not in seen:
            seen.add(c.id)
            unique.append(c)
    return unique
