"""``accelbench``: run, devices, export, report. The only place that prints user errors."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from bench import __version__, argtypes, maxbatch, merge, sweep
from bench.argtypes import comma_list as _list
from bench.argtypes import nonneg_int as _nonneg_int
from bench.argtypes import positive_int as _positive_int
from bench.argtypes import tenants as _tenants
from bench.errors import UserError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        raise UserError(f"{message} (see '{self.prog} --help')")


STALL_HELP = (
    "kill a worker that reports no progress for S seconds; its case is recorded as timeout "
    "(default: the profile's compile allowance + 3 x case budget)"
)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = _Parser(prog="accelbench", description="CPU vs GPU vs multi-GPU vs mixed precision, measured right.")
    p.add_argument("--version", action="version", version=f"accelbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run the benchmark matrix")
    r.add_argument("--profile", default="standard", help="smoke | standard (default) | large")
    r.add_argument("--workloads", type=_list, default=None, help="comma list of mlp, cnn, transformer (default all)")
    r.add_argument(
        "--modes",
        type=_list,
        default=None,
        help="comma list of train, infer, serve (default: train, infer, and serve except in the smoke profile)",
    )
    r.add_argument(
        "--slo-ms",
        type=float,
        default=None,
        help="serve: the p99 latency bound in ms for every workload and device (default: mlp 10, cnn 15, transformer 130)",
    )
    r.add_argument("--devices", type=_list, default=("auto",), help="auto (default) or a comma list of cpu, gpu:K")
    r.add_argument(
        "--tenants",
        type=_tenants,
        default=((), False),
        help="beside each case, N copies of it at once on its one device (cpu, gpu:1), e.g. 2,4: "
        "the cost of sharing (STP, worst slowdown, fairness); mix: each training case's batch-1 "
        "inference beside it (p99 latency alone vs beside training); docs/method.md",
    )
    precisions = "auto (default: all four) or a comma list of fp32, tf32, mixed_float16, mixed_bfloat16"
    r.add_argument("--precisions", type=_list, default=("auto",), help=precisions)
    r.add_argument(
        "--xla",
        default="off",
        help="off (default) | on | both: TensorFlow's XLA, torch's torch.compile (JAX always compiles)",
    )
    r.add_argument(
        "--backend",
        default="tensorflow",
        help="tensorflow (default) | jax | torch (Keras on torch) | torch-native | a comma list | all (each installed; "
        "pip install 'accelbench[jax]' / '[torch]')",
    )
    r.add_argument(
        "--parallelism",
        default="data",
        help="data (default) | model | both: model splits the dense and attention kernels over the devices (JAX)",
    )
    r.add_argument(
        "--batch-size",
        type=argtypes.batch_size,
        default=None,
        help="per-replica batch (overrides the profile), or max: the largest that fits, searched per case "
        "(accelbench maxbatch's search, read back from <results-dir>/maxbatch.json where recorded)",
    )
    r.add_argument(
        "--memory-limit",
        type=float,
        default=None,
        metavar="GIB",
        help="with max: a CPU case's peak resident memory budget for the search (default: half of what is free)",
    )
    r.add_argument("--sweep", action="append", default=[], metavar="NAME=VALUES", help=sweep.HELP)
    r.add_argument("--grid", default="additive", help="additive (default): each --sweep alone; full: every combination")
    r.add_argument("--every-point", action="store_true", help=sweep.EVERY_POINT_HELP)
    r.add_argument(
        "--virtual-devices",
        type=_nonneg_int,
        default=0,
        metavar="N",
        help="split the first device (GPU, else CPU) into N logical devices for multi-device cases",
    )
    r.add_argument("--results-dir", default="results", help="folder of results files (default results/)")
    r.add_argument("--resume", metavar="RUN_ID", help="run only the cases missing from results/RUN_ID.json")
    r.add_argument("-k", dest="keyword", default="", help="pytest -k expression over case ids")
    r.add_argument("--sampler-interval", type=float, default=0.1, help="telemetry sampling interval, s (>= 0.1)")
    r.add_argument("--no-sampler", action="store_true", help="no background telemetry sampling")
    r.add_argument("--repeats", type=_nonneg_int, default=None, metavar="N", help="workers per case (run-level)")
    r.add_argument("--compile-cache", default="auto", metavar="DIR|off", help="JAX's compile cache, or off")
    r.add_argument("--stall-timeout", type=float, default=None, metavar="S", help=STALL_HELP)
    r.add_argument(
        "--shard", default="", metavar="I/N", help="run only shard I of N of the plan (merge with accelbench merge)"
    )
    r.add_argument(
        "--cluster",
        choices=("tf_config", "slurm"),
        default=None,
        help="one worker per node under MultiWorkerMirroredStrategy: the same command on every node; "
        "identity from TF_CONFIG or Slurm's variables; rank 0 writes the results",
    )
    r.add_argument("--run-id", default=None, help="the run's id (a cluster run needs the same one on every node)")
    r.add_argument(
        "--cluster-port", type=_positive_int, default=12345, help="with --cluster slurm: first port per node"
    )
    r.add_argument("--no-report", action="store_true", help="do not write the HTML/Markdown report")
    r.add_argument("--reports-dir", default="reports", help="folder of reports (default reports/)")
    r.add_argument(
        "--prices", metavar="TOML", help="prices (device-hour, kWh): the report shows cost per million samples"
    )

    d = sub.add_parser("devices", help="what was found, where TensorFlow computes, what each precision needs")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.add_argument(
        "--check",
        action="store_true",
        help="run one tiny step of every path this machine supports (CPU, each GPU precision, XLA, all GPUs "
        "with the real all-reduce, a virtual split) and a 10 s NVML window under load; exit 1 if any fails",
    )
    d.add_argument(
        "--reference",
        action="store_true",
        help="with --check: also run ResNet-50 on one GPU at the configurations published for this exact GPU "
        "(docs/method.md) and compare (results kept in --results-dir, default results/); below 0.5x of the "
        "published figure fails the check",
    )
    d.add_argument("--results-dir", default=None, help="with --check: keep its results and worker logs here")

    e = sub.add_parser("export", help="the tidy one-row-per-case table")
    e.add_argument("file", help="results JSON")
    e.add_argument("--format", default="csv", help="csv (default)")
    e.add_argument("-o", "--output", help="write here instead of stdout")

    rep = sub.add_parser("report", help="HTML + Markdown report and console table from results files")
    rep.add_argument("files", nargs="+", help="results JSON files (several appear side by side)")
    rep.add_argument("--baseline", help="results JSON to compare against")
    rep.add_argument("--out", help="output folder (default reports/<run-id>/)")
    rep.add_argument("--prices", metavar="TOML", help="prices (device-hour, kWh): cost per million samples")
    rep.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PCT",
        default=None,
        help="exit 1 if any case regressed by more than PCT percent",
    )
    from bench.history.commands import add_parsers
    from bench.site.commands import add_parser as add_site

    add_parsers(sub, _positive_int)
    add_site(sub, _positive_int)
    merge.add_parser(sub)
    maxbatch.add_parser(sub, _list)
    return p


def _progress(total: int):
    """The progress bar on stderr; its postfix shows the case and phase a worker is in."""
    from tqdm import tqdm

    return tqdm(total=total, desc="cases", unit="case", file=sys.stderr, dynamic_ncols=True)


def _prices(path: str | None):
    """The prices file, or None."""
    if not path:
        return None
    from bench.report import cost

    return cost.load(path)


# what a --resume may not be given (it reruns the stored options): attribute, flag, its unset values
RESUME_FLAGS: tuple[tuple[str, str, tuple], ...] = (
    *((k, f, (None, "", ())) for k, f in (("workloads", "--workloads"), ("modes", "--modes"), ("keyword", "-k"))),
    *((k, f, (None, "")) for k, f in (("batch_size", "--batch-size"), ("shard", "--shard"), ("slo_ms", "--slo-ms"))),
    ("stall_timeout", "--stall-timeout", (None,)),
    ("tenants", "--tenants", (((), False),)),
    ("profile", "--profile", ("standard",)),
    ("devices", "--devices", (("auto",),)),
    ("precisions", "--precisions", (("auto",),)),
    ("backend", "--backend", ("tensorflow",)),
    ("parallelism", "--parallelism", ("data",)),
    ("sweep", "--sweep", ([],)),
    ("memory_limit", "--memory-limit", (None,)),
    ("grid", "--grid", ("additive",)),
    ("every_point", "--every-point", (False,)),
)


def cmd_run(a: argparse.Namespace) -> int:
    """``accelbench run``."""
    from bench import devices, storage
    from bench.planning import RunOptions, default_repeats
    from bench.report import analysis, console
    from bench.runner import Run
    from workloads import WORKLOADS

    cluster = None
    if a.cluster:
        import os

        from bench import cluster as cluster_mod

        cluster = cluster_mod.resolve(a.cluster, os.environ, a.cluster_port)
        a.run_id = a.resume or cluster_mod.run_id(a.run_id, cluster, os.environ)
    from bench.provenance import results_path

    if a.run_id:
        results_path(a.results_dir, a.run_id)  # a plain name, checked before anything starts
    opts = RunOptions(
        profile=a.profile,
        workloads=a.workloads or tuple(WORKLOADS),
        modes=a.modes or ("auto",),
        slo_ms=a.slo_ms,
        tenants=a.tenants[0],
        tenant_mix=a.tenants[1],
        devices=a.devices,
        precisions=a.precisions,
        xla=a.xla,
        batch_size=a.batch_size,
        virtual_devices=a.virtual_devices,
        keyword=a.keyword,
        sampler_interval_s=a.sampler_interval,
        sampler=not a.no_sampler,
        compile_cache=a.compile_cache,
        repeats=a.repeats if a.repeats is not None else default_repeats(),
        stall_timeout_s=a.stall_timeout,
        shard=a.shard,
        nodes=cluster.world if cluster else 1,
        backend=a.backend,
        parallelism=a.parallelism,
        sweeps=tuple(a.sweep),
        grid=a.grid,
        every_point=a.every_point,
        memory_limit_gib=a.memory_limit,
    )
    prices = _prices(a.prices)  # a bad prices file fails before anything runs
    if a.resume and not cluster:  # a cluster's other nodes plan from the command line: it stays whole there
        given = [flag for attr, flag, unset in RESUME_FLAGS if getattr(a, attr) not in unset]
        if given:
            raise UserError(f"--resume reruns the stored options of that run; drop {', '.join(given)}")
    stored: dict = {}
    if a.resume and (cluster is None or cluster.rank == 0):  # only rank 0 of a cluster has the file
        # fail fast, before a framework starts; a resumed run plans with its stored options
        stored = storage.load(results_path(a.results_dir, a.resume))["run"]["options"]
    from bench import backends

    chosen = backends.resolve(stored.get("backend", opts.backend))
    machine = devices.discover(backends=chosen, keep=True)
    if machine.read_back:  # the frameworks' view from the probe cache: said, with the way to ask afresh
        print(f"accelbench: {machine.read_back}", file=sys.stderr)
    for note in machine.unused_gpu_notes(chosen):  # the GPU is there and will not be measured: say so first
        print(f"accelbench: GPU not used: {note}", file=sys.stderr)

    if not a.resume and (cluster is None or cluster.rank == 0) and opts.wants_max:
        opts = maxbatch.resolve(opts, machine, Path(a.results_dir))  # before the plan: each case's safe batch
    if a.resume:
        run = Run.resume(a.resume, opts, machine, a.results_dir, sys.argv[1:], progress=_progress, cluster=cluster)
    else:
        run = Run.new(opts, machine, a.results_dir, sys.argv[1:], progress=_progress, cluster=cluster, run_id=a.run_id)
    print(
        f"accelbench run {run.run_id}: {len(run.plan)} cases "
        f"({sum(1 for _, s in run.plan if not s.supported)} unsupported), results -> {run.path}",
        file=sys.stderr,
    )
    if opts.axes:  # a sweep: what it costs, before it runs
        print(f"accelbench sweep: {sweep.cost_line([c for c, s in run.plan if s.supported], opts)}", file=sys.stderr)
    from bench.runner import ClusterFailed

    try:
        path = run.execute()
    except ClusterFailed as e:
        print(f"accelbench: {e}", file=sys.stderr)
        return 1
    if cluster is not None and cluster.rank > 0:
        print(f"rank {cluster.rank} done; rank 0 ({cluster.workers[0]}) writes the results", file=sys.stderr)
        return 0
    doc = storage.load(path)
    print(console.table(analysis.load_run(doc)))
    print(f"\nresults: {path}")
    if not a.no_report:
        from bench.report.render import render

        out = render([doc], out_dir=Path(a.reports_dir) / run.run_id, prices=prices)
        print(f"report: {out / 'index.html'}")
    return 0


def cmd_devices(a: argparse.Namespace) -> int:
    """``accelbench devices [--check]``."""
    from bench import backends, devices
    from bench.report.devices_text import describe

    if a.reference and not a.check:
        raise UserError("--reference runs with --check: accelbench devices --check --reference")
    found = backends.described()
    machine = devices.discover(check="tensorflow" in found, backends=found)
    if not a.check:
        if a.json:
            print(json.dumps({**machine.to_dict(), "placement": machine.tf.get("placement", [])}, indent=1))
        else:
            print(describe(machine))
        return 0
    import tempfile
    from dataclasses import asdict

    from tabulate import tabulate

    from bench.check import check

    with tempfile.TemporaryDirectory() as tmp:
        # the published comparison is a results file to keep (accelbench report reads it): results/ by default
        ref_dir = Path(a.results_dir or "results") if a.reference else None
        rows = check(machine, Path(a.results_dir or tmp), progress=_progress, reference_dir=ref_dir)
    failed = [r.path for r in rows if r.result == "FAIL"]
    if a.json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "failed": failed}, indent=1))
    else:
        print(describe(machine) + "\n")
        print(tabulate([[r.path, r.result, r.detail[:160]] for r in rows], headers=["path", "result", "detail"]))
        if not machine.gpu_count(be := found[0]):
            print(f"\nno GPU path could be checked: {machine.no_gpu_reason(be)}")
        if failed:
            keep = "" if a.results_dir else " (rerun with --results-dir DIR to keep worker logs)"
            print(f"\nFAILED: {', '.join(failed)}{keep}", file=sys.stderr)
    return 1 if failed else 0


def cmd_export(a: argparse.Namespace) -> int:
    """``accelbench export``."""
    from bench import storage

    if a.format != "csv":
        raise UserError(f"--format must be csv; got {a.format!r}")
    doc = storage.load(a.file)
    import pandas as pd

    frame = pd.DataFrame(storage.tidy_rows(doc), columns=storage.COLUMNS)
    text = frame.to_csv(index=False)
    if a.output:
        Path(a.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    """``accelbench report``."""
    from bench import storage
    from bench.report import analysis, console
    from bench.report.render import regressions, render, same_profile

    if a.fail_on_regression is not None and a.fail_on_regression <= 0:
        raise UserError(f"--fail-on-regression takes a positive percentage; got {a.fail_on_regression}")
    prices = _prices(a.prices)
    docs = [storage.load(f) for f in a.files]
    base = storage.load(a.baseline) if a.baseline else None
    threshold = (a.fail_on_regression or 5.0) / 100.0
    if base is not None and a.fail_on_regression is not None and not same_profile(docs[0], base):
        # a gate that compared nothing must not pass: the profile sizes the models behind the ids
        raise UserError(
            f"{a.files[0]} is a {docs[0]['run'].get('profile')} run and {a.baseline} a "
            f"{base['run'].get('profile')} run: different model sizes under the same case ids, not compared"
        )
    rid = str(docs[0]["run"]["id"])
    if not a.out and not storage.RUN_ID_RE.match(rid):  # the id would name a folder outside reports/
        raise UserError(f"{a.files[0]}: run id {rid!r} is not a plain name; give the report folder with --out")
    out_dir = Path(a.out) if a.out else Path("reports") / rid
    out = render(docs, out_dir=out_dir, baseline=base, threshold=threshold, prices=prices)
    for d in docs:
        print(console.table(analysis.load_run(d)))
    print(f"\nreport: {out / 'index.html'}")
    if base is not None and a.fail_on_regression is not None:
        bad = regressions(docs[0], base, threshold)
        if bad:
            print(
                f"regressions beyond {a.fail_on_regression:g}%: "
                + ", ".join(f"{cid} ({(r - 1) * 100:+.1f}%)" for cid, r in bad),
                file=sys.stderr,
            )
            return 1
    return 0


def cmd_history(a: argparse.Namespace) -> int:
    """``accelbench history ...``."""
    from bench.history.commands import dispatch

    return dispatch(a)


def cmd_site(a: argparse.Namespace) -> int:
    """``accelbench site build``."""
    from bench.site.commands import command

    return command(a)


def cmd_merge(a: argparse.Namespace) -> int:
    """``accelbench merge``."""
    from bench.merge import command

    return command(a)


COMMANDS = {
    "run": cmd_run,
    "devices": cmd_devices,
    "export": cmd_export,
    "report": cmd_report,
    "history": cmd_history,
    "site": cmd_site,
    "merge": cmd_merge,
    "maxbatch": maxbatch.command,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors are one line on stderr with exit code 2."""
    try:
        a = parser().parse_args(argv)
        return COMMANDS[a.command](a)
    except UserError as e:
        print(f"accelbench: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # unwritable folder, full disk: no traceback; results on disk stay whole (atomic writes)
        print(f"accelbench: error: {e.strerror or e}{f': {e.filename}' if e.filename else ''}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("accelbench: interrupted; finished cases are saved", file=sys.stderr)
        return 130
