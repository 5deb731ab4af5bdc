"""The fuzz harness's own guard: time_limit fails an input that runs too long, even where the code under test
catches the exception."""
from __future__ import annotations

import signal
import time

import pytest

from .strategies import Timeout, time_limit


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_body_over_its_cpu_budget_is_stopped():
    with pytest.raises(Timeout, match="spinning took more than 1 s of CPU"), time_limit(1, "spinning"):
        _spin(5)


def test_an_expiry_the_body_swallows_still_fails_it():
    with pytest.raises(Timeout, match="swallowing took more than 1 s of CPU"), time_limit(1, "swallowing"):
        try:
            _spin(5)
        except Exception:   # noqa: BLE001 -- the code under test catching everything, as a gc callback's caller does
            pass


def test_a_body_within_its_budget_runs_and_leaves_no_timer():
    with time_limit(2, "waiting"):
        time.sleep(0.2)          # wall time, no CPU: within both limits
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert signal.alarm(0) == 0
