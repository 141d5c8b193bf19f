"""Every kind of page accelbench publishes, built from the sample results, for the validators.

``build(out)`` writes reports (CPU-only, 8 GPUs with a baseline and prices, hostile names, one A100
held against published figures, the real default CPU run and H200 runs alone and together) and
a batch sweep, a run of every backend, two sites (a testbed with 12 nights and published night reports; one with 3 nights, the judge
still gathering) under ``out`` and returns the HTML files.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: nights.py

from nights import night  # noqa: E402

sys.path.insert(0, str(HERE.parent / "data"))
import make_samples  # noqa: E402  (a one-GPU machine held against published figures)

from bench import storage  # noqa: E402
from bench.cases import Case  # noqa: E402
from bench.cli import main  # noqa: E402
from bench.history.store import Store  # noqa: E402
from bench.history.summarise import summarise  # noqa: E402
from bench.report import cost  # noqa: E402
from bench.report.render import html_report, render  # noqa: E402

DATA = HERE.parent / "data"
PRICES = 'kwh = 0.30\n[device_hour]\ncpu = 0.50\ngpu = 2.00\n"NVIDIA H100 80GB HBM3" = 3.60\n'


def _site(root: Path, doc: dict, testbed: str, nights: int, reports: tuple[int, ...]) -> Path:
    store = Store(root / "store", create=True)
    for day in range(nights):
        d = night(doc, day, factor=0.85 if day >= nights - 2 else 1.0, only="mlp")
        store.add(summarise([(f"n{day}", d)], testbed), html_report([d]) if day in reports else None)
    if main(["site", "build", "--store", str(root / "store"), "--out", str(root / "site"), "--keep-reports", "2"]):
        raise RuntimeError(f"site build failed for {root}")
    return root / "site"


def build(out: Path, results: Path | None = None) -> list[Path]:
    """The pages; ``results``: a fresh results file to report on as well (e.g. a smoke run's)."""
    out.mkdir(parents=True, exist_ok=True)
    cpu = storage.load(DATA / "cpu_smoke.json")
    gpu8, slow = storage.load(DATA / "gpu8.json"), storage.load(DATA / "gpu8_slow.json")
    prices = out / "prices.toml"
    prices.write_text(PRICES)
    render([cpu], out / "report-cpu")
    render([slow], out / "report-gpu8", baseline=gpu8, prices=cost.load(prices))
    render([storage.load(DATA / "hostile.json")], out / "report-hostile")
    rn50 = {
        Case("cnn", "train", "gpu", 1, False, "tf32", True, 256): 0.9,
        Case("cnn", "train", "gpu", 1, False, "mixed_float16", True, 256): 0.3,  # check this machine
        Case("cnn", "infer", "gpu", 1, False, "tf32", False, 64): 1.5,
    }
    a100 = make_samples.one_gpu(rn50)
    for n, shares in ((2, [0.62, 0.58]), (4, [0.3, 0.28, 0.27, 0.2])):  # the sharing table and chart
        t = Case("mlp", "train", "gpu", 1, False, "tf32", False, 1024, tenants=n)
        storage.add_record(a100, make_samples.tenant_record(t, 150000.0, shares, make_samples.A100, "a100-run"))
    mix = Case("mlp", "train", "gpu", 1, False, "tf32", False, 1024).mix()  # the noisy-neighbour table
    storage.add_record(a100, make_samples.tenant_record(mix, 2000.0, [0.5, 0.9], make_samples.A100, "a100-run"))
    render([a100], out / "report-a100")
    if results is not None:
        render([storage.load(results)], out / "report-fresh")
    # the real runs: the default CPU run, each H200 file alone and the three together
    render([storage.load(DATA / "cpu_default_run.json")], out / "report-cpu-default")
    render([storage.load(DATA / "cpu_sweep.json")], out / "report-cpu-sweep")  # a batch sweep: charts, crossovers
    render([make_samples.gpu_shaped_grid()], out / "report-gpu-grid")  # a full grid: the heat map
    render([storage.load(DATA / "cpu_backends.json")], out / "report-cpu-backends")  # every backend side by side
    h200 = [storage.load(DATA / "h200" / f"{k}.json") for k in ("smoke-cpu-and-gpu1", "standard-gpu1", "tenants-mix")]
    for d in h200:
        render([d], out / f"report-h200-{d['run']['id']}")
    render(h200, out / "report-h200-all")
    _site(out / "site12", cpu, "cpu-dev", 12, (9, 10, 11))
    shared = make_samples.tenant_record(
        Case("mlp", "train", "gpu", 1, False, "tf32", False, 1024, tenants=2), 150000.0, [0.6, 0.55], "H100", "gpu8-run"
    )
    storage.add_record(gpu8, shared)  # the card's sharing table
    _site(out / "site3", gpu8, "h100x8", 3, (2,))
    return sorted(p for p in out.rglob("*.html"))


if __name__ == "__main__":
    for p in build(Path(sys.argv[1])):
        print(p)
