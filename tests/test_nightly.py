"""The nightly rehearsal: a real smoke run on this CPU (logical devices), then the judge's and the
publisher's steps over synthetic nights made from it, with a planted 10% slowdown."""

import json
import subprocess
import sys

import browser
import pytest
from nights import night

from bench import storage
from bench.cli import main

pytestmark = pytest.mark.slow
SLOWED = "mlp-train-cpu-fp32-b64"


def _add(tmp_path, doc, day, **kw) -> str:
    p = tmp_path / "raw" / f"night{day:02d}.json"
    storage.write_atomic(p, night(doc, day, **kw))
    return str(p)


def test_nightly_rehearsal(smoke, tmp_path, capsys):
    _, path, _ = smoke
    real = storage.load(path)
    # the run recorded which testbed and runner ran it (the nightly job sets these)
    assert real["run"]["testbed"] == "rehearsal-cpu" and real["run"]["runner_name"] == "local-runner"
    store = str(tmp_path / "history")
    for day in range(10):
        add = ["history", "add", _add(tmp_path, real, day), "--store", store]
        assert main([*add, "--no-report"] if day < 9 else add) == 0
    assert main(["history", "check", "--store", store, "--quiet"]) == 0  # quiet history: nothing to say

    # the planted slowdown, beyond the case's own uncertainty (the judge's band is at least its achieved
    # CI half-width: a smoke case on a loaded 2-core machine may stop at +-10%): suspect on its first night
    (own,) = [r["extra_info"] for r in storage.records(real) if r["extra_info"]["case_id"] == SLOWED]
    factor = min(0.9, 1 - 2 * (own.get("ci_achieved_rel") or 0))
    assert main(["history", "add", _add(tmp_path, real, 10, factor=factor, only=SLOWED), "--store", store]) == 0
    capsys.readouterr()
    assert main(["history", "check", "--store", store]) == 0
    assert f"suspect   regression {SLOWED}" in capsys.readouterr().out

    # confirmed on the second night: the judge (a real process, as in the workflow) exits 1
    assert main(["history", "add", _add(tmp_path, real, 11, factor=factor, only=SLOWED), "--store", store]) == 0
    r = subprocess.run(
        [sys.executable, "-m", "bench", "history", "check", "--store", store, "--markdown"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, r.stderr
    assert "confirmed regression" in r.stdout and f"| {SLOWED} | confirmed regression | 2 |" in r.stdout
    assert "night0009-0..night" not in r.stdout and "c0009..c0010" in r.stdout  # commits to bisect
    others = json.loads(
        subprocess.run(
            [sys.executable, "-m", "bench", "history", "check", "--store", store, "--json"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert [a["case_id"] for a in others["testbeds"][0]["alerts"]] == [SLOWED]  # nothing else alerted

    # the site lists it, renders in headless Chromium and fetches nothing
    site = tmp_path / "site"
    assert main(["site", "build", "--store", store, "--out", str(site)]) == 0
    assert SLOWED in (site / "regressions.html").read_text()
    if browser.CHROMIUM:
        dom, fetched = browser.dump_dom(site / "regressions.html", tmp_path)
        assert SLOWED in dom and "confirmed regression" in dom and fetched == set()
        dom, fetched = browser.dump_dom(site / "index.html", tmp_path)
        assert "1 confirmed regression" in dom and dom.count("<svg") >= 2 and fetched == set()
        browser.screenshot(site / "index.html", tmp_path, tmp_path / "home.png")
        assert (tmp_path / "home.png").stat().st_size > 10_000

    # a new TensorFlow on the testbed, everything 30% slower: a new segment, labelled, not an alert
    upgraded = json.loads(json.dumps(real))
    upgraded["machine_info"]["accelbench"]["tensorflow"] = "9.99.0"
    assert main(["history", "add", _add(tmp_path, upgraded, 12, factor=0.7), "--store", store]) == 0
    capsys.readouterr()
    assert main(["history", "check", "--store", store, "--markdown"]) == 0
    md = capsys.readouterr().out
    assert "New testbed fingerprint tonight (a new segment, not an alert)" in md and "TF 9.99.0" in md
    assert "| case |" not in md  # no alert table
