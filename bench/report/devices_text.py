"""The text of ``accelbench devices``: hardware, TensorFlow's view, precision support, telemetry."""

from __future__ import annotations

from tabulate import tabulate

from bench import capability
from bench.cases import PRECISIONS
from bench.devices import Machine
from bench.telemetry.host import Rapl


def describe(m: Machine) -> str:
    """Human-readable summary; answers "is TensorFlow really using my GPU?"."""
    c = m.cpu
    lines = [
        f"CPU: {c.model}, {c.logical_cores} logical cores ({c.physical_cores} physical, {c.affinity_cores} usable)",
        f"  flags that matter: {', '.join(c.flags) or 'none'}",
        f"TensorFlow {m.tf.get('tensorflow')} / Keras {m.tf.get('keras')}, built with CUDA: {m.tf.get('built_with_cuda')}"
        + (f" (CUDA {m.tf.get('cuda_build')}, cuDNN {m.tf.get('cudnn_build')})" if m.tf.get("cuda_build") else "")
        if m.tf
        else "TensorFlow: not installed (runs and checks use the backends below; pip install accelbench adds it)",
    ]
    if m.jax:
        lines.append(
            f"JAX {m.jax.get('jax')} / jaxlib {m.jax.get('jaxlib')}: {m.gpu_count('jax')} GPU(s)"
            + ("" if m.gpu_count("jax") else f" ({m.no_gpu_reason('jax')})")
        )
    if m.torch:
        lines.append(
            f"torch {m.torch.get('torch')} (CUDA build: {m.torch.get('cuda_build') or 'none'}), Keras {m.torch.get('keras')}: "
            f"{m.gpu_count('torch')} GPU(s)" + ("" if m.gpu_count("torch") else f" ({m.no_gpu_reason('torch')})")
        )
    if m.nvml.reason:
        lines.append(f"NVML: unavailable: {m.nvml.reason}")
    else:
        lines.append(
            f"NVML: {len(m.nvml.gpus)} GPU(s), driver {m.nvml.driver_version}, CUDA driver {m.nvml.cuda_driver_version}"
        )
    lines += [f"  note: {n}" for n in m.nvml.notes]
    for g in m.nvml.gpus:
        cc = ".".join(map(str, g.compute_capability)) if g.compute_capability else "?"
        mem = f"{g.memory_total_bytes / 2**30:.0f} GiB" if g.memory_total_bytes else "? GiB"
        lines.append(f"  {g.pci_bus_id}  {g.name}  {g.uuid}  {mem}  cc {cc}" + ("  MIG on" if g.mig else ""))
        if g.compute_mode not in (None, "default"):
            lines.append(
                f"    compute mode {g.compute_mode}: one process per GPU, so workers start only after the previous "
                "one has released it, and a second process on it (a probe) is refused"
            )
        if limits := gpu_limits(g.to_dict()):
            lines.append(f"    limits: {limits}")
        lines.append("    telemetry: " + ", ".join(f"{k} {v}" for k, v in g.capabilities.items()))
    tf_lines = len(lines)
    lines.append(
        f"TensorFlow GPUs: {m.tf_gpu_count}"
        + (
            f" ({m.tf['ignored_gpus']} more visible to CUDA but ignored by TensorFlow)"
            if m.tf.get("ignored_gpus")
            else ""
        )
    )
    for g in m.tf.get("gpus", []):
        lines.append(f"  GPU:{g['tf_index']}  {g.get('name')}  bus {g.get('pci_bus_id') or '?'}")
    if not m.tf_gpu_count:
        lines.append(f"  why none: {m.no_gpu_reason()}")
    for p in m.tf.get("placement", []):
        verdict = "ok" if p["ok"] else "NOT ON THE REQUESTED DEVICE"
        lines.append(
            f"  tiny matmul on {p['requested']}: ran on {p['ran_on']} -> {verdict}"
            + (f" ({p['error']})" if p.get("error") else "")
        )
    if not m.tf:  # nothing to say about TensorFlow's GPUs: the JAX line above says what JAX sees
        del lines[tf_lines:]
    rapl = Rapl()
    lines.append(f"CPU energy (RAPL): {'available' if rapl.available else 'unavailable: ' + rapl.reason}")
    reasons: list[str] = []

    def cell(s: capability.Support) -> str:
        if s.supported:
            return "yes"
        if s.reason not in reasons:
            reasons.append(s.reason)
        return f"no ({reasons.index(s.reason) + 1})"

    be = "tensorflow" if m.tf else "jax" if m.jax else "torch"
    rows = [["cpu"] + [cell(capability.cpu_precision(p, c.flags, be)) for p in PRECISIONS]]
    for i, g in enumerate((m.tf or m.jax or m.torch).get("gpus", [])):
        gcc = (
            (int(g["compute_capability"][0]), int(g["compute_capability"][1])) if g.get("compute_capability") else None
        )
        rows.append([f"gpu{i}"] + [cell(capability.gpu_precision(p, gcc, g.get("name", ""))) for p in PRECISIONS])
    if not m.gpu_count(be):
        rows.append(["gpu"] + [cell(capability.Support(False, m.no_gpu_reason(be)))] * len(PRECISIONS))
    lines += ["", "Precision support:", tabulate(rows, headers=["device", *PRECISIONS])]
    lines += [f"  ({i}) {r}" for i, r in enumerate(reasons, 1)]
    return "\n".join(lines)


def gpu_limits(g: dict, clock: bool = True) -> str:
    """What NVML says the machine lets a GPU reach (from ``GPUInfo.to_dict``, as results store it).

    A power cap below the default, a slot slower than the GPU's own PCIe generation or MIG on are
    what make a healthy GPU run slower than published figures on the same part. ``clock``: say the
    maximum SM clock (where the caller has not already set a measured clock against it).
    """
    parts = []
    if clock and g.get("max_sm_clock_mhz"):
        parts.append(f"max SM clock {g['max_sm_clock_mhz']} MHz")
    if g.get("power_limit_w"):
        cap = f"power limit {g['power_limit_w']:.0f} W"
        default = g.get("default_power_limit_w")
        if default and abs(default - g["power_limit_w"]) > 1:
            cap += (
                f" (LOWERED from the default {default:.0f} W)"
                if g["power_limit_w"] < default
                else f" (default {default:.0f} W)"
            )
        parts.append(cap)
    if g.get("pcie_max"):
        link = f"PCIe {g['pcie_max']}"
        own = g.get("pcie_gpu_max_gen")
        if own and not str(g["pcie_max"]).startswith(f"gen{own} "):
            link += f" (the GPU can do gen{own}: a slower slot or riser)"
        parts.append(link)
    if g.get("mig"):
        parts.append("MIG on (a case gets one instance, not the whole GPU)")
    return ", ".join(parts)
