"""The static site: pages, regressions, feed, CSV, pruning, escaping, size at a year x 200 cases."""

import copy
import re
import time
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from nights import night

from bench import storage
from bench.cli import main
from bench.history import simulate
from bench.history.store import Store
from bench.history.summarise import summarise

DATA = Path(__file__).parent / "data"
CPU = storage.load(DATA / "cpu_smoke.json")
HOSTILE = storage.load(DATA / "hostile.json")
EVIL = '<script>alert("case")</script>'


def _store(tmp_path, nights=12, slow_from=10, reports=(), doc=CPU, testbed="cpu-dev"):
    store = Store(tmp_path / "store", create=True)
    for day in range(nights):
        d = night(doc, day, factor=0.9 if day >= slow_from else 1.0, only="mlp-train")
        html = None
        if day in reports:
            from bench.report.render import html_report

            html = html_report([d])
        store.add(summarise([(f"n{day}", d)], testbed), html)
    return store


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    _store(tmp, reports=(9, 10, 11))
    assert (
        main(["site", "build", "--store", str(tmp / "store"), "--out", str(tmp / "site"), "--keep-reports", "2"]) == 0
    )
    return tmp / "site"


def test_every_page_is_built_and_links_stay_inside_the_site(site):
    for rel in ("index.html", "regressions.html", "regressions.xml", "method.html", "history.csv", "index.json"):
        assert (site / rel).is_file(), rel
    assert (site / "trends" / "cpu-dev.html").is_file() and (site / "nights" / "cpu-dev.html").is_file()
    # the method page shows the one method text (docs/method.md's "In short")
    from bench import method

    assert method.html_list() in (site / "method.html").read_text()
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not re.search(r'(href|src)="(https?:)?//', text) and "<script" not in text, page  # nothing fetched


def test_home_card_shows_verdict_last_good_night_speedups_and_health(site):
    home = (site / "index.html").read_text()
    assert "2 confirmed regressions" in home and "Last good night: night0009-0" in home
    assert "speed-up vs CPU fp32" in home and "<svg" in home and "precision gain" in home
    assert "night-to-night noise" in home and "throttling seen" in home


def test_regressions_page_lists_the_planted_slowdown_with_bisect_range_and_reports(site):
    reg = (site / "regressions.html").read_text()
    assert "mlp-train-cpu-fp32-b64" in reg and "confirmed regression" in reg
    assert "c0009..c0010" in reg  # last good -> first bad commit
    assert 'href="reports/cpu-dev/night0010-0.html"' in reg  # the first bad night's report
    feed = ET.fromstring((site / "regressions.xml").read_text())
    ns = {"a": "http://www.w3.org/2005/Atom"}
    titles = [e.findtext("a:title", namespaces=ns) for e in feed.findall("a:entry", ns)]
    assert any("mlp-train-cpu-fp32-b64" in t for t in titles)


def test_old_reports_are_pruned_and_the_nights_page_says_so(site):
    assert sorted(p.name for p in (site / "reports" / "cpu-dev").iterdir()) == ["night0010-0.html", "night0011-0.html"]
    nights = (site / "nights" / "cpu-dev.html").read_text()
    assert "pruned (in the history store)" in nights and "no report" in nights


def test_history_csv_is_tidy_for_pandas(site):
    df = pd.read_csv(site / "history.csv")
    assert len(df) == 12 * 48 and set(df["testbed"]) == {"cpu-dev"}
    row = df[(df.case_id == "mlp-train-cpu-fp32-b64") & (df.night_id == "night0011-0")].iloc[0]
    assert row["state"] == "confirmed" and row["value"] > 0
    for col in ("virtual", "xla", "busy"):
        assert df[col].dtype == bool, col
    assert set(df["backend"]) == {"tensorflow"} and not df.busy.any()


def test_trends_have_a_panel_per_measured_case_with_band_and_markers(site):
    t = (site / "trends" / "cpu-dev.html").read_text()
    assert t.count('<div class="panel">') == 12  # the measured CPU cases of the sample
    assert "<polygon" in t and 'href="../reports/cpu-dev/night0011-0.html"' in t


def test_hostile_names_are_escaped_everywhere(tmp_path):
    doc = copy.deepcopy(HOSTILE)
    doc["benchmarks"][0]["extra_info"]["case_id"] = "cnn-train-cpu-fp32-b256" + EVIL
    _store(tmp_path, nights=11, slow_from=99, reports=(10,), doc=doc, testbed="hostile")
    assert main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "site")]) == 0
    for f in (tmp_path / "site").rglob("*"):
        if f.suffix in (".html", ".xml", ".svg"):
            text = f.read_text().lower()
            assert "<script" not in text and "<img" not in text, f
    assert "&lt;script&gt;" in (tmp_path / "site" / "trends" / "hostile.html").read_text()


def test_with_fewer_nights_than_the_baseline_needs_the_site_says_the_judge_is_gathering(tmp_path):
    _store(tmp_path, nights=3, slow_from=1)  # a 10% drop on two nights: too early to judge
    assert _build(tmp_path) == 0
    home = (tmp_path / "site" / "index.html").read_text()
    assert "Judge: 3 of 10 nights gathered, not judging yet" in home
    assert "No confirmed regressions" not in home and 'class="green"' not in home
    assert "median of its last 30 nights" in home  # what it will watch once it has them
    trends = (tmp_path / "site" / "trends" / "cpu-dev.html").read_text()
    assert "Judge: 3 of 10 nights gathered" in trends


def test_a_failed_build_leaves_the_old_site(tmp_path, capsys):
    _store(tmp_path, nights=3)
    out = tmp_path / "site"
    assert main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(out)]) == 0
    before = (out / "index.html").read_text()
    (tmp_path / "store" / "annotations.json").write_text("{broken")
    assert main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(out)]) == 2
    assert "annotations.json: not valid JSON" in capsys.readouterr().err
    assert (out / "index.html").read_text() == before
    assert main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "store" / "x")]) == 2


def _build(tmp_path, out="site", *more):
    return main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(tmp_path / out), *more])


def test_prices_give_cost_per_million_samples_and_the_cheapest(tmp_path):
    _store(tmp_path, nights=2)
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "EUR"\nkwh = 0.25\n[device_hour]\ncpu = 0.40\n')
    assert _build(tmp_path, "site", "--prices", str(prices)) == 0
    home = (tmp_path / "site" / "index.html").read_text()
    assert "cheapest, EUR per million samples" in home and "(device-hours only)" in home
    prices.write_text("kwh = -1\n")
    assert _build(tmp_path, "s2", "--prices", str(prices)) == 2


def _year(root: Path, nights=365, cases=200) -> Store:
    """A year of nights x 200 GPU-like cases, written straight into a store."""
    store = Store(root, create=True)
    vals = simulate.series(cases, nights, 0.01, 0.0, nights, seed=1)
    ids = []
    for i in range(cases):
        w, m, n, p = (
            ("mlp", "cnn", "transformer")[i % 3],
            ("train", "infer")[(i // 3) % 2],
            1 + (i // 6) % 8,
            ("fp32", "tf32", "mixed_float16", "mixed_bfloat16")[(i // 48) % 4],
        )
        ids.append((f"{w}-{m}-gpu{n}-{p}-b{64 + i}", w, m, n, p, 64 + i))
    start = datetime(2025, 1, 1, 2, 23, tzinfo=timezone.utc)
    for t in range(nights):
        cases_ = {}
        for i, (cid, w, m, n, p, b) in enumerate(ids):
            v = float(vals[i, t])
            cases_[cid] = {
                "workload": w, "mode": m, "device_kind": "gpu", "device_count": n, "virtual": False, "precision": p,
                "xla": False, "per_replica_batch": b, "global_batch": b * n, "status": "ok", "direction": "higher",
                "value": v, "ci_low": v * 0.99, "ci_high": v * 1.01, "cv": 0.01,
                "samples": [round(v * (1 + 0.002 * k), 2) for k in range(-5, 5)], "samples_per_joule": 100.0,
            }  # fmt: skip
        fp = {"gpus": ["NVIDIA H100 80GB HBM3"] * 8, "gpu_count": 8}
        store.add(
            {
                "night_id": f"n{t:04d}",
                "run_ids": [f"n{t:04d}"],
                "date_utc": (start + timedelta(days=t)).isoformat(),
                "testbed": "h100x8",
                "commit": f"c{t}",
                "status": "complete",
                "fingerprint": fp,
                "fingerprint_hash": "fp",
                "health": {"measured_cases": cases},
                "cases": cases_,
            }  # fmt: skip
        )
    return store


def test_a_year_of_200_cases_builds_and_stays_small(tmp_path):
    _year(tmp_path / "store")
    t0 = time.perf_counter()
    assert main(["site", "build", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "site")]) == 0
    took = time.perf_counter() - t0  # figure in docs/benchmarks.md; not asserted (noisy machines)
    size = sum(f.stat().st_size for f in (tmp_path / "site").rglob("*") if f.is_file())
    store = sum(f.stat().st_size for f in (tmp_path / "store").rglob("*") if f.is_file())
    assert size < 50 * 2**20 and store < 10 * 2**20
    assert (tmp_path / "site" / "trends" / "h100x8.html").read_text().count('<div class="panel">') == 200
    print(f"365 nights x 200 cases: site built in {took:.1f} s, {size / 2**20:.1f} MiB; store {store / 2**20:.1f} MiB")


def test_a_jax_case_is_set_against_the_jax_cpu_baseline_on_the_site():
    from bench.site import metrics

    def case(device, count, backend, value):
        return {
            "workload": "mlp", "mode": "train", "device_kind": device, "device_count": count, "nodes": 1,
            "virtual": False, "precision": "fp32", "xla": backend == "jax", "per_replica_batch": 64,
            "backend": backend, "parallelism": "data", "status": "ok", "value": value,
            "samples": [value * (1 + 0.001 * k) for k in range(-3, 4)],
        }  # fmt: skip

    night = {
        "cases": {
            "mlp-train-cpu-fp32-b64": case("cpu", 1, "tensorflow", 1000.0),
            "mlp-train-gpu1-fp32-b64": case("gpu", 1, "tensorflow", 4000.0),
            "mlp-train-cpu-jax-fp32-b64": case("cpu", 1, "jax", 500.0),
            "mlp-train-gpu1-jax-fp32-b64": case("gpu", 1, "jax", 5000.0),
        }
    }
    (h,) = metrics.headline(night)
    assert h.best_case == "mlp-train-gpu1-jax-fp32-b64"
    assert h.speedup.value == pytest.approx(10.0, rel=0.01)  # against JAX on the CPU (500), not TensorFlow's 1000
    assert metrics.speedup_series([night], "mlp-train-gpu1-jax-fp32-b64") == [pytest.approx(10.0)]


def test_card_scaling_counts_devices_across_nodes():
    from bench.site import metrics

    def case(count, nodes, value):
        return {
            "workload": "cnn", "mode": "train", "device_kind": "gpu", "device_count": count, "nodes": nodes,
            "virtual": False, "precision": "fp32", "xla": False, "per_replica_batch": 64, "status": "ok",
            "value": value, "samples": [value * (1 + 0.001 * k) for k in range(-3, 4)],
        }  # fmt: skip

    night = {
        "cases": {"cnn-train-gpu1-fp32-b64": case(1, 1, 1000.0), "cnn-train-gpu8x2nodes-fp32-b64": case(8, 2, 14400.0)}
    }
    (h,) = metrics.headline(night)
    assert h.scaling_case == "cnn-train-gpu8x2nodes-fp32-b64" and h.scaling.value == pytest.approx(
        0.9
    )  # 14400 / (16 x 1000)
