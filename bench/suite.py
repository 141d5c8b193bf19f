"""The benchmark suite as pytest sees it: one pytest-benchmark test per case id.

Run through ``accelbench run`` (one process per device configuration), or by hand with a plan:
``pytest bench/suite.py -p bench.pytest_plugin --accelbench-plan PLAN.json -k mlp``.
"""


def test_case(benchmark, accelbench, case_id):
    """Measure one case; its record is written to the spool whatever happens."""
    accelbench.run(case_id, benchmark)
