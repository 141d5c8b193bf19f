"""Multiprogram metrics on synthetic rates and timestamps; the sharing mode rules (issue 18 groundwork)."""

import pytest

from bench.sharing import Sharing, common_window, rate_in_window, sharing_mode


def test_tenants_that_do_not_interfere_reach_stp_n_and_perfect_serialisation_stp_1():
    free = Sharing(100.0, (100.0, 100.0, 100.0, 100.0))
    assert (free.stp, free.antt, free.worst_slowdown, free.fairness, free.jain) == (4.0, 1.0, 1.0, 1.0, 1.0)
    serial = Sharing(100.0, (25.0,) * 4)
    assert serial.stp == pytest.approx(1.0) and serial.antt == pytest.approx(4.0)
    assert serial.verdict().startswith("sharing does not pay: STP 1.00 with 4 tenants")


def test_the_published_t4_time_slicing_figures_read_as_worse_than_serial():
    # 5 processes: 1.43 s alone, 8.62-8.78 s each time-sliced (serving-sharing-references.md, B.2)
    s = Sharing(1 / 1.43, (1 / 8.62, 1 / 8.70, 1 / 8.78, 1 / 8.65, 1 / 8.70))
    assert s.stp == pytest.approx(0.82, abs=0.01) and s.worst_slowdown == pytest.approx(8.78 / 1.43)
    mps = Sharing(1 / 1.43, (1 / 1.61, 1 / 1.63, 1 / 1.65, 1 / 1.62, 1 / 1.64))
    assert mps.stp == pytest.approx(4.4, abs=0.05)
    assert mps.verdict() == "5 tenants: STP 4.39, each up to 1.2x slower, fairness 0.98"


def test_an_unfair_pair_and_a_starved_tenant():
    s = Sharing(100.0, (90.0, 30.0))
    assert s.fairness == pytest.approx(1 / 3) and s.jain == pytest.approx((1.2**2) / (2 * (0.81 + 0.09)))
    starved = Sharing(100.0, (100.0, 0.0))
    assert starved.antt is None and starved.worst_slowdown is None and "no progress" in starved.verdict()
    with pytest.raises(ValueError):
        Sharing(0.0, (1.0,))


def test_the_common_window_and_rates_inside_it():
    # tenant B starts late and tenant C ends early: the window is [2, 9]
    assert common_window([(0.0, 10.0), (2.0, 12.0), (1.0, 9.0)]) == (2.0, 9.0)
    assert common_window([(0.0, 1.0), (2.0, 3.0)]) is None  # never ran together
    rounds = [(1.0, 2.5, 100), (2.5, 4.0, 100), (4.0, 5.0, 50), (8.5, 9.5, 80)]
    # only the two rounds wholly inside [2, 9]: 150 samples in 2.5 s; the straddling ones ran partly alone
    assert rate_in_window(rounds, (2.0, 9.0)) == pytest.approx(150 / 2.5)
    assert rate_in_window(rounds, (5.5, 8.0)) is None


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        (("cpu", False, None, None), "cpu"),
        (("gpu", True, "default", None), "mig"),
        (("gpu", False, "exclusive_process", 2), "mps"),
        (("gpu", False, "default", 0), "time-slicing"),
        (("gpu", False, None, None), "time-slicing"),
        (("gpu", False, "exclusive_process", 0), None),
        (("gpu", False, "prohibited", None), None),
    ],
)
def test_the_sharing_mode_is_read_from_the_machine(args, mode):
    got, why = sharing_mode(*args)
    assert got == mode and why
    if mode is None:
        assert "refused" in why or "prohibited" in why
