"""Self-contained HTML report and Markdown summary from results documents.

HTML goes through Jinja2 templates with autoescaping (``bench/templates``, the base layout shared
with the site): GPU and CPU names, host names, case labels and reasons are untrusted. The
Markdown report escapes them too (``mdtext.md``). Nothing is fetched: inline CSS, inline SVG, the
data embedded as CSV. Failed and unsupported cases never plot as zero.
"""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from bench import __version__, stats, storage
from bench.fingerprint import describe_differences, machine_fingerprint
from bench.report import analysis, compare, headline, reference, resources, roofline, sections, serving, sharing, sweeps
from bench.report import cost as costs
from bench.report.analysis import RunData, fmt_ratio
from bench.report.html import Cell, Para, Section, Table, unique_svg_ids
from bench.report.html import render as render_template
from bench.report.mdtext import md
from bench.report.numbers import human, p_value
from bench.report.resources import cost_rows  # noqa: F401  (callers and tests import it from here)


def machine_line(doc: dict) -> str:
    """CPU, GPUs, TensorFlow, host in one line (plain text; escape before use)."""
    mi = doc.get("machine_info", {})
    ab = mi.get("accelbench", {})
    cpu = ab.get("cpu", {})
    names: dict[str, int] = {}
    for g in ab.get("gpus", []):
        names[g.get("name", "?")] = names.get(g.get("name", "?"), 0) + 1
    gtxt = ", ".join(f"{n}x {k}" for k, n in names.items()) or "no GPU"
    fw = [f"TensorFlow {ab['tensorflow']}, Keras {ab.get('keras', '?')}"] if ab.get("tensorflow") else []
    if ab.get("jax"):
        fw.append(f"JAX {ab['jax']} (Keras {ab.get('jax_keras', '?')})")
    if ab.get("torch"):
        fw.append(f"torch {ab['torch']} (Keras {ab.get('torch_keras', '?')})")
    return (
        f"{mi.get('node', '?')}: {cpu.get('model', '?')} ({cpu.get('logical_cores', '?')} cores), {gtxt}; "
        f"{', '.join(fw) or 'TensorFlow ?'}, driver {ab.get('driver_version') or '-'}"
    )


def identity_differences(doc: dict, base: dict) -> list[str]:
    """What differs between two runs' machines and software (the history's fingerprint), and their profiles."""
    out = describe_differences(machine_fingerprint(doc), machine_fingerprint(base))
    pa, pb = doc.get("run", {}).get("profile"), base.get("run", {}).get("profile")
    if pa != pb:
        out.append(f"profile {pb} -> {pa}")
    return out


def cluster_line(run: RunData) -> str | None:
    """``cluster: 2 workers (tf_config) on 127.0.0.1, all-reduce CollectiveAllReduce/RING`` for a cluster run."""
    c = run.doc.get("run", {}).get("cluster")
    if not c:
        return None
    hosts = sorted({str(w).rsplit(":", 1)[0] for w in c.get("workers", [])})
    reduces = sorted({str(x) for x in run.table["all_reduce"].dropna()}) if "all_reduce" in run.table else []
    return (
        f"cluster: {c.get('world')} workers, one per node ({c.get('launcher')}), on {', '.join(hosts)}; "
        f"all-reduce {', '.join(reduces) or '-'}; interconnect not measured"
    )


def _baseline(run: RunData, base: dict, threshold: float) -> list:
    blocks: list = []
    diff = identity_differences(run.doc, base)
    if diff:
        blocks.append(
            Para(
                f"The two runs differ in {'; '.join(diff)}: {machine_line(base)} vs {machine_line(run.doc)}.",
                cls="warn",
            )
        )
    if not same_profile(run.doc, base):
        return [
            *blocks,
            Para(
                "Runs of different profiles measure different model sizes under the same case ids: not compared.",
                cls="na",
            ),
        ]
    rows = [
        [
            cid,
            Cell(fmt_ratio(c.ratio), cls="num"),
            Cell(p_value(c.p_value), cls="num"),
            Cell(c.verdict, cls="warn" if c.verdict == "regressed" else ""),
        ]
        for cid, c in changes(run.doc, base, threshold)
    ]
    if not rows:
        return [*blocks, Para("No case was measured in both runs.", cls="na")]
    headers = ["case", "new / baseline [95% CI]", "Mann-Whitney p", f"verdict (threshold {threshold:.0%}, p < 0.01)"]
    return [*blocks, Table(headers, rows)]


def same_profile(doc: dict, base: dict) -> bool:
    """The profile sizes the models: the smoke MLP at batch 64 is not the standard MLP at batch 64."""
    return doc.get("run", {}).get("profile") == base.get("run", {}).get("profile")


def changes(doc: dict, base: dict, threshold: float) -> list[tuple[str, stats.Change]]:
    """Per case measured in both runs of one profile: the change of throughput against the baseline (rule 26)."""
    if not same_profile(doc, base):
        return []
    new, old = analysis.load_run(doc), analysis.load_run(base)
    out = []
    for cid, s in new.samples.items():
        if s and old.samples.get(cid):
            out.append((cid, stats.compare(old.samples[cid], s, threshold=threshold)))
    return out


def regressions(doc: dict, base: dict, threshold: float) -> list[tuple[str, float]]:
    """(case id, ratio) of every case flagged as regressed."""
    return [(cid, c.ratio.value) for cid, c in changes(doc, base, threshold) if c.verdict == "regressed"]


def xla_missing(run: analysis.RunData) -> str:
    """Why the compile table is empty: JAX always compiles; TensorFlow or torch ran one setting only."""
    if not (run.table["backend"] != "jax").any():
        return "JAX always compiles the whole step with XLA: there is no XLA-off case to compare with."
    return "TensorFlow's XLA (or torch.compile) on and off did not both run (use --xla both)."


def run_label(doc: dict) -> str:
    """``<run id> (<node>, <profile> profile)``: every section of a report over several runs says both."""
    node = doc.get("machine_info", {}).get("node", "?")
    return f"{doc['run']['id']} ({node}, {doc['run'].get('profile') or '?'} profile)"


INCOMPLETE = {
    "running": "is still running, or was killed without a word",
    "interrupted": "was interrupted",
}


def html_report(
    docs: list[dict],
    baseline: dict | None = None,
    threshold: float = 0.05,
    prices: costs.Prices | None = None,
    back: str | None = None,
) -> str:
    """The whole report as one HTML string (``back``: a link up to the site, for nightly copies)."""
    runs = [analysis.load_run(d, run_label(d)) for d in docs]
    heads = []
    for run in runs:
        counts = analysis.status_counts(run)
        heads.append(
            {
                "label": run.label,
                "machine": machine_line(run.doc),
                "ok": counts.get("ok", 0),
                "unsupported": counts.get("unsupported", 0),
                "slo_missed": counts.get("slo_missed", 0),
                "skipped": counts.get("skipped", 0),
                "failed": sum(v for k, v in counts.items() if k not in storage.NOT_FAILED),
                "status": run.doc["run"].get("status"),
                "not_run": len(analysis.not_run(run)),
                "planned": len(run.doc["run"].get("planned") or []),
                "incomplete": INCOMPLETE.get(str(run.doc["run"].get("status")), "")
                if run.doc["run"].get("status") != "complete"
                else "",
                "profile": run.doc["run"].get("profile"),
                "cluster": cluster_line(run),
            }
        )
    pool = {
        cid: smp for r in runs for cid, smp in r.samples.items()
    }  # a cluster run's 1-device baseline may sit in another file
    parts = [
        Section("Headline: best configuration vs CPU fp32", headline.headline(runs)),
        Section("Models and sizes", headline.models(runs), level=3),
    ]
    larger = any(not headline.toy(r) for r in runs)
    for run in runs:
        sfx = f" - {run.label}" if len(runs) > 1 else ""
        parts += [
            Section(f"Speed-up matrix (vs CPU fp32, same workload, mode and batch){sfx}", sections.matrix(run)),
            Section(f"Throughput{sfx}", sections.throughput(run)),
            Section(
                f"Serving: capacity at the latency SLO{sfx}",
                serving.capacity(run, prices, resources.gpu_name(run.doc)),
            ),
            Section(f"Multi-device and multi-node scaling{sfx}", sections.scaling(run, pool)),
        ]
        if sweeps.axes(run):  # only a run with --sweep
            blocks = sweeps.section(run) + roofline.section(run)
            parts.append(Section(f"Sweeps: where one configuration starts to pay{sfx}", blocks))
        if sweeps.largest(run):  # only a run with a case asked at max
            parts.append(Section(f"Largest batch that fits{sfx}", sweeps.largest_section(run)))
        if sharing.planned(run.doc):  # only a run with --tenants
            parts.append(Section(f"Sharing one device{sfx}", sharing.section(run)))
        parts += [
            Section(
                f"Precision gains (vs fp32 on the same devices){sfx}",
                [Para(f"Not given for the smoke profile beside a larger one: {headline.TOY}.", cls="na")]
                if headline.toy(run) and larger
                else sections.gains(analysis.precision_gains(run), "No mixed-precision or TF32 case was measured."),
            ),
            Section(
                f"Compiled vs not: TensorFlow XLA, torch.compile{sfx}",
                sections.gains(analysis.xla_gains(run), xla_missing(run)),
                level=3,
            ),
            Section(f"Backends side by side{sfx}", compare.backends(run, pool)),
            Section(f"Model vs data parallel{sfx}", compare.parallelism(run), level=3),
            Section(f"Energy and power{sfx}", resources.energy(run)),
            Section(f"Memory{sfx}", resources.memory(run)),
            Section(f"Compute efficiency{sfx}", resources.efficiency(run)),
        ]
        if headline.gpu_measured(run):  # a CPU-only run has nothing to hold against GPU figures
            parts.append(Section(f"Against published figures{sfx}", reference.section(run.doc, run.table)))
        if prices is not None:
            parts.append(Section(f"Cost per million samples{sfx}", resources.cost(run, prices)))
        parts.append(Section(f"Unsupported and failed cases{sfx}", sections.failed(run)))
        if baseline is not None:
            parts.append(
                Section(f"Against the baseline {baseline['run']['id']}{sfx}", _baseline(run, baseline, threshold))
            )
    parts.append(Section("Method", [], method=True))
    for run in runs:
        parts += [
            Section(f"Environment - {run.label}", [resources.environment(run.doc)]),
            Section(f"Data - {run.label}", [resources.data(run)]),
        ]
    return unique_svg_ids(
        render_template(
            "report.html", run_id=runs[0].run_id, runs=heads, sections=parts, version=__version__, back=back
        )
    )


def markdown_report(
    docs: list[dict], baseline: dict | None = None, threshold: float = 0.05, prices: costs.Prices | None = None
) -> str:
    """Headline and speed-up table, sized for a CI job summary or a PR comment; text from results escaped."""
    out = ["# accelbench report", ""]
    for d in docs:
        run = analysis.load_run(d)
        counts = analysis.status_counts(run)
        out += [
            f"**{md(run.run_id)}**: {md(machine_line(d))}  ",
            "cases: " + ", ".join(f"{v} {md(k)}" for k, v in counts.items()),
            "",
        ]
        hl = [
            [
                md(h["workload"]),
                md(h["mode"]),
                md(h["best_case"]),
                human(h["samples_per_s"]),
                headline.headline_text(h),
            ]
            for h in analysis.headline(run)
        ]
        out += ["## Headline", ""]
        if not headline.gpu_measured(run):
            out += ["No GPU was measured in this run: the best CPU configuration against CPU fp32.", ""]
        out += [
            tabulate(hl, headers=["workload", "mode", "best case", "samples/s", "vs CPU fp32"], tablefmt="github"),
            "",
        ]
        if prices is not None:
            _, cheapest = resources.cost_rows(run, prices)
            out += [
                "## Cheapest per sample",
                "",
                *[
                    f"- {md(w)} {md(m)}: {md(o['case_id'])}, {human(o['cost'].per_million)} {md(prices.currency)} per million samples"
                    for (w, m), o in cheapest.items()
                ],
                "",
            ]
        sv = serving.serve_rows(run)
        if not sv.empty:
            out += [
                "## Capacity at the latency SLO",
                "",
                tabulate(
                    [
                        [
                            md(r["case_id"]),
                            f"{r['slo_ms']:g}",
                            human(r["max_rate_at_slo"]) if r["max_rate_at_slo"] == r["max_rate_at_slo"] else "none",
                            human(r["serve_p99_ms"]),
                            human(r["capacity_rate"]),
                            md(r["serve_reason"] or ""),
                        ]
                        for _, r in sv.iterrows()
                    ],
                    headers=["serve case", "SLO ms", "req/s at the SLO", "p99 ms at it", "capacity req/s", "note"],
                    tablefmt="github",
                ),
                "",
            ]
        out += sweeps.markdown(run)
        out += roofline.markdown(run)
        out += sweeps.largest_markdown(run)
        out += reference.markdown(d, run.table)
        out += sharing.markdown(d)
        bc = analysis.backend_comparison(run)
        if not bc.empty:
            out += [
                "## Backends side by side",
                "",
                tabulate(
                    [[md(r["case_id"]), md(r["vs"]), md(r["pair"]), fmt_ratio(r["ratio"])] for _, r in bc.iterrows()],
                    headers=["case", "against", "ratio of", "ratio [95% CI]"],
                    tablefmt="github",
                ),
                "",
            ]
        sp = analysis.speedups(run).set_index("case_id")["speedup"]
        rows = [
            [
                md(r["case_id"]),
                md(r["status"]),
                human(r["samples_per_s"]) if r["status"] == "ok" else "-",
                "baseline"
                if r["status"] == "ok" and r["case_id"] == analysis.baseline_id(r)
                else fmt_ratio(sp.get(r["case_id"])),
            ]
            for _, r in run.table.iterrows()
        ]
        out += [
            "## Cases",
            "",
            tabulate(rows, headers=["case", "status", "samples/s", "vs CPU fp32"], tablefmt="github"),
            "",
        ]
        if baseline is not None:
            ch = [
                [md(cid), fmt_ratio(c.ratio), p_value(c.p_value), c.verdict]
                for cid, c in changes(d, baseline, threshold)
            ]
            out += [
                f"## Against {md(baseline['run']['id'])}",
                "",
                tabulate(ch, headers=["case", "new/base", "p", "verdict"], tablefmt="github"),
                "",
            ]
    return "\n".join(out)


def render(
    docs: list[dict],
    out_dir: str | Path,
    baseline: dict | None = None,
    threshold: float = 0.05,
    prices: costs.Prices | None = None,
) -> Path:
    """Write ``index.html`` and ``report.md`` into ``out_dir``; returns the folder."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    html = html_report(docs, baseline, threshold, prices)
    md_text = markdown_report(docs, baseline, threshold, prices)
    tmp = out / ".index.html.tmp"
    tmp.write_text(html)
    tmp.replace(out / "index.html")
    (out / "report.md").write_text(md_text)
    return out
