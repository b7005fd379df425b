"""StopSignals: the first SIGINT/SIGTERM is a request, the second stops at once; handlers are restored."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from reasonrl.utils.interrupt import StopSignals, TrainingInterrupted


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_first_signal_requests_a_stop_second_raises(signum):
    before = signal.getsignal(signum)
    with StopSignals() as stop:
        assert stop.requested is None
        os.kill(os.getpid(), signum)
        assert stop.requested == signum and stop.describe() == signal.Signals(signum).name
        with pytest.raises(KeyboardInterrupt, match="second signal"):
            os.kill(os.getpid(), signum)
    assert signal.getsignal(signum) is before


def test_outside_the_main_thread_nothing_is_installed():
    seen = {}

    def body():
        with StopSignals() as stop:
            seen["handler"] = signal.getsignal(signal.SIGINT)
            seen["requested"] = stop.requested

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == {"handler": before, "requested": None}


def test_training_interrupted_exit_codes_and_message(tmp_path):
    err = TrainingInterrupted(signal.SIGTERM, 3, tmp_path / "step_3")
    assert err.exit_code == 143 and "SIGTERM after step 3" in str(err) and "step_3" in str(err)
    assert isinstance(err, KeyboardInterrupt)
    assert TrainingInterrupted(signal.SIGINT, 0).exit_code == 130


def test_install_again_takes_the_handler_back_and_restores_the_first_one():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what ray.init's core worker does (with an abort handler)
        stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
