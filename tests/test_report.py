"""Reports rendered from sample results files kept in tests/data (hand-made 8-GPU runs)."""

import copy
import json
import re
import subprocess
import sys

import browser
import numpy as np
import pytest
from conftest import DATA

from bench import storage
from bench.report import analysis, console, headline
from bench.report.html import Cell, Table
from bench.report.render import html_report, markdown_report, regressions, render

GPU8 = DATA / "gpu8.json"
SLOW = DATA / "gpu8_slow.json"
HOSTILE = DATA / "hostile.json"


@pytest.fixture(scope="module")
def gpu8_html():
    return html_report([storage.load(GPU8)])


def test_headline_speedups_of_the_8_gpu_sample():
    run = analysis.load_run(storage.load(GPU8))
    h = {(x["workload"], x["mode"]): x for x in analysis.headline(run)}
    cnn = h[("cnn", "train")]
    assert cnn["best_case"] == "cnn-train-gpu8-mixed_float16-b256"
    assert cnn["gpu1_fp32"][1].value == pytest.approx(900 / 22, rel=0.02)
    assert cnn["multi_best"][0] == "cnn-train-gpu8-mixed_float16-b256"
    assert not cnn["speedup"].spans_one


def test_scaling_efficiency_of_the_8_gpu_sample():
    sc = analysis.scaling(analysis.load_run(storage.load(GPU8))).set_index("case_id")
    assert sc.loc["mlp-train-gpu8-tf32-b1024", "efficiency"].value == pytest.approx(0.91, abs=0.02)
    assert sc.loc["cnn-train-gpu2-mixed_bfloat16-b256", "efficiency"].value == pytest.approx(0.97, abs=0.01)
    assert "cnn-train-gpu8-fp32-b256" not in sc.index  # OOM: never plotted as zero


def test_precision_gains_and_status_counts():
    run = analysis.load_run(storage.load(GPU8))
    g = analysis.precision_gains(run).set_index("case_id")["gain"]
    assert g["mlp-train-gpu1-tf32-b1024"].value == pytest.approx(150000 / 40000, rel=0.02)
    assert analysis.status_counts(run) == {"ok": 33, "oom": 1, "numerics": 1, "unsupported": 1}


def test_html_has_every_section_charts_and_no_network(gpu8_html):
    for heading in [
        "Headline",
        "Speed-up matrix",
        "Throughput",
        "Multi-device scaling",
        "Precision gains",
        "Compiled vs not: TensorFlow XLA, torch.compile",
        "Energy and power",
        "Memory",
        "Compute efficiency",
        "Unsupported and failed cases",
        "Method",
        "Environment",
        "Data",
    ]:
        assert f">{heading}" in gpu8_html, heading
    svgs = re.findall(r"<svg [^>]*>", gpu8_html)
    assert len(svgs) >= 3 and all('role="img"' in s and "aria-label=" in s for s in svgs)
    assert "Power per GPU, cnn-train-gpu8-mixed_float16-b256" in gpu8_html
    # the scaling table's row of the 8-GPU tf32 MLP shows its efficiency (the sample's planted 0.91)
    eff = analysis.scaling(analysis.load_run(storage.load(GPU8))).set_index("case_id").loc["mlp-train-gpu8-tf32-b1024"]
    row = re.search(r"<td>mlp-train-gpu8-tf32-b1024</td><td class=\"num\">8</td>.*?</tr>", gpu8_html, re.S).group(0)
    assert row.endswith(f'<td class="num">{analysis.fmt_ratio(eff["efficiency"], pct=True)}</td></tr>'), row
    assert 0.89 <= eff["efficiency"].value <= 0.93
    assert "fp32 means TF32 off" in gpu8_html
    assert "<script" not in gpu8_html.lower() and "<link" not in gpu8_html.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", gpu8_html)
    assert not re.search(r"url\((?!#)", gpu8_html)  # only local references (SVG clip paths)
    assert 'href="data:text/csv;base64,' in gpu8_html
    assert "% of datasheet peak" in gpu8_html


def test_failed_cases_are_listed_with_reasons_and_never_plotted(gpu8_html):
    assert "OOM when allocating tensor" in gpu8_html and "loss is nan" in gpu8_html
    bars = re.search(r'aria-label="Throughput, [^"]*"', gpu8_html).group(0)
    assert "cnn-train-gpu8-fp32-b256" not in bars and "mlp-train-gpu1-mixed_float16-xla" not in bars


def test_missing_telemetry_reads_not_measured_never_zero():
    doc = storage.load(GPU8)
    html = html_report([doc])
    energy = html.split("<h2>Energy and power")[1].split("</table>")[0]
    # the CPU cases say one thing: one row for all of them, naming each
    (row,) = re.findall(r"<tr><td>(\d+ cases.*?)</td><td class=\"na\" colspan=\"9\">(.*?)</td></tr>", energy)
    assert "cnn-train-cpu-fp32-b256" in row[0] and "not measured (unavailable: CPU case" in row[1]


H200 = DATA / "h200"


@pytest.fixture(scope="module")
def h200_runs():
    return {p.stem: storage.load(p) for p in sorted(H200.glob("*.json")) if p.stem not in ("nvml", "pytorch-peer")}


def test_h200_headlines_have_a_number_in_every_row_with_a_measured_case(h200_runs):
    """The real H200 files: JAX's one-GPU fp32 case fills its column; a run without a CPU case shows absolute
    figures; a run stopped part-way says "not run" and makes no claim a missing case could change."""
    std = analysis.load_run(h200_runs["standard-gpu1"])
    h = {(x["workload"], x["mode"]): x for x in analysis.headline(std)}
    assert h[("mlp", "train")]["gpu1_fp32"][0] == "mlp-train-gpu1-jax-fp32-b1024"
    assert not h[("mlp", "train")]["baseline_measured"]
    cells = headline.headline([std])
    text = " ".join(
        str(c.text) + " " + str(c.below or "")
        for t in cells
        if isinstance(t, Table)
        for r in t.rows
        for c in r
        if isinstance(c, Cell)
    )
    assert "831,000 samples/s" in text and "4,910 samples/s" in text and "120,000/s" in text
    smoke = analysis.load_run(h200_runs["smoke-cpu-and-gpu1"])
    hs = {(x["workload"], x["mode"]): x for x in analysis.headline(smoke)}
    assert hs[("mlp", "train")]["gpu1_fp32"][1].value > 1
    assert hs[("cnn", "train")]["gpu_not_run"] and analysis.geomean_headline(smoke)[0] is None
    (table,) = [t for t in headline.headline([smoke]) if isinstance(t, Table)]
    cnn = next(r for r in table.rows if r[0].text == "cnn" and r[1].text == "train")
    assert [c.text for c in cnn[2:5]] == ["not run", "not run", "not planned"]
    assert "fastest" not in str(cnn[5].below) and "did not run" in str(cnn[5].below)
    for name, doc in h200_runs.items():
        for x in analysis.headline(analysis.load_run(doc)):
            assert x["samples_per_s"] > 0, name


def test_h200_energy_never_shows_a_mean_above_the_maximum(h200_runs):
    """The smoke GPU windows (0.44-0.61 s, under ten counter steps) take their energy from the instant
    power; no row anywhere has mean W above max W; the power limit is shown beside the max."""
    for name, doc in h200_runs.items():
        for e in (r["extra_info"] for r in storage.records(doc)):
            if e.get("power_mean_w") is not None and e.get("power_max_w") is not None:
                assert e["power_mean_w"] <= e["power_max_w"], (name, e["case_id"])
            if e.get("energy_source") == "counter":
                assert e["telemetry_window_s"] >= 1.0, (name, e["case_id"])
    smoke = [r["extra_info"] for r in storage.records(h200_runs["smoke-cpu-and-gpu1"])]
    gpu = [e for e in smoke if e["device_kind"] == "gpu"]
    assert gpu and all(e["energy_source"].startswith("integrated instant power") for e in gpu)
    html = html_report([h200_runs["smoke-cpu-and-gpu1"]])
    energy = html.split("<h2>Energy and power")[1].split("</table>")[0]
    assert "fewer than ten steps of NVML" in energy and energy.count("not measured (") == 1
    assert '<td class="num">700</td>' in energy  # the enforced power limit


def test_h200_memory_headings_name_the_backends_allocator(h200_runs):
    html = html_report([h200_runs["standard-gpu1"]])
    mem = html.split("<h2>Memory")[1].split("</table>")[0]
    assert "JAX peak_bytes_in_use" in mem and "XLA" in mem and "TensorFlow" not in mem


def test_h200_fp32_mlp_at_the_probe_peak_is_explained_and_flops_are_executed(h200_runs):
    e = next(
        r["extra_info"]
        for r in storage.records(h200_runs["standard-gpu1"])
        if r["extra_info"]["case_id"] == "mlp-train-gpu1-jax-fp32-b1024"
    )
    assert e["flops_per_sample"] == 393_726_904 and e["model_flops_per_sample"] == 427_281_336
    assert e["mfu_measured"] == pytest.approx(0.925, abs=0.005)  # was 1.003 with 3 x forward
    assert "xla_flops_per_device_step" not in e  # XLA's cost analysis misses cuBLAS on GPUs
    html = html_report([h200_runs["standard-gpu1"]])
    eff = html.split("<h2>Compute efficiency")[1].split("</section>")[0]
    assert "probe n=8192" in eff and "executed" in eff and "model FLOPs" in eff
    # a case at the probe's peak is said to be so (doctored to 100.3%, as the old count read)
    doc = copy.deepcopy(h200_runs["standard-gpu1"])
    for r in storage.records(doc):
        if r["extra_info"]["case_id"] == "mlp-train-gpu1-jax-fp32-b1024":
            r["extra_info"]["mfu_measured"] = 1.003
    eff = html_report([doc]).split("<h2>Compute efficiency")[1].split("</section>")[0]
    assert "at the probe&#39;s peak" in eff and "not a ceiling" in eff and "100.3" not in eff


def test_hostile_strings_are_escaped():
    html = html_report([storage.load(HOSTILE)])
    md = markdown_report([storage.load(HOSTILE)])
    assert (
        "<script>" not in html
        and "<img src=x" not in html
        and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    )
    assert "&lt;script&gt;alert(&quot;gpu&quot;)&lt;/script&gt;" in html
    # GitHub renders raw HTML in Markdown (job summaries, PR comments): it must arrive as text
    assert "<script" not in md.lower() and "<img" not in md.lower() and "&lt;script&gt;" in md
    assert "<script" not in html.lower()


def test_two_machines_side_by_side():
    html = html_report([storage.load(GPU8), storage.load(HOSTILE)])
    assert "gpu8-run (dgx-h100, " in html and "hostile-run" in html
    assert html.count("<h2>Environment - ") == 2


def test_markdown_summary_has_headline_and_cases():
    md = markdown_report([storage.load(GPU8)])
    assert md.startswith("# accelbench report")
    assert "| cnn        | train  | cnn-train-gpu8-mixed_float16-b256" in md
    assert "| mlp-train-cpu-tf32-b1024" in md and "unsupported" in md


def test_baseline_self_comparison_is_clean_and_slow_run_regresses():
    base, slow = storage.load(GPU8), storage.load(SLOW)
    assert regressions(base, base, 0.05) == []
    bad = dict(regressions(slow, base, 0.05))
    assert len(bad) == 33 and all(r == pytest.approx(0.8, abs=0.03) for r in bad.values())
    assert regressions(slow, base, 0.25) == []  # a 20% drop is inside a 25% threshold


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_cli_report_fail_on_regression(tmp_path):
    r = cli(
        "report",
        str(GPU8),
        "--baseline",
        str(GPU8),
        "--fail-on-regression",
        "5",
        "--out",
        str(tmp_path / "same"),
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "same" / "index.html").exists() and (tmp_path / "same" / "report.md").exists()
    r = cli(
        "report",
        str(SLOW),
        "--baseline",
        str(GPU8),
        "--fail-on-regression",
        "5",
        "--out",
        str(tmp_path / "slow"),
        cwd=tmp_path,
    )
    assert r.returncode == 1
    assert "regressions beyond 5%: " in r.stderr and "cnn-train-gpu1-fp32-b256 (-20" in r.stderr


def test_different_machine_identities_are_called_out():
    html = html_report([storage.load(HOSTILE)], baseline=storage.load(GPU8))
    assert "The two runs differ in gpus " in html
    # cuDNN alone, or the container image alone, is a difference too
    base, new = storage.load(GPU8), storage.load(SLOW)
    new["machine_info"]["accelbench"]["cudnn_build"] = "9.9.9"
    new["run"]["image_digest"] = "sha256:feed"
    html = html_report([new], baseline=base)
    assert re.search(r"The two runs differ in cudnn [^;]* -&gt; 9.9.9; image_digest None -&gt; sha256:feed", html)


def test_runs_of_different_profiles_are_not_compared(tmp_path):
    """The smoke MLP at batch 64 and the standard MLP at --batch-size 64 share an id, not a model."""
    base, new = storage.load(GPU8), storage.load(SLOW)
    new["run"]["profile"] = "smoke"
    assert regressions(new, base, 0.05) == []
    html = html_report([new], baseline=base)
    assert "profile standard -&gt; smoke" in html and "measure different model sizes" in html
    storage.write_atomic(tmp_path / "smoke.json", new)
    r = cli("report", str(tmp_path / "smoke.json"), "--baseline", str(GPU8), "--fail-on-regression", "5", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "different model sizes" in r.stderr, r.stderr
    # the nightly judge: a profile change starts a new baseline, never an alert
    from bench.history.summarise import new_segment

    assert new_segment({"profile": "standard", "fingerprint_hash": "a"}, {"profile": "smoke", "fingerprint_hash": "a"})
    assert not new_segment({"profile": "smoke", "fingerprint_hash": "a"}, {"profile": "smoke", "fingerprint_hash": "a"})


def test_unknown_schema_version_is_refused(tmp_path):
    d = json.loads(GPU8.read_text())
    d["schema_version"] = 7
    p = tmp_path / "future.json"
    p.write_text(json.dumps(d))
    r = cli("report", str(p), cwd=tmp_path)
    assert (
        r.returncode == 2
        and r.stderr.count("\n") == 1
        and "schema_version 7 is newer" in r.stderr
        and str(p) in r.stderr
    )


def test_render_writes_into_the_folder(tmp_path):
    out = render([storage.load(GPU8)], tmp_path / "r")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "report.md"]


@pytest.mark.browser
@pytest.mark.skipif(
    browser.CHROMIUM is None, reason="no headless Chromium here (Debian package 'chromium'; .ci/run installs it)"
)
def test_report_renders_in_headless_chromium_offline(tmp_path):
    out = render([storage.load(GPU8)], tmp_path / "report")
    dom, fetched = browser.dump_dom(out / "index.html", tmp_path)
    assert dom.count("<table") >= 8 and dom.count("<svg") >= 3
    assert fetched == set()
    shot = tmp_path / "shot" / "report.png"  # never into the working tree
    browser.screenshot(out / "index.html", tmp_path, shot)
    assert shot.stat().st_size > 10_000


CPU = DATA / "cpu_smoke.json"  # a real `nox -s bench -- --profile smoke` on the 2-core development machine


def test_cpu_only_sample_shows_precision_and_unsupported_gpu_cases():
    doc = storage.load(CPU)
    html = html_report([doc])
    assert "mlp-train-cpu-mixed_bfloat16-b64" in html and "no NVIDIA GPU on this machine" in html
    run = analysis.load_run(doc)
    gains = analysis.precision_gains(run).set_index("case_id")["gain"]
    bf16, fp32 = run.samples["mlp-train-cpu-mixed_bfloat16-b64"], run.samples["mlp-train-cpu-fp32-b64"]
    g = gains["mlp-train-cpu-mixed_bfloat16-b64"]
    assert g.value == pytest.approx(float(np.median(bf16)) / float(np.median(fp32)))  # bf16 over fp32, same CPU
    assert g.ci_low <= g.value <= g.ci_high
    assert "No multi-device cases in this run." in html
    both = html_report([doc, storage.load(GPU8)])  # two machines in one report
    assert both.count("<h2>Environment - ") == 2 and "1 GPU, fp32" in both


def _visible_text(html: str) -> str:
    """The report's text a reader sees: tags, the embedded CSV listing and the download link removed."""
    html = re.sub(r"<pre>.*?</pre>|<style>.*?</style>|<title>.*?</title>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", " ", html)


def test_a_cpu_only_report_speaks_to_a_reader_without_a_gpu():
    html = html_report([storage.load(CPU)])
    head = html.split("<h2>Speed-up matrix")[0]
    # no GPU columns of "not measured": one line says what is compared instead
    assert "1 GPU, fp32" not in head and "several GPUs" not in head and "not measured" not in head
    assert "No GPU was measured in this run (no NVIDIA GPU on this machine" in head
    assert "best CPU configuration vs CPU fp32" in head
    # CPU fp32 itself the fastest: no CI of the baseline against itself
    row = re.search(r"<td>cnn</td><td>train</td>(.*?)</tr>", head, flags=re.S).group(1)
    assert "1x (baseline)" in row and "CPU fp32 itself is the fastest" in row and "[" not in row
    # numbers for people: 3 significant digits, separators, no scientific notation anywhere shown
    text = _visible_text(html)
    assert not re.search(r"\d[eE][+-]\d", text), re.search(r".{40}\d[eE][+-]\d.{20}", text)
    assert "37,900 samples/s" in text  # mlp-train-cpu-mixed_bfloat16-b64: 37,943.4 samples/s
    # the matrix leaves out configurations where nothing ran, and says so
    matrix = html.split("<h2>Speed-up matrix")[1].split("<h2>")[0]
    table, left_out = matrix.split("Left out, every case unsupported: ")
    assert "gpu1" not in table and "cpu1 mixed_bfloat16" in table
    assert "gpu1 fp32" in left_out.split("</p>")[0]
    # unsupported cases grouped by reason, as on the console
    unsup = html.split("<h2>Unsupported and failed cases")[1].split("<h2>")[0]
    assert unsup.count("<tr>") == 1 + 3  # header + the 3 reasons of the 36 cases
    assert re.search(r'<td class="num">24</td><td>[^<]*GPU', unsup)


def test_numbers_for_people():
    from bench.report.numbers import human

    cases = [(43107.3, "43,100"), (527.7, "528"), (1.0873, "1.09"), (0.00123456, "0.00123"), (999.7, "1,000")]
    cases += [(115842, "116,000"), (None, "-"), (float("nan"), "-"), (0, "0"), (-1234.5, "-1,230")]
    for v, text in cases:
        assert human(v) == text, v


def test_datasheet_peaks_match_gpu_names_exactly():
    from bench.report.peaks import datasheet_tflops

    assert datasheet_tflops("NVIDIA H200", "mixed_bfloat16") == 989.4
    assert datasheet_tflops("NVIDIA H200 NVL", "mixed_bfloat16") is None  # another part, not a prefix match
    assert datasheet_tflops("NVIDIA A100-SXM4-40GB", "tf32") == 156
    assert datasheet_tflops(None, "fp32") is None


def test_console_sums_up_unsupported_cases_in_one_line_per_reason():
    text = console.table(analysis.load_run(storage.load(CPU)))
    assert "mlp-train-gpu1-fp32-b64" not in text.split("unsupported:")[0]  # no row per GPU case
    lines = [ln for ln in text.splitlines() if ln.startswith("unsupported: ")]
    assert len(lines) == 3 and any("24 cases" in ln and "no NVIDIA GPU" in ln for ln in lines)


def test_cost_per_million_samples_and_the_cheapest_configuration(tmp_path):
    from bench.report import cost

    prices = tmp_path / "p.toml"
    prices.write_text('kwh = 0.30\n[device_hour]\ncpu = 0.50\ngpu = 2.00\n"NVIDIA H100 80GB HBM3" = 3.60\n')
    p = cost.load(prices)
    # 1 H100 at 3.60/h and 1000 samples/s: 1e6 samples take 1000 s = 1.00; plus 0.5 J/sample at 0.30/kWh
    c = cost.per_million(p, "gpu", 1, False, 1000.0, 0.5, "NVIDIA H100 80GB HBM3")
    assert c.per_million == pytest.approx(1.0 + 0.3 * 0.5 * 1e6 / 3.6e6) and c.energy_included
    # 4 virtual devices are one chip; an unlisted model takes the 'gpu' price; no energy: device-hours only
    v = cost.per_million(p, "gpu", 4, True, 1000.0, None, "other")
    assert v.per_million == pytest.approx(2.0 / 3.6) and not v.energy_included
    assert (
        cost.per_million(cost.Prices({"gpu": 1.0}), "cpu", 1, False, 1000.0, None) is None
    )  # no price: no cost, never 0
    html = html_report([storage.load(GPU8)], prices=p)
    assert "Cost per million samples" in html and "Cheapest per sample: cnn train: " in html
    md = markdown_report([storage.load(GPU8)], prices=p)
    assert "## Cheapest per sample" in md


def test_scaling_chart_plots_speedup_over_one_device_so_small_workloads_show(gpu8_html):
    assert "speed-up over 1 device" in gpu8_html and "ideal (linear)" in gpu8_html


def test_a_busy_case_is_flagged_in_the_console_and_the_report():
    doc = storage.load(CPU)
    busy = doc["benchmarks"][0]["extra_info"]
    busy.update(other_cpu_pct=32.8, other_gpu_processes=None, busy=True)
    quiet = doc["benchmarks"][1]["extra_info"]
    quiet.update(other_cpu_pct=3.0, busy=False)
    run = analysis.load_run(doc)
    lines = {ln.split()[0]: ln for ln in console.table(run).splitlines()[2:] if ln.strip()}
    assert "busy: other processes used 33% of the CPU" in lines[busy["case_id"]]
    assert "busy" not in lines[quiet["case_id"]]
    html = html_report([doc])
    assert "1 case ran on a busy machine" in html and "(up to 33% of the CPU)" in html
    assert re.search(re.escape(busy["case_id"]) + r' <span class="warn">[^<]*busy</span>', html)


def test_a_cluster_case_counts_every_node_in_datasheet_share_and_cost(tmp_path):
    from bench.report import cost
    from bench.report.render import cost_rows

    doc = storage.load(GPU8)
    one = next(r for r in doc["benchmarks"] if r["extra_info"]["case_id"] == "mlp-train-gpu8-tf32-b1024")
    two = json.loads(json.dumps(one))
    two["extra_info"].update(nodes=2, case_id="mlp-train-gpu8x2nodes-tf32-b1024")
    doc["benchmarks"].append(two)
    for r in (one, two):
        r["extra_info"]["energy_j_per_sample"] = None  # device-hours only: the count of chips alone
    prices = tmp_path / "p.toml"
    prices.write_text("[device_hour]\ncpu = 0.50\ngpu = 2.00\n")
    rows, _ = cost_rows(analysis.load_run(doc), cost.load(prices))
    by = {o["case_id"]: o["cost"].per_million for o in rows}
    # the same throughput from 16 GPUs on two nodes costs twice the device-hours of 8 GPUs on one
    assert by["mlp-train-gpu8x2nodes-tf32-b1024"] == pytest.approx(2 * by["mlp-train-gpu8-tf32-b1024"])
    html = html_report([doc])
    eff = html.split("<h2>Compute efficiency")[1].split("</table>")[0]

    def datasheet_pct(cid):
        return float(
            re.search(rf"<td>{cid}</td>(?:<td[^>]*>.*?</td>){{4}}<td class=\"num\">([\d.]+)</td>", eff).group(1)
        )

    assert datasheet_pct("mlp-train-gpu8x2nodes-tf32-b1024") == pytest.approx(
        datasheet_pct("mlp-train-gpu8-tf32-b1024") / 2, rel=0.02
    )


def test_a_gpu_a_backend_cannot_use_is_said_at_the_top(h200_runs):
    """NVML saw the H200; had JAX not, the report's first section says why, not only `accelbench devices`."""
    doc = copy.deepcopy(h200_runs["standard-gpu1"])
    why = "NVML sees 1 GPU(s) but JAX found none (no GPU platform); pip install 'accelbench[jax-cuda]'"
    doc["machine_info"]["accelbench"]["jax_no_gpu_reason"] = why
    head = html_report([doc]).split("<h2>Speed-up matrix")[0]
    assert "GPU not used: NVML sees 1 GPU(s) but JAX found none" in head
    assert "GPU not used" not in html_report([h200_runs["standard-gpu1"]])


def test_an_incomplete_run_says_so_lists_what_did_not_run_and_names_its_toy_models(h200_runs):
    """review-1 findings 1-3: the smoke H200 run stopped with 14 GPU cases unrecorded."""
    html = html_report([h200_runs["smoke-cpu-and-gpu1"]])
    assert "14 planned, not run" in html and "14 of its 36 planned cases have no record" in html
    failed = html.split("<h2>Unsupported and failed cases")[1]
    assert failed.count("-gpu1-jax-") >= 14 and "Every" not in failed.split("<h2>")[0]
    assert "399,370" in html and "toy sizes: checks the machinery, not for conclusions" in html
    head = html.split("<h2>Speed-up matrix")[0]
    assert "fastest" not in head and "geometric mean" in head and "not given: planned cases did not run" in head
    matrix = html.split("<h2>Speed-up matrix")[1].split("</table>")[0]
    assert matrix.count("not run") >= 12  # the cnn and transformer GPU cells


def test_a_report_over_smoke_and_standard_keeps_the_toys_out_of_headline_and_precision_advice(h200_runs):
    docs = [h200_runs[k] for k in ("smoke-cpu-and-gpu1", "standard-gpu1", "tenants-mix")]
    html = html_report(docs)
    head = html.split("<h3>Models and sizes")[0]
    assert "10.8x" not in head and "Left out of the headline: toy sizes" in head
    assert "smoke profile)" in html and "standard profile)" in html  # every run-labelled section says its profile
    gains = [s.split("</table>")[0] for s in html.split("<h2>Precision gains")[1:]]
    assert "0.933x" not in gains[0] and "Not given for the smoke profile" in gains[0]
    assert "ResNet-50 v1.5" in html and "71,222,248" in html


def test_jax_runs_are_not_told_to_use_xla_both_and_published_figures_have_values(h200_runs):
    html = html_report([h200_runs["standard-gpu1"]])
    assert "--xla both" not in html and "JAX always compiles the whole step with XLA" in html
    published = html.split("<h2>Against published figures")[1].split("<h2>")[0]
    assert "3,079 img/s" in published and "2,259 img/s" in published
    gains = html.split("<h2>Precision gains")[1].split("</table>")[0]
    assert "cnn-train-gpu1-jax-fp32-b64" not in gains  # excluded with -k: never planned, no row


def test_the_default_cpu_runs_serve_cases_each_get_one_honest_outcome():
    """review-1 findings 4-7 on the default CPU run: measured and missed is slo_missed, never unsupported;
    untried is "not tested"; every capacity is batch / service time of a batch shown, within the SLO."""
    doc = storage.load(DATA / "cpu_default_run.json")
    serve = [r["extra_info"] for r in storage.records(doc) if r["extra_info"]["mode"] == "serve"]
    measured = [e for e in serve if e.get("service_ms")]
    assert len(measured) == 6
    for e in measured:
        assert e["status"] in ("ok", "slo_missed") or e["reason"].startswith("not tested"), e["case_id"]
        b = int(e["capacity_batch"])
        ms = e["service_ms"][str(b)]
        assert e["capacity_rate"] == pytest.approx(b / ms * 1e3)
        assert ms <= e["slo_ms"] or b == 1
    missed = {e["case_id"] for e in serve if e["status"] == "slo_missed"}
    assert "mlp-serve-cpu-fp32-b1024-slo10ms" in missed and "mlp-serve-cpu-mixed_bfloat16-b1024-slo10ms" in missed
    html = html_report([doc])
    assert "measured, SLO missed" in html
    serving = html.split("<h2>Serving")[1].split("<h2>")[0]
    assert "3,330" not in serving and "1 trial(s) at 167-167 req/s" in serving and "not tested" in serving
    assert serving.count("<svg") == 1  # the mlp chart; none for the untried transformer
    head = html.split("<h2>Speed-up matrix")[0]
    assert "serve" not in head.split("Serve cases are not in this table")[0]  # serve rows out of the headline


def test_the_mix_rate_is_a_median_and_unstable_baselines_are_flagged_where_their_ratios_appear(h200_runs):
    """review-1 findings 9, 12, 17."""
    mix = next(r["extra_info"] for r in storage.records(h200_runs["tenants-mix"]) if r["extra_info"].get("neighbour"))
    assert mix["samples_per_s"] == pytest.approx(1 / 0.3687e-3, rel=0.01)  # 2,712/s, not 1 / mean latency (2,616)
    html = html_report([h200_runs["smoke-cpu-and-gpu1"]])
    matrix = html.split("<h2>Speed-up matrix")[1].split("</table>")[0]
    cell = re.search(r'title="cnn-infer-cpu-jax-mixed_bfloat16-b16"[^>]*>(.*?)</td>', matrix).group(1)
    assert "unstable" in cell  # its baseline, cnn-infer-cpu-jax-fp32-b16, has a CV of 12.3%
    cpu = analysis.load_run(storage.load(DATA / "cpu_default_run.json"))
    rows = analysis.headline(cpu)
    assert all(h["mode"] != "serve" for h in rows)
    gm, scope = analysis.geomean_headline(cpu)
    vals = [h["speedup"].value for h in rows]
    assert gm == pytest.approx(float(np.exp(np.mean(np.log(vals))))) and "all on the CPU" in scope


def test_the_mix_shows_its_sharing_mode_memory_and_why_there_is_no_stp(h200_runs):
    """review-1 finding 9: the mode was only in report.md, the recorded tenant memory showed as "-"."""
    html = html_report([h200_runs["tenants-mix"]])
    sharing = html.split("<h2>Sharing one device")[1].split("<h2>")[0]
    assert "time-slicing" in sharing and "mlp-train-gpu1-jax-fp32-b64-t2 planned, not run" in sharing
    memory = html.split("<h2>Memory")[1].split("</table>")[0]
    assert '<td class="num">1566</td>' in memory  # 719 + 923 MB that NVML listed for the two tenants


def test_the_mix_sets_its_neighbours_rate_beside_the_same_case_alone(h200_runs):
    """review-1 finding 9: "neighbour 369,000 samples/s" had no alone figure beside it. Where the run has the
    neighbour's own case measured alone (here the smoke run's, copied into the mix run), it is shown with the ratio."""
    doc = copy.deepcopy(h200_runs["tenants-mix"])
    smoke = h200_runs["smoke-cpu-and-gpu1"]
    (alone,) = [r for r in storage.records(smoke) if r["extra_info"]["case_id"] == "mlp-train-gpu1-jax-fp32-b64"]
    storage.add_record(doc, copy.deepcopy(alone))
    mix = next(r["extra_info"] for r in storage.records(doc) if r["extra_info"].get("neighbour"))
    ratio = mix["neighbour_samples_per_s"] / alone["extra_info"]["samples_per_s"]
    sharing = html_report([doc]).split("<h2>Sharing one device")[1].split("<h2>")[0]
    assert f"({ratio:.2f}x)" in sharing and "alone 541,000" in sharing
    # without it, the rate stands alone as before (never a ratio against a case the run did not measure)
    assert "alone 541,000" not in html_report([h200_runs["tenants-mix"]]).split("<h2>Sharing one device")[1]


def test_the_serve_chart_names_its_p50_lines_in_the_legend():
    """review-1 finding 18: the p50 points had no legend entry."""
    from bench.report import charts

    svg = charts.latency_vs_rate({"mlp b64": [(100.0, 1.0, 2.0), (200.0, 1.5, 3.0)]}, 10.0, {"mlp b64": 200.0}, "t")
    assert "mlp b64 p50" in svg and "mlp b64 p99" in svg
    none = charts.latency_vs_rate({"mlp b64": [(100.0, None, 2.0)]}, 10.0, {"mlp b64": None}, "t")
    assert "mlp b64 p50" not in none  # no legend entry for a line that is not drawn


def test_every_backend_of_a_real_run_side_by_side_with_ci_and_the_ratios_against_tensorflow(tmp_path):
    """issue 27: --backend all on the CPU (TensorFlow, JAX, Keras on torch, native PyTorch; eager and compiled)."""
    doc = storage.load(DATA / "cpu_backends.json")
    out = render([doc], tmp_path / "r")
    page = (out / "index.html").read_text()
    section = page[page.index("Backends side by side") : page.index("Model vs data parallel")]
    for head in ("TensorFlow XLA samples/s", "JAX samples/s", "Keras on torch torch.compile samples/s"):
        assert head in section
    row = section[section.index("<td>mlp-train-cpu-fp32-b64") :].split("</tr>", 1)[0]
    assert row.count("[") == 7  # a median with its CI in each of the seven columns
    assert "native PyTorch / Keras on torch" in section and "Keras on torch / TensorFlow XLA" in section
    md = (out / "report.md").read_text()
    assert "## Backends side by side" in md and "mlp-train-cpu-torch-native-fp32-b64" in md


def test_a_percentile_its_samples_cannot_resolve_is_not_shown():
    # the real default CPU run: ResNet-50 inference's p99 from 10 latency samples, the batch-1 MLP's from 100
    doc = storage.load(DATA / "cpu_default_run.json")
    ok = {r["extra_info"]["case_id"]: r["extra_info"] for r in storage.records(doc)}
    assert (
        ok["cnn-infer-cpu-fp32-b64"]["latency_samples"] == 10 and ok["mlp-infer-cpu-fp32-b1"]["latency_samples"] == 100
    )
    table = html_report([doc]).split("<h2>Throughput")[1].split("</table>")[0]

    def cells(case_id):
        row = re.search(rf"{re.escape(case_id)}</td>(.*?)</tr>", table, flags=re.S).group(1)
        return re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)

    few, hundred = cells("cnn-infer-cpu-fp32-b64"), cells("mlp-infer-cpu-fp32-b1")
    p99_ms = 1e3 * ok["mlp-infer-cpu-fp32-b1"]["latency_p99_s"]
    assert few[-1].strip().endswith("/ -") and re.match(r"[\d.,]+ / [\d.,]+$", hundred[-1].strip())
    assert f"{p99_ms:.3g}".rstrip("0").rstrip(".") in hundred[-1]
    assert few[4].strip() == "-" and ok["cnn-infer-cpu-fp32-b64"]["rounds"] < 10  # step ms p90 of 6 rounds
    after = html_report([doc]).split("<h2>Throughput")[1].split("<h2>")[0].split("</table>")[1]
    assert (
        "latency p99 from 100 latency samples or more" in after
        and "a p99 of 10 samples estimates about the p91" in after
    )
