"""Worker lines in the run's train.log (reasonrl.utils.worker_logs) and the phase shown on the progress bar."""

import io
import os
import subprocess
import sys
import textwrap

import pytest
from loguru import logger

from reasonrl.utils import worker_logs
from reasonrl.utils.tracking import Tracker
from reasonrl.utils.worker_logs import LOG_FILE_ENV, exported_log_file, install_worker_log_sink


def test_without_the_variable_no_sink_is_installed(monkeypatch):
    monkeypatch.delenv(LOG_FILE_ENV, raising=False)
    assert install_worker_log_sink("PolicyWorker rank 0") is None


def test_worker_sink_appends_prefixed_warnings_and_tracebacks(tmp_path, monkeypatch):
    log_file = tmp_path / "run" / "train.log"
    log_file.parent.mkdir()
    log_file.write_text("driver line\n")
    monkeypatch.setenv(LOG_FILE_ENV, str(log_file))
    monkeypatch.setattr(worker_logs, "_installed", {})
    sink = install_worker_log_sink("PolicyWorker rank 1")
    try:
        assert install_worker_log_sink("PolicyWorker rank 1") is None  # one sink per file and process
        logger.info("an info line stays on the console only")
        logger.warning("gradient norm is nan")
        try:
            int("not a number")
        except ValueError:
            logger.exception("update failed")
    finally:
        logger.remove(sink)
    lines = log_file.read_text().splitlines()
    assert lines[0] == "driver line"  # appended, never truncated
    prefix = f"| PolicyWorker rank 1 pid {os.getpid()} |"
    warning = next(line for line in lines if "gradient norm is nan" in line)
    assert "| WARNING  |" in warning and prefix in warning
    error = next(line for line in lines if "update failed" in line)
    assert "| ERROR    |" in error and prefix in error
    assert any("ValueError: invalid literal" in line for line in lines)  # the traceback follows the error line
    assert not any("an info line" in line for line in lines)


def test_processes_started_inside_exported_log_file_append_to_the_same_file(tmp_path, monkeypatch):
    """What a Ray worker of the local instance does: inherit the variable, install the sink, log."""
    monkeypatch.delenv(LOG_FILE_ENV, raising=False)
    log_file = tmp_path / "train.log"
    script = textwrap.dedent(
        """
        import sys
        from loguru import logger
        from reasonrl.utils.worker_logs import install_worker_log_sink
        install_worker_log_sink(f"VLLMEngine {sys.argv[1]}")
        for i in range(50):
            logger.warning(f"line {i} of worker {sys.argv[1]}")
        """
    )
    with exported_log_file(log_file) as path:
        assert os.environ[LOG_FILE_ENV] == str(path) and path.is_absolute()
        workers = [subprocess.Popen([sys.executable, "-c", script, str(w)], stderr=subprocess.DEVNULL) for w in "ab"]
        assert [w.wait(timeout=120) for w in workers] == [0, 0]
    assert LOG_FILE_ENV not in os.environ  # restored after the block
    lines = log_file.read_text().splitlines()
    assert len(lines) == 100 and all(line.endswith(f"of worker {line.split()[-1]}") for line in lines)
    for w in "ab":
        assert sum(f"| VLLMEngine {w} pid " in line for line in lines) == 50


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_shows_the_current_phase(tmp_path, monkeypatch):
    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    with Tracker(tmp_path, "bar", progress_total=4, progress_bar=True, log_file=False, summary_plot=False) as tracker:
        tracker.set_phase("update")
        assert "phase=update" in screen.getvalue().split("\r")[-1]
        tracker.advance(1, {"reward": 0.25})
        last = screen.getvalue().split("\r")[-1]
        assert "1/4" in last and "reward=0.25" in last and "phase" not in last  # a finished step shows no phase
        tracker.set_phase("sync")
        last = screen.getvalue().split("\r")[-1]
        assert "phase=sync" in last and "reward=0.25" in last


@pytest.mark.integration
def test_ray_workers_of_a_local_instance_write_into_the_drivers_train_log(tmp_path):
    """A fresh driver process (its own local Ray instance): a DistributedWorker actor's warning lands in the file
    exported before init_ray, prefixed with the worker; the actors' environment keeps vLLM's INFO lines off."""
    script = textwrap.dedent(
        f"""
        import os, ray
        from reasonrl.distributed.ray_cluster import init_ray
        from reasonrl.distributed.workers import DistributedWorker
        from reasonrl.utils.worker_logs import exported_log_file

        class NoisyWorker(DistributedWorker):
            def warn(self):
                from loguru import logger  # the worker's own logger (a global of __main__ would travel pickled)

                logger.warning("worker warning for the run log")
                return os.environ.get("VLLM_LOGGING_LEVEL")

        with exported_log_file({str(tmp_path / "train.log")!r}):
            init_ray(device="cpu", num_cpus=1)
            try:
                actor = ray.remote(num_cpus=0)(NoisyWorker).remote(3, 4)
                print("VLLM_LOGGING_LEVEL", ray.get(actor.warn.remote()))
            finally:
                ray.shutdown()
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in (LOG_FILE_ENV, "RAY_ADDRESS", "VLLM_LOGGING_LEVEL")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "VLLM_LOGGING_LEVEL WARNING" in out.stdout
    (line,) = [line for line in (tmp_path / "train.log").read_text().splitlines() if "worker warning" in line]
    assert "| WARNING  | NoisyWorker rank 3 pid " in line
