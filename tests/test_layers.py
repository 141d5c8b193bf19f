"""Imports run one way: a module never imports one on a higher floor (the house's layering).

Floors, from the ground up: pure definitions; records, telemetry and planning; the measuring
worker; the runner, the report and merge; the nightly history; the site; the command line.
A new module must be given a floor here: an unplaced module fails the test.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]

# longest prefix wins
FLOORS = {
    # 0: definitions that import nothing of ours above them (no framework, no I/O of results)
    "bench.errors": 0,
    "bench.precision": 0,
    "bench.serve": 0,
    "bench.sharing": 0,
    "bench.rate_search": 0,
    "bench.profiles": 0,
    "bench.stats": 0,
    "bench.columns": 0,
    "bench.cases": 0,
    "bench.fingerprint": 0,
    "bench.cluster": 0,
    "bench.capability": 0,
    "bench.backends.layouts": 0,
    "bench.backends.hiding": 0,
    "bench.telemetry.base": 0,
    "bench.telemetry.nvml": 0,
    "bench.report.numbers": 0,
    "bench.report.mdtext": 0,
    "bench.report.peaks": 0,
    "bench.report.published": 0,
    "bench.history.changepoints": 0,
    "bench.jaxprobe": 0,
    "bench.hlo_flops": 0,
    "bench.stopping": 0,
    "bench.spread": 0,
    "bench.crossover": 0,
    "bench.batchsearch": 0,
    "bench.tfprobe": 0,
    "bench.torchprobe": 0,
    "bench.suite": 0,
    "bench": 0,  # the package itself (its version)
    # 1: the results format, the worker contract, telemetry, the machine and the plan
    "bench.storage": 1,
    "bench.upgrades": 1,
    "bench.records": 1,
    "bench.protocol": 1,
    "bench.loop": 1,
    "bench.telemetry": 1,
    "bench.devices": 1,
    "bench.planning": 1,
    "bench.sweep": 1,
    "bench.groups": 1,
    "bench.argtypes": 1,
    "bench.compile_cache": 1,
    "bench.probe_cache": 1,
    "bench.tenants": 1,
    "bench.provenance": 1,
    "bench.watchdog": 1,
    "bench.method": 1,
    "bench.multiworker": 1,
    "bench.backends": 1,
    "workloads": 1,
    # 2: inside a worker process
    "bench.backends.base": 2,
    "bench.backends.tf_backend": 2,
    "bench.backends.jax_backend": 2,
    "bench.backends.torch_backend": 2,
    "bench.backends.factory": 2,
    "bench.backends.torch_native": 2,
    "bench.torch_ddp": 2,
    "bench.steps": 2,
    "bench.worker_serve": 2,
    "bench.worker_probes": 2,
    "bench.measure": 2,
    "bench.worker": 2,
    "bench.pytest_plugin": 2,
    "bench.overhead_check": 2,
    "bench.coordination": 2,
    # 3: running a plan, reading its results
    "bench.runner": 3,
    "bench.tenant_run": 3,
    "bench.check": 3,
    "bench.report": 3,
    "bench.merge": 3,
    "bench.maxbatch": 3,
    # 4: the nightly history and its judge
    "bench.history": 4,
    # 5: the published site
    "bench.site": 5,
    # 6: the command line
    "bench.cli": 6,
    "bench.__main__": 6,
}


def floor(module: str) -> int | None:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else FLOORS[best]


def _module(path: Path) -> str:
    mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _is_module(name: str) -> bool:
    p = ROOT.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def imports(path: Path) -> set[str]:
    """Our modules a file imports (``from bench import x`` counts as ``bench.x`` where x is a module)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("bench", "workloads"):
            subs = {f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")}
            out |= subs or {node.module}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] in ("bench", "workloads")}
    return out


def _files():
    return sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "workloads").rglob("*.py")])


def test_every_module_has_a_floor():
    assert [m for m in map(_module, _files()) if floor(m) is None] == []


def arrows_up(edges):
    """``module (floor) imports dep (floor)`` for each (module, its imports) with a higher-floor import."""
    up = []
    for mod, deps in edges:
        for dep in sorted(deps):
            if dep != mod and floor(dep) is not None and floor(dep) > floor(mod):  # type: ignore[operator]
                up.append(f"{mod} (floor {floor(mod)}) imports {dep} (floor {floor(dep)})")
    return up


def test_no_import_runs_up_a_floor():
    assert arrows_up((_module(p), imports(p)) for p in _files()) == []


def test_the_check_sees_an_arrow_up(tmp_path):
    """The rule can fail: the report importing the site, or storage importing the worker, is caught."""
    f = tmp_path / "x.py"
    f.write_text("from bench.site import build\nimport bench.worker\nfrom bench import storage, errors\n")
    deps = imports(f)
    assert deps == {"bench.site.build", "bench.worker", "bench.storage", "bench.errors"}
    assert arrows_up([("bench.report.render", deps)]) == [
        "bench.report.render (floor 3) imports bench.site.build (floor 5)"
    ]
    assert arrows_up([("bench.storage", deps)]) == [
        "bench.storage (floor 1) imports bench.site.build (floor 5)",
        "bench.storage (floor 1) imports bench.worker (floor 2)",
    ]


def test_files_keep_to_one_job_no_module_over_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in _files() if (n := len(p.read_text().splitlines())) > 450}
    assert long == {}


def _ours(edges):
    """Each module's imports of our modules, named by the module (``bench.x.f`` where f is a name -> ``bench.x``)."""
    mods = {m for m, _ in edges}

    def owner(dep):
        while dep not in mods and "." in dep:
            dep = dep.rsplit(".", 1)[0]
        return dep

    return {m: {owner(d) for d in deps if owner(d) in mods and owner(d) != m} for m, deps in edges}


def cycles(graph):
    """The import circles of ``graph`` (module -> modules it imports), each as a sorted list."""
    found, path, done = set(), [], set()

    def visit(m):
        if m in path:
            found.add(tuple(sorted(path[path.index(m) :])))
            return
        if m in done:
            return
        path.append(m)
        for d in sorted(graph.get(m, ())):
            visit(d)
        path.pop()
        done.add(m)

    for m in sorted(graph):
        visit(m)
    return sorted(list(c) for c in found)


def test_no_import_circle_even_on_one_floor():
    """Imports inside functions count: the runner and the tenants' runner once imported each other."""
    assert cycles(_ours([(_module(p), imports(p)) for p in _files()])) == []


def test_the_check_sees_a_circle():
    graph = _ours(
        [
            ("bench.runner", {"bench.tenant_run"}),
            ("bench.tenant_run", {"bench.runner.WORKER"}),
            ("bench.cli", {"bench.runner"}),
        ]
    )
    assert cycles(graph) == [["bench.runner", "bench.tenant_run"]]
