"""``reasonrl.distributed.workers.free_port``: rendezvous ports come from outside the kernel's ephemeral range (where
other processes' outgoing connections take ports at any moment) and from outside Ray's worker ports."""

from __future__ import annotations

import socket

from reasonrl.distributed import workers


def test_the_port_is_free_and_between_rays_worker_ports_and_the_ephemeral_range():
    low = workers._ephemeral_low()
    ports = {workers.free_port() for _ in range(20)}
    assert all(workers.RENDEZVOUS_PORTS_LOW <= port < low for port in ports), ports
    assert len(ports) > 1  # drawn at random, not the seeded `random` state nor a fixed port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", ports.pop()))  # free: it binds


def test_a_taken_port_is_skipped(monkeypatch):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken_port = workers.free_port()  # below the ephemeral range: no other process takes its neighbour meanwhile
        taken.bind(("", taken_port))
        # a range of two ports, the first one taken: the other one is the answer, every time
        monkeypatch.setattr(workers, "RENDEZVOUS_PORTS_LOW", taken_port)
        monkeypatch.setattr(workers, "_ephemeral_low", lambda: taken_port + 2)
        assert {workers.free_port() for _ in range(10)} == {taken_port + 1}


def test_the_ephemeral_range_is_read_from_the_kernel_with_linuxs_default_as_fallback(tmp_path, monkeypatch):
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    monkeypatch.setattr(workers, "EPHEMERAL_RANGE_FILE", str(ranges))
    assert workers._ephemeral_low() == 40000
    monkeypatch.setattr(workers, "EPHEMERAL_RANGE_FILE", str(tmp_path / "missing"))
    assert workers._ephemeral_low() == 32768


def test_an_empty_range_falls_back_to_any_free_port(monkeypatch):
    monkeypatch.setattr(workers, "_ephemeral_low", lambda: workers.RENDEZVOUS_PORTS_LOW)
    port = workers.free_port()
    assert 0 < port < 65536
