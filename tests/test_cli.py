"""The CLI's errors: one line, exit code 2, no traceback, nothing on disk changed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_storage import doc

from bench import storage
from bench.cli import main


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def snapshot(folder: Path):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    storage.write_atomic(d / "r1.json", doc())
    (d / "truncated.json").write_text('{"schema_version": 1, "bench')
    (d / "foreign.json").write_text(json.dumps({"hello": "world"}))
    return d


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "--profile", "huge"], "unknown profile 'huge'; expected one of: smoke, standard, large"),
        (["run", "--workloads", "mlp,gan"], "unknown workload 'gan'"),
        (["run", "--precisions", "fp8"], "unknown precision 'fp8'"),
        (["run", "--modes", "eval"], "unknown mode 'eval'"),
        (["run", "--devices", "tpu"], "device must be 'cpu' or 'gpu:K'"),
        (["run", "--batch-size", "0"], "expected a positive integer or max, got '0'"),
        (["run", "--batch-size", "-3"], "expected a positive integer"),
        (["run", "--xla", "maybe"], "--xla must be one of off, on, both"),
        (["run", "--virtual-devices", "1"], "--virtual-devices must be 0 (off) or >= 2"),
        (["run", "--resume", "nope"], "no such results file"),
        (["run", "--resume", "../etc/passwd"], "run id must be"),
        (["run", "--resume", "truncated"], "not valid JSON"),
        (
            ["run", "--resume", "r1", "--profile", "smoke"],
            "--resume reruns the stored options of that run; drop --profile",
        ),
        (
            ["run", "--resume", "r1", "--stall-timeout", "60"],
            "--resume reruns the stored options of that run; drop --stall-timeout",
        ),
        (["run", "--stall-timeout", "0"], "--stall-timeout must be a positive number of seconds; got 0.0"),
        # a sweep's hostile values never reach an id, a file name or a report
        (["run", "--sweep", "batch=1,<script>"], "--sweep batch= takes whole numbers"),
        (["run", "--sweep", "batch=../../x"], "--sweep batch= takes whole numbers"),
        (["run", "--sweep", "width-1=4"], "--sweep takes NAME=VALUES"),
        (["run", "--sweep", "batch=0,4"], "values must be from 1 to 1048576"),
        (["run", "--sweep", "batch=99999999"], "takes whole numbers"),
        (["run", "--sweep", "batch=pow2:3..64"], "needs a power of two"),
        (["run", "--sweep", "batch=1", "--sweep", "batch=2"], "names an axis twice"),
        (["run", "--sweep", "image=64", "--workloads", "mlp"], "no chosen workload has that knob"),
        (["run", "--sweep", "dmodel=129", "--workloads", "transformer"], "not divisible by its 2 heads"),
        (["run", "--sweep", "width=64,max", "--workloads", "mlp"], "only batch has a largest value that fits"),
        (["run", "--batch-size", "most"], "expected a positive integer or max, got 'most'"),
        (["run", "--batch-size", "max", "--memory-limit", "-1"], "--memory-limit must be a positive number of GiB"),
        (["run", "--grid", "diagonal"], "--grid must be one of additive, full"),
        (["run", "--resume", "r1", "--sweep", "batch=4"], "drop --sweep"),
        (["export", "RESULTS/truncated.json"], "not valid JSON"),
        (["export", "RESULTS/foreign.json"], "not an accelbench results file"),
        (["export", "RESULTS/r1.json", "--format", "xlsx"], "--format must be csv"),
        (["report", "RESULTS/missing.json"], "no such results file"),
        (["report", "RESULTS/r1.json", "--baseline", "RESULTS/foreign.json"], "not an accelbench results file"),
        (["frobnicate"], "invalid choice"),
        (["run", "--shard", "3/2"], "--shard i/n needs 1 <= i <= n; got '3/2'"),
        (["run", "--shard", "half"], "--shard takes i/n (e.g. 1/4); got 'half'"),
        (["run", "--resume", "r1", "--shard", "1/2"], "drop --shard"),
        (["merge", "RESULTS/r1.json", "-o", "RESULTS/r1.json"], "exists; merge writes a new file"),
        (["merge", "RESULTS/r1.json", "-o", "RESULTS/m.json", "--run-id", "../x"], "--run-id must be letters"),
        (["merge", "RESULTS/r1.json", "RESULTS/r1.json", "-o", "RESULTS/m.json"], "shards must not overlap"),
        (["report", "RESULTS/r1.json", "--prices", "RESULTS/truncated.json"], "not a TOML prices file"),
        (["history", "check", "--store", "RESULTS/nowhere"], "no such history store"),
        (["history", "add", "RESULTS/foreign.json", "--store", "RESULTS/h"], "not an accelbench results file"),
        (["site", "build", "--store", "RESULTS/nowhere", "--out", "RESULTS/site"], "no such history store"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(results, args, expected, capsys, monkeypatch):
    # in-process (the CLI's entry point, as the console script calls it); one real process below
    before = snapshot(results)
    monkeypatch.chdir(results.parent)
    args = [a.replace("RESULTS", str(results)) for a in args]
    code = main([*args, "--results-dir", str(results)] if args[0] == "run" else args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("accelbench: error: ") and expected in lines[0], err
    assert "Traceback" not in err
    assert snapshot(results) == before


def test_bad_input_in_a_real_process_is_one_line_without_traceback(results):
    r = cli("run", "--profile", "huge", "--results-dir", str(results))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "unknown profile 'huge'" in r.stderr
    r = cli("history", "check", "--store", str(results / "nowhere"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such history store" in r.stderr


@pytest.mark.slow
def test_gpu_count_the_machine_does_not_have(results):
    r = cli("run", "--devices", "gpu:4", "--results-dir", str(results))
    assert r.returncode == 2
    assert "asks for 4 GPUs; this machine has 0 visible to TensorFlow" in r.stderr
    assert "Traceback" not in r.stderr


def test_export_csv_has_the_contract_columns(results, tmp_path):
    out = tmp_path / "x.csv"
    r = cli("export", str(results / "r1.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    header = out.read_text().splitlines()[0].split(",")
    assert header[:14] == [
        "run_id",
        "case_id",
        "workload",
        "mode",
        "device_kind",
        "device_count",
        "virtual",
        "precision",
        "math_mode",
        "xla",
        "per_replica_batch",
        "global_batch",
        "status",
        "reason",
    ]
    for col in ("samples_per_s_ci_low", "compile_s", "peak_tflops_measured", "energy_j_per_sample", "gpu_telemetry"):
        assert col in header
    rows = out.read_text().splitlines()[1:]
    unsupported = next(r for r in rows if "tf32" in r)
    assert ",0," not in unsupported.replace("device_count", "")  # unknown figures are empty cells, not 0
    assert cli("export", str(results / "r1.json")).stdout == out.read_text()


def test_export_reads_into_pandas_with_bool_columns(results, tmp_path):
    import pandas as pd

    out = tmp_path / "x.csv"
    assert cli("export", str(results / "r1.json"), "-o", str(out)).returncode == 0
    df = pd.read_csv(out)
    for col in ("unstable", "virtual", "xla", "busy"):
        assert df[col].dtype == bool, (col, df[col].dtype)
    assert len(df[df.unstable]) == 0 and len(df[~df.unstable]) == len(df)  # df[df.unstable] works


def test_unwritable_output_is_one_line(results, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    r = cli("report", str(results / "r1.json"), "--out", str(blocker / "sub"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("accelbench: error: ") and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1


def test_a_schema_1_results_file_still_reads_everywhere(tmp_path):
    """tests/data/cpu_smoke.json was written with schema 1 (round times in stats); every reader converts it."""
    old = Path(__file__).parent / "data" / "cpu_smoke.json"
    assert json.loads(old.read_text())["schema_version"] == 1
    before = old.read_bytes()
    r = cli("export", str(old), "-o", str(tmp_path / "x.csv"))
    assert r.returncode == 0, r.stderr
    assert "mlp-train-cpu-fp32-b64" in (tmp_path / "x.csv").read_text()
    r = cli("report", str(old), "--out", str(tmp_path / "report"))
    assert r.returncode == 0 and (tmp_path / "report" / "index.html").is_file(), r.stderr
    r = cli("merge", str(old), "-o", str(tmp_path / "merged.json"))
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert (
        merged["schema_version"] == storage.SCHEMA_VERSION == 3 and merged["benchmarks"][0]["stats"]["iterations"] > 1
    )
    r = cli("history", "add", str(old), "--store", str(tmp_path / "store"), "--no-report")
    assert r.returncode == 0, r.stderr
    assert old.read_bytes() == before  # read, never rewritten


def test_the_readme_synopsis_lists_every_option_of_every_command():
    import argparse
    import re

    from bench.cli import parser

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = next(b for b in readme.split("```") if "accelbench run [" in b)
    entries: dict[str, str] = {}
    key = ""
    for line in block.splitlines():
        m = re.match(r"accelbench ((?:[a-z]+ ?)*)", line)
        if m:
            key = m.group(1).strip()  # the command's words: "run", "history add", "" for --version
            entries[key] = entries.get(key, "") + " " + line
        elif line.startswith(" ") and key:
            entries[key] += " " + line

    def walk(p, path):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sp in a.choices.items():
                    yield from walk(sp, [*path, name])
            elif a.option_strings and "--help" not in a.option_strings:
                yield " ".join(path), a.option_strings

    missing = []
    for cmd, opts in walk(parser(), []):
        text = entries.get(cmd, "")
        if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text) for o in opts):
            missing.append(f"accelbench {cmd} {opts[-1]}")
    assert missing == []


def test_the_docs_state_the_rounds_and_the_check_paths_the_code_has():
    from test_capability import machine

    from bench import check
    from bench.profiles import PROFILES

    root = Path(__file__).parents[1]
    readme, method = (root / "README.md").read_text(), (root / "docs" / "method.md").read_text()
    assert {t.min_rounds for t in PROFILES.values()} == {6}  # [min, max] of 6 rounds: the first 95% interval
    std = PROFILES["standard"]
    looks = f"looked at only at fixed round counts ({', '.join(map(str, std.looks))};"
    assert looks in " ".join(method.split())  # the generated "In short" (README points there)
    # devices --check: one GPU in each precision, XLA in the precisions the check has
    paths = [c for _, c in check.paths(machine())]
    gpu1 = [c for c in paths if c.device_kind == "gpu" and c.device_count == 1 and not c.virtual]
    assert {c.precision for c in gpu1 if not c.xla} == {"fp32", "tf32", "mixed_float16", "mixed_bfloat16"}
    xla = sorted({c.precision for c in gpu1 if c.xla})
    assert f"one GPU in each precision, with XLA in {' and '.join(xla)}," in " ".join(readme.split())
