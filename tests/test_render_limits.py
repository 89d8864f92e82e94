"""The per-render time limit counts CPU time, so a loaded machine does not turn an ordinary render into a
timeout (the corpus scan once reported 5 ``scenario_timeout`` flags only because other processes held the CPUs),
while a template that never stops computing is still cut off."""

from __future__ import annotations

import time

import pytest

from tito_audit.rendering.guard import RenderTimeout, time_limit


def test_waiting_is_not_rendering() -> None:
    with time_limit(0.2):
        time.sleep(0.5)  # wall time passes, no CPU is spent: what a render sees when the machine is busy


def test_computing_past_the_limit_is_stopped() -> None:
    start = time.process_time()
    with pytest.raises(RenderTimeout, match="CPU time"), time_limit(0.2):
        while True:
            pass
    assert 0.15 < time.process_time() - start < 2.0
