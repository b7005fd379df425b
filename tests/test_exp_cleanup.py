"""The run's cleanups: an ExitStack of ``logged`` callbacks runs them last-registered first, logs a failing one and
still runs the others, on a normal exit, an error and Ctrl-C alike."""

import contextlib

import pytest
from loguru import logger

from reasonrl.run.launch import logged


def run_with_cleanups(body, ran: list[str], warnings: list[str]) -> None:
    """Register three cleanups (the middle one fails) the way ``run()`` does and run ``body`` inside; ``ran`` gets
    the order the cleanups ran in, ``warnings`` the WARNING lines logged."""

    def failing_placement_removal():
        ran.append("placement")
        raise RuntimeError("cluster gone")

    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING")
    try:
        with contextlib.ExitStack() as stack:
            stack.callback(logged, lambda: ran.append("ray"))
            stack.callback(logged, failing_placement_removal)
            stack.callback(logged, lambda: ran.append("engines"))
            body()
    finally:
        logger.remove(sink)


def test_cleanups_run_lifo_and_a_failing_one_is_logged_not_raised():
    ran, warnings = [], []
    run_with_cleanups(lambda: None, ran, warnings)
    assert ran == ["engines", "placement", "ray"]
    assert len(warnings) == 1 and "failing_placement_removal" in warnings[0] and "cluster gone" in warnings[0]


@pytest.mark.parametrize("error", [ValueError("bug in the trainer"), KeyboardInterrupt()])
def test_after_an_error_or_ctrl_c_every_cleanup_runs_and_the_error_propagates(error):
    def body():
        raise error

    ran, warnings = [], []
    with pytest.raises(type(error)) as raised:
        run_with_cleanups(body, ran, warnings)
    assert raised.value is error  # not replaced by the failing cleanup's RuntimeError
    assert ran == ["engines", "placement", "ray"]
    assert len(warnings) == 1 and "cluster gone" in warnings[0]
