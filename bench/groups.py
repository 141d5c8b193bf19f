"""Which cases share a worker, and in what order a worker runs them.

A group is a device configuration, and on GPUs its TF32 setting, and XLA on or off: cuDNN's
autotune cache has no TF32 key and XLA with MirroredStrategy leaks threads, so neither may
cross from one kind of case to another. Pure: no I/O.
"""

from __future__ import annotations

from bench.cases import TORCH_BACKENDS, Case, DeviceConfig

# (device config, TF32 on GPUs, XLA, backend, the case for a one-case worker or "")
GroupKey = tuple[DeviceConfig, bool | None, bool, str, str]


def group_key(case: Case) -> GroupKey:
    """The cases one worker may run: one backend, device config, TF32 on/off on GPUs (None on CPUs), TensorFlow's XLA.

    JAX cannot reset its memory peak (jax-ml/jax#8096): a JAX GPU worker runs its cases smallest
    first (:func:`run_order`), and a case whose lifetime peak is not above every earlier one's records
    XLA's estimate of its step, said so (``bench.worker``); sharing saves a worker start (4-9 s on the H200).
    """
    tf32 = case.precision != "fp32" if case.device_kind == "gpu" else None
    xla = case.xla and case.backend not in TORCH_BACKENDS  # torch.compile is per function: one worker for both
    return case.device, tf32, xla, case.backend, ""


def run_order(cases: list[Case], profile: str) -> list[Case]:
    """A JAX GPU group smallest first (FLOPs of a step, a proxy of its memory), so peaks rise case by case."""
    from workloads import WORKLOADS

    if not cases or cases[0].backend != "jax" or cases[0].device_kind != "gpu":
        return cases

    def size(c: Case) -> float:
        w = WORKLOADS[c.workload]
        return float(w.model_flops_per_sample(w.size(profile, c.knobs), c.step_mode) * c.global_batch)

    return sorted(cases, key=size)


def group_label(key: GroupKey) -> str:
    """``gpu2-tf32on-xla``, ``gpu1-tf32off``, ``cpu``, ``cpu2-virtual-jax`` (used in log names)."""
    device, tf32, xla, backend, alone = key
    if alone:
        return alone
    label = device.label + ("" if tf32 is None else "-tf32on" if tf32 else "-tf32off")
    if backend != "tensorflow":
        return f"{label}-{backend}"
    return label + ("-xla" if xla else "")


def climbing_order(groups: dict[GroupKey, list[Case]]) -> dict[GroupKey, list[Case]]:
    """A batch sweep that may stop climbing: the devices' workers before the CPU's, each worker's cases by batch.

    A CPU point is the costly one to leave out, and a worker can leave a point out only once its
    pair's lower points are measured (``bench.sweep.left_unmeasured``).
    """
    ordered = dict(sorted(groups.items(), key=lambda kv: kv[0][0].kind == "cpu"))
    return {k: sorted(cs, key=lambda c: c.per_replica_batch) for k, cs in ordered.items()}
