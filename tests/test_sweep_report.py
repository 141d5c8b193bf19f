"""A real CPU batch sweep's report (tests/data/cpu_sweep.json, the issue's own command): the sweep section,
its crossover, the Markdown, the console and the CSV, read the way users read them."""

import sys

import pandas as pd
import pytest
from conftest import DATA

from bench import storage

sys.path.insert(0, str(DATA))
import make_samples  # noqa: E402

from bench.report import analysis, console, roofline, sweeps
from bench.report.render import html_report, markdown_report

BATCHES = [1, 4, 16, 64, 256]


@pytest.fixture(scope="module")
def doc():
    return storage.load(DATA / "cpu_sweep.json")


def test_the_sweep_run_has_one_case_per_point_and_the_csv_a_row_per_point_with_knob_columns(doc, tmp_path):
    df = pd.DataFrame(storage.tidy_rows(doc), columns=storage.COLUMNS)
    measured = df[df["status"] == "ok"]
    for (mode, precision), g in measured.groupby(["mode", "precision"]):
        assert sorted(g["per_replica_batch"]) == BATCHES, (mode, precision)
    assert measured["size_width"].eq(512).all() and measured["size_depth"].eq(2).all()
    assert doc["run"]["options"]["sweeps"] == ["batch=1,4,16,64,256"]


def test_the_crossover_of_bf16_over_fp32_is_stated_with_its_bracket_or_as_none(doc):
    run = analysis.load_run(doc)
    rows = sweeps.rows(run)
    pairs = {(a.parts["mode"], a.parts["precision"], b.parts["precision"]) for _, a, b, _ in rows}
    assert pairs == {("train", "mixed_bfloat16", "fp32"), ("infer", "mixed_bfloat16", "fp32")}
    for _, a, b, x in rows:
        assert list(x.xs) == BATCHES and len(x.ratios) == len(BATCHES)
        text = x.sentence(a.label, b.label, "batch")
        if x.verdict == "crossover":  # a bracket, and the estimate inside it
            assert x.low < x.high and "bracket" in text and x.low <= x.estimate <= x.high
        assert text and "energy" not in text
        assert sweeps.energy(a, b, "batch").startswith("unavailable: ")  # no RAPL on this VM: never guessed


def test_the_report_shows_throughput_against_batch_and_the_crossovers_everywhere(doc):
    run = analysis.load_run(doc)
    html = html_report([doc])
    assert "Sweeps: where one configuration starts to pay" in html and html.count("samples/s against batch") >= 2
    assert 'aria-label="mlp train (profile size): samples/s against batch' in html
    for _, a, b, x in sweeps.rows(run):
        assert x.sentence(a.label, b.label, "batch").split(" (")[0].replace("<", "&lt;").replace(">", "&gt;") in html
    md = markdown_report([doc])
    assert "## Crossovers along the swept axes" in md and "cpu mixed_bfloat16 vs cpu fp32" in md
    text = console.table(run)
    assert text.count("\ncrossover: mlp ") == 2


def test_a_full_grid_draws_a_heat_map_of_the_gpu_over_the_cpu_and_finds_each_width_s_crossover():
    doc = make_samples.gpu_shaped_grid()
    run = analysis.load_run(doc)
    ((title, xs, ys, cells),) = sweeps.heatmaps(run)
    assert title == "mlp train: gpu1 fp32 / cpu fp32" and xs == [1, 16, 256, 4096] and ys == [256, 1024]
    assert cells[(1, 256)][0] < 1 < cells[(4096, 256)][0] and not cells[(4096, 1024)][1]  # clear of 1: not hatched
    html = html_report([doc])
    assert 'aria-label="mlp train: gpu1 fp32 / cpu fp32: width ' in html and "width 256, batch 1: " in html
    assert "log2 of the ratio" in html
    found = {a.group[2]: x for _, a, b, x in sweeps.rows(run) if a.parts["device"] == "gpu1" and _ == "batch"}
    for knobs, x in found.items():  # true crossings: 97 at width 256, 24 at 1024 (the CPU's c four times larger)
        true = (2e-3 - 1e-4) / (20e-6 * dict(knobs)["width"] / 256 - 0.5e-6)
        assert x.verdict == "crossover" and x.low < true < x.high, (knobs, x)
    assert len(found) == 2


def test_the_largest_batch_search_is_a_table_and_each_line_s_out_of_memory_wall_on_its_chart():
    doc = make_samples.gpu_shaped_grid()  # asked at max too: every configuration's search is in the options
    run = analysis.load_run(doc)
    found = {e.case: e for e in sweeps.largest(run)}
    assert len(found) == 4 and {e.safe for e in found.values()} == {4096}
    gpu = found["mlp-width1024-train-gpu1-fp32"]
    assert (gpu.max_ok, gpu.first_fail) == (4096, 5120)
    html = html_report([doc])
    assert 'aria-label="Largest batch that fits: largest batches"' in html
    assert html.count("out of memory at batch ") == 4  # each batch line's chart alt text names its wall
    assert "gpu1 fp32: batch 1 " in html and "out of memory at batch 6656" in html
    md = markdown_report([doc])
    assert "## Largest batch that fits" in md and "|               6144 |            6656 |          4096 |" in md
    lines = [t for t in console.table(run).splitlines() if t.startswith("largest batch: ")]
    assert len(lines) == 4 and all("measured at 4096 (largest that fits" in t for t in lines)


def test_a_run_asked_at_no_max_has_no_largest_batch_section(doc):
    assert sweeps.largest(analysis.load_run(doc)) == []
    assert "Largest batch that fits" not in html_report([doc]) and "Largest batch" not in markdown_report([doc])


def test_the_roofline_sets_each_point_under_the_measured_roofs_and_states_its_share_of_peak():
    doc = make_samples.gpu_shaped_grid()  # roofs: GPU 50 TFLOP/s and 3000 GB/s, CPU 2 TFLOP/s and 100 GB/s
    run = analysis.load_run(doc)
    charts = {title: (points, peaks, bw) for title, points, peaks, bw in roofline.charts_of(run)}
    assert len(charts) == 4  # each width on each device
    points, peaks, bw = charts["mlp train (width 256) on gpu1: roofline"]
    assert peaks == {"gpu1 fp32": 50.0} and bw == 3000.0
    pts = points["gpu1 fp32"]
    assert [b for _, _, b in pts] == [1, 16, 256, 4096]
    for intensity, tflops, b in pts:  # a step's 2e7 x b FLOPs over 1e6 fp32 weights; achieved from the median
        assert intensity == pytest.approx(2e7 * b / 4e6)
        assert tflops == pytest.approx(2e7 * b / (2e-3 + 0.5e-6 * b) / 1e12, rel=0.05)
        assert tflops < min(50.0, 3000.0 * intensity / 1e3)  # under both roofs
    rows = {(r[0], r[1]): r for r in roofline.rows(run)}
    gpu = rows[("mlp train (width 256)", "gpu1 fp32")]
    assert gpu[2:5] == ["50.0", "3,000", "16.7"]  # the ridge: 50 TFLOP/s over 3000 GB/s, in FLOP per byte
    shares = dict(s.split(":") for s in gpu[5].split())
    assert float(shares["4096"].rstrip("%")) == pytest.approx(100 * pts[-1][1] / 50.0, rel=1e-2)
    assert roofline._share(1.5) == "150%!" and roofline._share(None) == "-"  # above its roof: a count is off
    html = html_report([doc])
    assert 'aria-label="mlp train (width 256) on gpu1: roofline: gpu1 fp32: batch 1 ' in html
    assert "measured peak 50.0 TFLOP/s; bandwidth roof 3,000 GB/s" in html and "weight intensity" in html
    md = markdown_report([doc])
    assert "## Share of the measured peak along batch" in md and "| mlp train (width 256)  | gpu1 fp32 " in md
    lines = [t for t in console.table(run).splitlines() if t.startswith("share of the measured peak: ")]
    assert len(lines) == 4 and any(
        t.startswith("share of the measured peak: mlp train (width 256) gpu1 fp32: 1:") for t in lines
    )


def test_where_no_copy_probe_ran_the_roofline_has_no_memory_roof_and_says_so(doc):
    run = analysis.load_run(doc)  # an earlier run: matmul peaks recorded, no copy probe
    found = roofline.charts_of(run)
    assert found and all(bw is None and peaks for _, _, peaks, bw in found)
    assert all(r[3] == "-" and r[4] == "-" for r in roofline.rows(run))
    assert "bandwidth roof" not in html_report([doc])
