"""Serve cases through the runner (stand-in worker, real rate search on a virtual clock), CSV, report, console."""

import dataclasses
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_capability import machine

from bench import runner, storage, watchdog
from bench.cli import main
from bench.planning import RunOptions, plan
from bench.report import analysis, console
from bench.report.render import html_report, markdown_report

OPTS = RunOptions(
    profile="smoke",
    workloads=("mlp", "cnn"),
    modes=("infer", "serve"),
    devices=("cpu", "gpu:1"),
    precisions=("fp32",),
    virtual_devices=2,
)
A100 = machine(tf_gpus=[("NVIDIA A100-SXM4-40GB", (8, 0))], nvml_gpus=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(watchdog, "WORKER", [sys.executable, str(Path(__file__).with_name("fake_worker.py"))])
    mp.setenv("FAKE_WORKER", "fail:no-such-case")  # every case finishes
    try:
        path = runner.Run.new(OPTS, A100, tmp_path_factory.mktemp("serve"), ["run"]).execute()
    finally:
        mp.undo()
    return path, storage.load(path)


def test_serve_is_a_mode_of_its_own_with_one_slo_per_workload_for_every_device():
    cases = {c.id: s for c, s in plan(OPTS, A100) if c.mode == "serve"}
    assert "mlp-serve-cpu-fp32-b64-slo10ms" in cases and "cnn-serve-gpu1-fp32-b16-slo15ms" in cases
    assert not cases["mlp-serve-gpu2-virtual-fp32-b64-slo10ms"].supported
    assert "one device" in cases["mlp-serve-gpu2-virtual-fp32-b64-slo10ms"].reason
    ids = [c.id for c, _ in plan(dataclasses.replace(OPTS, slo_ms=50.0), A100) if c.mode == "serve"]
    assert ids and all(i.endswith("-slo50ms") for i in ids)
    smoke = {c.mode for c, _ in plan(RunOptions(profile="smoke", workloads=("mlp",)), A100)}
    standard = {c.mode for c, _ in plan(RunOptions(profile="standard", workloads=("mlp",)), A100)}
    assert smoke == {"train", "infer"} and standard == {"train", "infer", "serve"}


def test_serve_records_carry_the_rate_at_the_slo_and_every_trial(served):
    _, doc = served
    recs = {r.id: r for r in storage.case_records(doc) if r.case.mode == "serve" and r.ok}
    planned = {c.id for c, s in plan(OPTS, A100) if c.mode == "serve" and s.supported}
    assert set(recs) == planned and len(planned) == 4  # mlp and cnn, on the CPU and on one GPU
    for r in recs.values():
        e = r.info
        assert 0 < e["max_rate_at_slo"] < e["capacity_rate"]
        assert e["serve_p99_ms"] <= r.case.slo_ms and e["rate_bracket_low"] == e["max_rate_at_slo"]
        trials = e["serve_trials"]
        assert any(t["outcome"] == "fail" and t["rate"] > e["capacity_rate"] for t in trials)  # the 1.5x trial
        assert [t["seed"] for t in trials] == e["serve_seeds"] and len(set(e["serve_seeds"])) == len(trials)
    gpu, cpu = recs["mlp-serve-gpu1-fp32-b64-slo10ms"].info, recs["mlp-serve-cpu-fp32-b64-slo10ms"].info
    assert gpu["max_rate_at_slo"] > cpu["max_rate_at_slo"]  # the fake GPU serves a batch 2.5-8x faster


def test_csv_console_and_report_show_the_capacity_at_the_slo(served, tmp_path):
    path, doc = served
    out = tmp_path / "r.csv"
    assert main(["export", str(path), "-o", str(out)]) == 0
    df = pd.read_csv(out)
    sv = df[df["mode"] == "serve"].dropna(subset=["max_rate_at_slo"]).set_index("case_id")
    assert len(sv) >= 4 and (sv["slo_ms"].isin([10.0, 15.0])).all() and (sv["serve_p99_ms"] <= sv["slo_ms"]).all()
    assert df[df["mode"] == "infer"]["slo_ms"].isna().all()

    run = analysis.load_run(doc)
    text = console.table(run)
    line = [ln for ln in text.splitlines() if ln.startswith("mlp-serve-gpu1")][0]
    rate = sv.loc["mlp-serve-gpu1-fp32-b64-slo10ms", "max_rate_at_slo"]
    assert "req/s at p99 <= 10 ms" in line

    html = html_report([doc])
    assert "Serving: capacity at the latency SLO" in html
    assert 'aria-label="mlp: latency vs request rate (SLO 10 ms)' in html
    assert 'aria-label="cnn: latency vs request rate (SLO 15 ms)' in html
    ratio = rate / sv.loc["mlp-serve-cpu-fp32-b64-slo10ms", "max_rate_at_slo"]
    from bench.report.numbers import human

    assert f"{human(ratio)}x" in html  # the GPU / CPU capacity ratio at the same SLO
    md = markdown_report([doc])
    assert "## Capacity at the latency SLO" in md and "mlp-serve-gpu1-fp32-b64-slo10ms" in md


def test_prices_give_a_cost_per_million_requests(served, tmp_path):
    from bench.report import cost

    _, doc = served
    p = tmp_path / "prices.toml"
    p.write_text('currency = "USD"\n[device_hour]\ncpu = 0.10\ngpu = 2.00\n')
    prices = cost.load(p)
    html = html_report([doc], prices=prices)
    run = analysis.load_run(doc)
    r = run.table.set_index("case_id").loc["mlp-serve-gpu1-fp32-b64-slo10ms"]
    want = 2.00 / 3600 / r["max_rate_at_slo"] * 1e6
    from bench.report.numbers import human

    assert "USD per million requests" in html and human(want) in html
