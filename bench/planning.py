"""Run options (parsed once, frozen) and the plan: every case with its support verdict."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import capability, compile_cache, serve, sweep, tenants
from bench.backends import names as backend_names
from bench.capability import Support
from bench.cases import (
    BACKENDS,
    MODES,
    PARALLELISMS,
    PRECISIONS,
    TORCH_BACKENDS,
    XLA_CHOICES,
    Case,
    DeviceConfig,
    expand,
    parse_device_spec,
)
from bench.devices import Machine
from bench.errors import UserError
from bench.profiles import PROFILES, Timing
from workloads import WORKLOADS


def _choices(kind: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> tuple[str, ...]:
    for v in values:
        if v not in allowed:
            raise UserError(f"unknown {kind} {v!r}; expected one of: {', '.join(allowed)}")
    if not values:
        raise UserError(f"no {kind} given; expected one or more of: {', '.join(allowed)}")
    return values


MAX_REPEATS = 10  # workers per case at most (--repeats)


def default_repeats() -> int:
    """``--repeats`` when not given: ``$ACCELBENCH_REPEATS``, else 1 (a rotating share in second workers)."""
    text = os.environ.get("ACCELBENCH_REPEATS", "1")
    try:
        return int(text)
    except ValueError:
        raise UserError(f"ACCELBENCH_REPEATS must be a whole number; got {text!r}") from None


@dataclass(frozen=True)
class RunOptions:
    """What ``accelbench run`` was asked for; every cross-field check is here."""

    profile: str = "standard"
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    modes: tuple[str, ...] = ("auto",)  # auto: train, infer, and serve outside the smoke profile
    devices: tuple[str, ...] = ("auto",)
    precisions: tuple[str, ...] = ("auto",)
    xla: str = "off"
    batch_size: int | str | None = None  # "max": the largest batch that fits (resolved into max_batches)
    virtual_devices: int = 0
    keyword: str = ""
    sampler_interval_s: float = 0.1
    sampler: bool = True
    stall_timeout_s: float | None = None
    shard: str = ""  # "i/n": this runner's share of the plan (accelbench merge joins the shards)
    nodes: int = 1  # a cluster run (--cluster): workers in the cluster, one per node
    backend: str = "tensorflow"  # tensorflow | jax | all (each backend installed)
    parallelism: str = "data"  # data | model | both (model: JAX only, over several devices)
    slo_ms: float | None = None  # serve: one p99 bound for every workload and device (default: each workload's)
    tenants: tuple[int, ...] = ()  # beside each case, the same case as N tenants sharing its device
    tenant_mix: bool = False  # beside each training case, its batch-1 inference next to it (a latency tenant)
    repeats: int = 1  # workers per case: 1 = a rotating share of cases gets a second one (bench.spread), 0 = none
    compile_cache: str = "auto"  # JAX's persistent compile cache: auto (the user's cache folder), off, or a folder
    sweeps: tuple[str, ...] = ()  # --sweep NAME=VALUES (bench.sweep): batch or a size knob
    grid: str = "additive"  # additive: each swept axis alone through the profile's point; full: every combination
    every_point: bool = False  # a batch sweep measures every point (by default a pair's higher ones stop once answered)
    probe: bool = False  # a largest-batch probe (bench.maxbatch): the first look only, one warm-up step, no latencies
    # each case asked at its largest batch: (its id without the batch, the safe batch, the largest batch that
    # fit, the first that did not (each None where not found), what the search found, in words)
    max_batches: tuple[tuple[str, int | None, int | None, int | None, str], ...] = ()
    memory_limit_gib: float | None = None  # a CPU's memory for the largest-batch search (default: half that is free)
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise UserError(f"unknown profile {self.profile!r}; expected one of: {', '.join(PROFILES)}")
        _choices("workload", self.workloads, tuple(WORKLOADS))
        if self.modes != ("auto",):
            _choices("mode", self.modes, MODES)
        if self.slo_ms is not None and not 0 < self.slo_ms < 1e6:
            raise UserError(f"--slo-ms must be a positive number of milliseconds; got {self.slo_ms}")
        if self.precisions != ("auto",):
            _choices("precision", self.precisions, PRECISIONS)
        if self.devices != ("auto",):
            for d in self.devices:
                parse_device_spec(d)
        if self.xla not in XLA_CHOICES:
            raise UserError(f"--xla must be one of off, on, both; got {self.xla!r}")
        if (
            self.batch_size is not None
            and self.batch_size != "max"
            and not (isinstance(self.batch_size, int) and self.batch_size >= 1)
        ):
            raise UserError(f"--batch-size must be a positive integer or max; got {self.batch_size}")
        if self.virtual_devices < 0 or self.virtual_devices == 1:
            raise UserError(f"--virtual-devices must be 0 (off) or >= 2; got {self.virtual_devices}")
        if self.stall_timeout_s is not None and self.stall_timeout_s <= 0:
            raise UserError(f"--stall-timeout must be a positive number of seconds; got {self.stall_timeout_s}")
        if self.shard:
            parse_shard(self.shard)
        backend_names(self.backend)  # a name it does not know: one line
        if self.parallelism not in (*PARALLELISMS, "both"):
            raise UserError(f"--parallelism must be one of {', '.join(PARALLELISMS)}, both; got {self.parallelism!r}")
        if self.nodes > 1 and self.backend != "tensorflow":
            raise UserError("--cluster runs TensorFlow's MultiWorkerMirroredStrategy: use --backend tensorflow")
        if self.nodes > 1:
            if self.virtual_devices:
                raise UserError(
                    "--cluster runs have no virtual devices: each node is one MultiWorkerMirroredStrategy worker"
                )
            if self.devices != ("auto",) and len(self.devices) != 1:
                raise UserError(f"--cluster takes one --devices (cpu or gpu:K per node); got {','.join(self.devices)}")
            if self.shard:
                raise UserError("--cluster and --shard do not mix: every node runs every case together")
        if any(not 2 <= n <= tenants.MAX_TENANTS for n in self.tenants):
            raise UserError(f"--tenants takes counts from 2 to {tenants.MAX_TENANTS}; got {self.tenants}")
        if (self.tenants or self.tenant_mix) and self.nodes > 1:
            raise UserError("--tenants and --cluster do not mix: tenants share one device of one machine")
        if self.sampler_interval_s < 0.1:
            raise UserError(f"--sampler-interval must be >= 0.1 s (<= 10 Hz); got {self.sampler_interval_s}")
        if not 0 <= self.repeats <= MAX_REPEATS:
            raise UserError(f"--repeats must be from 0 to {MAX_REPEATS}; got {self.repeats}")
        compile_cache.root_of(self.compile_cache)  # a path that is a file: one line, before anything runs
        if self.grid not in sweep.GRIDS:
            raise UserError(f"--grid must be one of {', '.join(sweep.GRIDS)}; got {self.grid!r}")
        axes = self.axes
        if self.wants_max and self.nodes > 1:
            raise UserError("batch max and --cluster do not mix: search with accelbench maxbatch, then give the batch")
        if self.memory_limit_gib is not None and not 0 < self.memory_limit_gib < 2**20:
            raise UserError(f"--memory-limit must be a positive number of GiB; got {self.memory_limit_gib}")
        for w in self.workloads:  # every point buildable (a width its heads divide), before anything starts
            sweep.points(axes, self.grid, WORKLOADS[w], self.profile, self.anchor_batch(w))

    def anchor_batch(self, workload: str) -> int:
        """The batch of the profile's point: ``--batch-size`` (``sweep.MAX_BATCH`` for max), else the profile's."""
        if self.batch_size == "max":
            return sweep.MAX_BATCH
        return int(self.batch_size or WORKLOADS[workload].batch[self.profile])

    @property
    def wants_max(self) -> bool:
        """Whether some case is asked at the largest batch that fits."""
        return self.batch_size == "max" or any(sweep.MAX_BATCH in a.values for a in self.axes if a.name == "batch")

    @property
    def axes(self) -> tuple[sweep.Axis, ...]:
        """The swept axes (``--sweep``), checked against the chosen workloads."""
        return sweep.parse_all(self.sweeps, {w: WORKLOADS[w] for w in self.workloads})

    @property
    def parallelisms(self) -> tuple[str, ...]:
        """``--parallelism`` as the planner's axis."""
        return PARALLELISMS if self.parallelism == "both" else (self.parallelism,)

    @property
    def mode_list(self) -> tuple[str, ...]:
        """``--modes``, or the profile's: serve is on by default except in the smoke profile."""
        if self.modes != ("auto",):
            return self.modes
        return ("train", "infer") if self.profile == "smoke" else MODES

    def slo_of(self, workload: str) -> float:
        """The serve SLO of a workload: ``--slo-ms``, else its documented default."""
        return self.slo_ms if self.slo_ms is not None else serve.DEFAULT_SLO_MS[workload]

    @property
    def timing(self) -> Timing:
        """The profile's timing (a largest-batch probe's: enough to step at that batch a few rounds)."""
        t = PROFILES[self.profile]
        if not self.probe:
            return t
        return t.first_look_only(warmup_steps=1)

    @property
    def stall_s(self) -> float:
        """The watchdog's bound: ``--stall-timeout``, else the profile's."""
        return self.stall_timeout_s or self.timing.stall_timeout_s

    def to_dict(self) -> dict:
        """Stored in the results' run block (and read back by --resume)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunOptions:
        """Inverse of :meth:`to_dict`."""
        tuples = ("workloads", "modes", "devices", "precisions", "tenants", "sweeps")
        kw: dict[str, Any] = {k: tuple(v) if k in tuples else v for k, v in d.items() if k in cls.__dataclass_fields__}
        kw["max_batches"] = tuple(tuple(e) for e in kw.get("max_batches") or ())
        return cls(**kw)


def _counts(n: int) -> list[int]:
    """2, 4, 8, ... below n, then n."""
    out, k = [], 2
    while k < n:
        out.append(k)
        k *= 2
    return out + ([n] if n >= 2 else [])


def backends(opts: RunOptions, machine: Machine) -> tuple[str, ...]:
    """The run's backends: ``--backend``, or with ``all`` each one the machine was probed for (installed)."""
    if opts.backend != "all":
        return backend_names(opts.backend)
    probed = {"tensorflow": bool(machine.tf), "jax": bool(machine.jax)}
    probed.update({b: bool(machine.torch) for b in TORCH_BACKENDS})
    return tuple(b for b in BACKENDS if probed[b]) or ("tensorflow",)


def device_configs(opts: RunOptions, machine: Machine) -> list[DeviceConfig]:
    """``auto``: cpu, gpu:1 (unsupported where there is none), gpu:2, 4, ... up to all GPUs.

    ``--virtual-devices N`` adds 2..N logical devices split from the first GPU, or from the
    CPU where there is no GPU. GPUs are counted by the run's backends (the most any of them sees).
    """
    n_gpu = max(machine.gpu_count(b) for b in backends(opts, machine))
    if opts.nodes > 1:  # every local GPU (else the CPU) on each node, all nodes in one strategy
        spec = opts.devices[0] if opts.devices != ("auto",) else (f"gpu:{n_gpu}" if n_gpu else "cpu")
        d = parse_device_spec(spec)
        if d.kind == "gpu" and d.count > n_gpu:
            raise UserError(
                f"device {spec!r} asks for {d.count} GPUs per node; this node has {n_gpu} visible to TensorFlow"
            )
        return [DeviceConfig(d.kind, d.count, nodes=opts.nodes)]
    if opts.devices == ("auto",):
        configs = [DeviceConfig("cpu"), DeviceConfig("gpu", 1)] + [DeviceConfig("gpu", k) for k in _counts(n_gpu)]
    else:
        configs = []
        for spec in opts.devices:
            d = parse_device_spec(spec)
            # gpu:1 without a GPU stays in the plan as unsupported, with the reason
            if d.kind == "gpu" and d.count > 1 and d.count > n_gpu:
                raise UserError(
                    f"device {spec!r} asks for {d.count} GPUs; this machine has {n_gpu} visible to TensorFlow"
                )
            configs.append(d)
    if opts.virtual_devices:
        kind = "gpu" if n_gpu else "cpu"
        configs += [DeviceConfig(kind, k, virtual=True) for k in _counts(opts.virtual_devices)]
    seen: list[DeviceConfig] = []
    for c in configs:
        if c not in seen:
            seen.append(c)
    return seen


def support(case: Case, machine: Machine) -> Support:
    """Device, backend, XLA and precision support of one case, in that order."""
    be = case.backend
    dev = capability.device_count(
        case.device_kind,
        case.device_count,
        machine.gpu_count(be),
        case.virtual,
        machine.no_gpu_reason(be),
        who={"jax": "JAX", "tensorflow": "TensorFlow"}.get(be, "torch"),
    )
    if not dev.supported:
        return dev
    b = capability.backend_support(be, case.parallelism, case.device_kind, case.virtual)
    if not b.supported:
        return b
    if case.tenants > 1:  # the case itself first: a tenant of an unsupported case is unsupported for its reason
        alone = support(case.related(tenants=1, neighbour=""), machine)
        if alone.supported and case.neighbour:
            alone = support(case.neighbour_case(), machine)
        return alone if not alone.supported else tenants.support(case, machine)
    if case.mode == "serve" and (case.device_count > 1 or case.virtual or case.nodes > 1):
        return capability.SERVE_ONE_DEVICE
    if be == "jax" or be in TORCH_BACKENDS:  # JAX always compiles, torch.compile runs anywhere; no virtual GPUs
        return _precision(case, machine)
    x = capability.xla_support(case.device_kind, case.device_count, case.virtual, case.mode)
    if case.xla and not x.supported:
        return x
    xc = capability.cluster_xla_support(case.device_kind, case.nodes)
    if case.xla and not xc.supported:
        return xc
    if case.device_kind == "gpu" and case.virtual:
        v = capability.virtual_gpu_split(machine.gpu_plan("gpu", case.device_count, True)["memory_total_bytes"])
        if not v.supported:
            return v
    return _precision(case, machine)


def _precision(case: Case, machine: Machine) -> Support:
    if case.device_kind == "cpu":
        return capability.cpu_precision(case.precision, machine.cpu.flags, case.backend)
    n = 1 if case.virtual else case.device_count
    return capability.gpu_precision(
        case.precision, machine.gpu_compute_capability(n, case.backend), machine.gpu_name(case.backend)
    )


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); UserError unless 1 <= i <= n."""
    try:
        i, n = (int(t) for t in text.split("/"))
    except ValueError:
        raise UserError(f"--shard takes i/n (e.g. 1/4); got {text!r}") from None
    if not 1 <= i <= n:
        raise UserError(f"--shard i/n needs 1 <= i <= n; got {text!r}")
    return i, n


def keyword_match(expr: str, case_id: str) -> bool:
    """Pytest's ``-k`` semantics over the case id (case-insensitive substrings, and/or/not)."""
    if not expr:
        return True
    from _pytest.mark.expression import Expression

    try:
        compiled = Expression.compile(expr)
    except Exception as e:
        raise UserError(f"-k: cannot parse {expr!r}: {e}") from None
    cid = case_id.lower()
    return bool(compiled.evaluate(lambda name, /, **_: name.lower() in cid))


def _cases(opts: RunOptions, machine: Machine) -> list[tuple[Case, bool]]:
    """Every case of the matrix, each with whether it was asked at the largest batch that fits.

    Such a case stands at the profile's batch until :func:`plan` puts it at its found one.
    """
    precisions = PRECISIONS if opts.precisions == ("auto",) else opts.precisions
    devices, axes, engines = device_configs(opts, machine), opts.axes, backends(opts, machine)
    cases: list[tuple[Case, bool]] = []
    for w in opts.workloads:
        for batch, knobs in sweep.points(axes, opts.grid, WORKLOADS[w], opts.profile, opts.anchor_batch(w)):
            at_max = batch == sweep.MAX_BATCH
            point = expand(
                (w,),
                opts.mode_list,
                devices,
                precisions,
                XLA_CHOICES[opts.xla],
                {w: WORKLOADS[w].batch[opts.profile] if at_max else batch},
                latency_batch1=opts.timing.latency_batch1 and opts.batch_size is None and not axes,
                backends=engines,
                parallelisms=opts.parallelisms,
                slo_of={w: opts.slo_of(w)},
            )
            # a serve case's batch is its batcher's: at max it stays the profile's serve case
            cases += [(c.related(knobs=knobs), at_max and c.mode != "serve") for c in point]
    return cases


def max_cases(opts: RunOptions, machine: Machine) -> list[Case]:
    """The supported cases asked at their largest batch (each at the profile's batch): what to search."""
    seen: dict[str, Case] = {}
    for c, at_max in _cases(opts, machine):
        if at_max and keyword_match(opts.keyword, c.id) and support(c, machine).supported:
            seen.setdefault(c.id_without("batch"), c)
    return list(seen.values())


def plan(opts: RunOptions, machine: Machine) -> list[tuple[Case, Support]]:
    """Every case of the matrix with its support verdict (nothing is dropped silently)."""
    found = {k: (b, why) for k, b, _, _, why in opts.max_batches}
    cases: list[Case] = []
    refused: dict[str, str] = {}  # asked at max where nothing fits (or the search failed): why
    for c, at_max in _cases(opts, machine):
        if at_max:
            b, why = found.get(c.id_without("batch"), (None, ""))
            if b:
                c = c.related(per_replica_batch=b)
            elif support(c, machine).supported:
                # recorded at the profile's batch, unless that is a case of the plan anyway (the reason
                # was printed when the search ran, and that case is not the one refused)
                refused[c.id] = why or "no largest batch was searched for this case (accelbench run resolves max)"
                continue
        cases.append(c)
    ordinary = {c.id for c in cases}
    refused = {i: why for i, why in refused.items() if i not in ordinary}
    cases += [c for c, at_max in _cases(opts, machine) if at_max and c.id in refused]
    cases = list({c.id: c for c in cases}.values())  # a point two axes share is one case
    cases = [c.related(tenants=n) for c in cases for n in (1, *opts.tenants)]
    if opts.tenant_mix and "train" not in opts.mode_list:
        raise UserError("--tenants mix sets each training case's batch-1 inference beside it: add train to --modes")
    if opts.tenant_mix:  # after each training case: its batch-1 inference beside it
        cases = [m for c in cases for m in ((c, c.mix()) if c.mode == "train" and c.tenants == 1 else (c,))]
    if not cases:
        raise UserError("--parallelism model needs several devices (gpu:K with K >= 2, or --virtual-devices N)")

    def verdict(c: Case) -> Support:
        # its tenants share the verdict, and a mix beside a training case refused at max shares that one's
        why = refused.get(c.related(tenants=1, neighbour="").id) or (c.neighbour and refused.get(c.neighbour_case().id))
        return Support(False, f"batch max: {why}") if why else support(c, machine)

    out = [(c, verdict(c)) for c in cases if keyword_match(opts.keyword, c.id)]
    if not out:
        raise UserError(f"-k {opts.keyword!r} selects none of the {len(cases)} cases")
    if opts.shard:
        # round-robin over the plan: identical testbeds plan identically, so the shards are disjoint
        # and together cover the plan; neighbouring cases (similar cost) land on different runners
        i, n = parse_shard(opts.shard)
        out = [cs for k, cs in enumerate(out) if k % n == i - 1]
        if not out:
            raise UserError(f"--shard {opts.shard}: this shard has no cases (the plan has fewer than {i})")
    return out
