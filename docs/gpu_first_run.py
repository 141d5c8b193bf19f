"""The first run on a GPU machine (issue 17 item 5): findings 1, 4, 5, 7, 10 and the energy counter.

    python docs/gpu_first_run.py OUT_DIR [--cpu-smoke]

Prepared for a borrowed GPU box with JAX (TensorFlow optional): about 6 minutes, at most 9. Needs
accelbench importable from this checkout with its dependencies (with only JAX: README, "Only JAX
installed"). Every step runs in a child with its own time limit, so one failing step costs only
its own verdict. What it leaves in OUT_DIR:

- ``results/*.json``: a smoke run on one GPU (MLP and CNN, train and infer, fp32 and bf16; JAX, and
  TensorFlow too where installed) that ``accelbench report`` reads like any run;
- ``check.json``: ``accelbench devices --check --json`` (every path, the NVML window under a load);
- ``nvml.json``: ``docs/gpu_nvml_check.py`` (the energy counter's step, the old 1 s idle method);
- ``tenants/*.json``: two tenants of the smoke MLP and its batch-1 inference beside its training (issue 18);
- ``summary.json`` and stdout: one verdict per finding, "fixed", "NOT FIXED" or "not checkable
  here" with why, and the figures behind it.

Findings (``shared/design/gpu-review-2.md``): 1, TF telemetry limited to the case's GPU (needs
TensorFlow); 4, a JAX worker may use 0.95 of the GPU, not XLA's 0.75; 5, JAX memory peaks without
the matmul probe's matrices; 7, the NVML check's load on the GPU it samples; 10, the idle settle on
a part that may idle in P0; and the energy counter against integrated power. ``--cpu-smoke`` runs
the same steps on the CPU, to try the script where no GPU is at hand (GPU verdicts: not checkable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 540.0  # every step together: under 10 minutes with start-up
F4 = r"""
import json, os, sys
sys.path.insert(0, os.getcwd())
from bench.backends import worker_env
from bench.cases import DeviceConfig
os.environ.update(worker_env("jax", DeviceConfig(sys.argv[1], 1), {}))
import jax
s = jax.devices()[0].memory_stats() or {}
import pynvml
pynvml.nvmlInit()
total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total
print(json.dumps({"bytes_limit": s.get("bytes_limit"), "nvml_total": total,
                  "fraction_env": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}))
"""


def step(name: str, argv: list[str], limit_s: float, log: Path) -> tuple[int | None, str]:
    """Run one child with a time limit; its exit code (None on timeout) and the last line it printed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    t0 = time.monotonic()
    if limit_s <= 0:
        log.write_text("not run: the script's time budget was spent\n")
        print(f"[{name}] not run: no time left", flush=True)
        return None, "not run: no time left"
    with log.open("w") as f:
        try:
            rc: int | None = subprocess.run(
                argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=limit_s
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
    lines = log.read_text(errors="replace").strip().splitlines() or [""]
    print(f"[{name}] exit {rc} after {time.monotonic() - t0:.0f} s: {lines[-1][:200]}", flush=True)
    return rc, lines[-1]


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (without importing it)."""
    import importlib.util

    return importlib.util.find_spec("tensorflow") is not None


def main() -> int:
    """Every step, then the verdicts."""
    if len(sys.argv) < 2:
        print("usage: python docs/gpu_first_run.py OUT_DIR [--cpu-smoke]", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    smoke = "--cpu-smoke" in sys.argv
    kind = "cpu" if smoke else "gpu"
    out.mkdir(parents=True, exist_ok=True)
    py, start = sys.executable, time.monotonic()

    def left(share: float) -> float:  # a step may take its share, never past the budget (0: skipped)
        rest = BUDGET_S - (time.monotonic() - start)
        return min(share, rest) if rest >= 10.0 else 0.0

    tf = tensorflow_installed()
    check_rc, _ = step(
        "devices --check", [py, "-m", "bench", "devices", "--check", "--json"], left(220), out / "check.log"
    )
    check = _json_tail(out / "check.log")
    (out / "check.json").write_text(json.dumps(check, indent=1))
    run = [py, "-m", "bench", "run", "--profile", "smoke", "--workloads", "mlp,cnn", "--modes", "train,infer",
           "--devices", "cpu" if smoke else "gpu:1", "--precisions", "fp32,mixed_bfloat16",
           "--backend", "all" if tf else "jax", "--results-dir", str(out / "results"), "--no-report"]  # fmt: skip
    step("smoke run", run, left(200), out / "run.log")
    f4_rc, f4_line = step("jax memory fraction", [py, "-c", F4, kind], left(60), out / "f4.log")
    nv_rc, _ = (None, "")
    if not smoke:
        nv_rc, _ = step(
            "nvml", [py, str(ROOT / "docs" / "gpu_nvml_check.py"), str(out / "nvml.json")], left(90), out / "nvml.log"
        )
    ten = [py, "-m", "bench", "run", "--profile", "smoke", "--workloads", "mlp", "--modes", "train",
           "--devices", "cpu" if smoke else "gpu:1", "--precisions", "fp32", "--backend", "tensorflow" if tf else "jax",
           "--tenants", "2,mix", "-k", "t2 or beside", "--results-dir", str(out / "tenants"), "--no-report"]  # fmt: skip
    step("tenants", ten, left(200), out / "tenants.log")  # last: it takes what time is left
    summary = write_summary(out, smoke, tf, start, check_rc, check, (f4_rc, f4_line), nv_rc)
    for k, v in summary["findings"].items():
        print(f"finding {k}: {v['verdict']}: {v.get('why', '')}")
    print(f"{summary['seconds']} s; files in {out}")
    return 0


def write_summary(
    out: Path, smoke: bool, tf: bool, start: float, check_rc: int | None, check: dict, f4_step: tuple, nv_rc: int | None
) -> dict:
    """One verdict per finding from what the steps left in ``out``; written to ``out/summary.json``."""
    docs = [json.loads(p.read_text()) for p in sorted((out / "results").glob("*.json"))]
    summary = {
        "machine": "cpu smoke" if smoke else "gpu",
        "seconds": round(time.monotonic() - start),
        "check_exit": check_rc,
        "findings": {
            "1": f1(docs, tf, smoke),
            "4": f4(*f4_step, smoke),
            "5": f5(docs, smoke),
            "7": f7(check, smoke),
            "10": f10(docs, smoke),
            "energy counter": energy(out / "nvml.json", nv_rc, smoke),
            "tenants": tenants(out / "tenants", smoke),
        },
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def _json_tail(log: Path) -> dict:
    text = log.read_text(errors="replace")
    i = text.find("{\n")
    try:
        return json.loads(text[i:]) if i >= 0 else {}
    except json.JSONDecodeError:
        return {}


def _records(docs: list[dict], backend: str | None = None) -> list[dict]:
    return [
        b["extra_info"]
        for d in docs
        for b in d.get("benchmarks", [])
        if b["extra_info"].get("status") == "ok" and (backend is None or b["extra_info"].get("backend") == backend)
    ]


def _no_gpu(smoke: bool) -> dict | None:
    return {"verdict": "not checkable here", "why": "--cpu-smoke: no GPU"} if smoke else None


def f1(docs: list[dict], tf: bool, smoke: bool) -> dict:
    """TF gpu1 cases meter exactly one GPU (their worker's)."""
    if not tf:
        return {"verdict": "not checkable here", "why": "TensorFlow is not installed (the CPU tests cover it)"}
    if smoke:
        return _no_gpu(smoke) or {}
    recs = [e for e in _records(docs, "tensorflow") if e.get("device_kind") == "gpu"]
    if not recs:
        return {"verdict": "not checkable here", "why": "no TensorFlow GPU case was measured (see run.log)"}
    metered = sorted({len((e.get("telemetry") or {}).get("gpus", [])) for e in recs})
    buses = sorted({len(e.get("pci_bus_ids") or []) for e in recs})
    ok = metered == [1] and buses == [1]
    return {"verdict": "fixed" if ok else "NOT FIXED", "why": f"GPUs metered per gpu1 case {metered}, bus ids {buses}"}


def f4(rc: int | None, line: str, smoke: bool) -> dict:
    """A JAX GPU worker's pool limit as a share of the GPU's memory (0.95 set; XLA's default 0.75)."""
    if smoke:
        return _no_gpu(smoke) or {}
    try:
        d = json.loads(line)
        share = d["bytes_limit"] / d["nvml_total"]
    except (ValueError, KeyError, TypeError):
        return {"verdict": "not checkable here", "why": f"the child failed (exit {rc}): {line[:200]}"}
    return {"verdict": "fixed" if share > 0.85 else "NOT FIXED", "why": f"bytes_limit / total = {share:.3f}", **d}


def f5(docs: list[dict], smoke: bool) -> dict:
    """JAX GPU peaks hold the case's working set, not the probe's matrices (2 x n x n)."""
    if smoke:
        return _no_gpu(smoke) or {}
    rows = []
    for e in _records(docs, "jax"):
        if e.get("device_kind") != "gpu" or not e.get("probe_n"):
            continue
        item = 2 if "16" in str(e.get("probe_dtype")) else 4
        rows.append((e["case_id"], e.get("device_peak_mem_bytes"), 2 * e["probe_n"] ** 2 * item))
    mlp = [r for r in rows if r[0].startswith("mlp-") and r[1] is not None]
    if not mlp:
        return {"verdict": "not checkable here", "why": "no JAX GPU MLP case with a memory peak (see run.log)"}
    ok = all(peak < probe for _, peak, probe in mlp)  # the smoke MLP's working set is far below the probe's
    return {"verdict": "fixed" if ok else "NOT FIXED", "why": "smoke MLP peak vs the probe's matrices", "cases": rows}


def f7(check: dict, smoke: bool) -> dict:
    """The NVML window under load passes (load and sample on one GPU: CUDA_VISIBLE_DEVICES = its UUID)."""
    if smoke:
        return _no_gpu(smoke) or {}
    row = next((r for r in check.get("rows", []) if r["path"].startswith("NVML")), None)
    if row is None:
        return {"verdict": "not checkable here", "why": "devices --check gave no NVML row (see check.log)"}
    verdict = {"pass": "fixed", "FAIL": "NOT FIXED"}.get(row["result"], "not checkable here")
    return {"verdict": verdict, "why": row["detail"]}


def f10(docs: list[dict], smoke: bool) -> dict:
    """The run's idle settle ended on an idle P-state or a steady power, not the time limit."""
    if smoke:
        return _no_gpu(smoke) or {}
    idle = {u: i for d in docs for u, i in (d["run"].get("idle_power") or {}).items()}
    if not idle:
        return {"verdict": "not checkable here", "why": "no idle power block in the results"}
    limit = [u for u, i in idle.items() if str(i.get("settled_by", "")).startswith("time limit")]
    return {"verdict": "NOT FIXED" if limit else "fixed", "why": "; ".join(
        f"{u}: {i.get('settled_by')} after {i.get('settle_s', 0):.1f} s, {i.get('pstate_before')} -> "
        f"{i.get('pstate_after')}, {i.get('power_w')} W" for u, i in idle.items())}  # fmt: skip


def energy(path: Path, rc: int | None, smoke: bool) -> dict:
    """The energy counter against integrated instant power over 10 s under load, and its step."""
    if smoke:
        return _no_gpu(smoke) or {}
    if not path.exists():
        return {"verdict": "not checkable here", "why": f"docs/gpu_nvml_check.py failed (exit {rc}, see nvml.log)"}
    d = json.loads(path.read_text())
    agree = d.get("agreement") or {}
    return {
        "verdict": "consistent" if agree.get("check_result") == "pass" else "INCONSISTENT",
        "why": agree.get("describe"),
        "counter_steps_under_load": d.get("counter_steps_under_load"),
        "idle_1s_counter_w": d.get("idle_1s_counter_w"),
    }



def tenants(folder: Path, smoke: bool) -> dict:
    """Issue 18 on a real device: 2 tenants and the mix ran, the mode was read, NVML listed each tenant's memory."""
    recs = [
        b["extra_info"]
        for p in sorted(folder.glob("*.json"))
        for b in json.loads(p.read_text()).get("benchmarks", [])
        if int(b["extra_info"].get("tenants") or 1) > 1
    ]
    if not recs:
        return {"verdict": "NOT RUN", "why": f"no tenant case recorded (see {folder.parent / 'tenants.log'})"}
    keys = ("status", "reason", "sharing_mode", "stp", "worst_slowdown", "fairness", "tenant_samples_per_s")
    keys += ("alone_samples_per_s", "tenant_gpu_mem_bytes", "tenant_memory_cap_bytes", "latency_p99_inflation")
    figures = {e["case_id"]: {k: e.get(k) for k in keys if e.get(k) is not None} for e in recs}
    ok = all(e.get("status") == "ok" for e in recs)
    if not smoke:  # on a GPU: time-slicing or MPS, and NVML saw every tenant's process
        ok = ok and all(
            e.get("sharing_mode") in ("time-slicing", "mps") and None not in (e.get("tenant_gpu_mem_bytes") or [None])
            for e in recs
        )
    return {"verdict": "ran" if ok else "CHECK", "why": json.dumps(figures, default=str)[:1500]}


if __name__ == "__main__":
    raise SystemExit(main())
