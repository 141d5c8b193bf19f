"""pytest plugin: parametrise ``bench/suite.py`` by the case ids of a plan, and run them."""

from __future__ import annotations

import pytest

from bench.protocol import WorkerPlan


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--accelbench-plan`` (cases of one device configuration) and ``--accelbench-spool``."""
    group = parser.getgroup("accelbench")
    group.addoption("--accelbench-plan", help="plan JSON written by accelbench run")
    group.addoption("--accelbench-spool", help="file the case records are appended to (JSON lines)")


def _plan(config: pytest.Config) -> WorkerPlan:
    path = config.getoption("accelbench_plan")
    if not path:
        raise pytest.UsageError("bench/suite.py needs --accelbench-plan PLAN.json (accelbench run writes one)")
    return WorkerPlan.read(path)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per case id, the id being the case id."""
    if "case_id" in metafunc.fixturenames:
        ids = _plan(metafunc.config).ids
        metafunc.parametrize("case_id", ids, ids=ids)


@pytest.fixture(scope="session")
def accelbench(request: pytest.FixtureRequest):
    """The worker session: devices configured once, TensorFlow started once."""
    from bench.worker import WorkerSession

    session = WorkerSession(_plan(request.config), request.config.getoption("accelbench_spool"))
    yield session
    session.close()
