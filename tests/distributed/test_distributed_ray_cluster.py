"""``reasonrl.distributed.ray_cluster``: the Ray address is resolved and checked before ``ray.init`` (bounded, with a
message naming ``ray_address``), and the local instance's size is known before it starts. No Ray is started here:
the gRPC checks talk to small servers of the test itself."""

from __future__ import annotations

import http.server
import os
import threading
from concurrent import futures

import grpc
import pytest

import reasonrl.distributed.ray_cluster as rc
from reasonrl.config import resources


@pytest.fixture(autouse=True)
def _no_ray_env(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no `ray start` record unless a test writes one


def _grpc_server(code: grpc.StatusCode | None):
    """A gRPC server on a free port whose GCS method fails with ``code`` (None: the method does not exist)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    if code is not None:

        def handler(request, context):
            context.abort(code, "test server")

        method = grpc.unary_unary_rpc_method_handler(handler, request_deserializer=bytes, response_serializer=bytes)
        service, name = rc._GCS_METHOD.strip("/").split("/")
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service, {name: method})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_no_address_starts_a_local_instance_unless_ray_address_is_set(monkeypatch):
    assert resources.starts_local_ray(None) and rc.resolve_ray_address(None) == (None, "")
    assert rc.check_ray_address(None) is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert not resources.starts_local_ray(None)
    target, origin = rc.resolve_ray_address(None)
    assert target == "10.0.0.1:6379" and "ray_address=none" in origin and "RAY_ADDRESS" in origin


def test_auto_reads_the_ray_start_record_and_refuses_without_one(tmp_path):
    with pytest.raises(rc.RayClusterError) as info:
        rc.resolve_ray_address("auto")
    assert "ray_address='auto' found no running Ray cluster" in str(info.value)
    assert str(tmp_path / "ray" / "ray_current_cluster") in str(info.value)
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.7:6379\n")
    target, origin = rc.resolve_ray_address("auto")
    assert target == "10.0.0.7:6379" and "ray start" in origin


@pytest.mark.parametrize(
    "env", [{}, {"RAY_TMPDIR": "/r"}, {"TMPDIR": "/t"}, {"RAY_TMPDIR": "/r", "TMPDIR": "/t"}], ids=str
)
def test_address_file_is_where_ray_looks(env, monkeypatch):
    from ray._common.utils import get_ray_address_file

    for key in ("RAY_TMPDIR", "TMPDIR"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert rc.ray_address_file() == get_ray_address_file(None)


@pytest.mark.parametrize("address", ["local", "foo", "10.0.0.1", "10.0.0.1:notaport", "10.0.0.1:70000", "h:0"])
def test_malformed_address_is_refused_naming_the_field(address):
    with pytest.raises(rc.RayClusterError) as info:
        rc.check_ray_address(address)
    assert f"ray_address={address!r}: not an address" in str(info.value)


def test_refused_port_is_refused_at_once():
    with pytest.raises(rc.RayClusterError) as info:
        rc.check_ray_address("127.0.0.1:1", timeout=1.0)
    assert "ray_address='127.0.0.1:1': no Ray cluster at 127.0.0.1:1 (unreachable" in str(info.value)
    assert "ray start --head" in str(info.value)


def test_a_web_server_is_not_a_cluster():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(rc.RayClusterError) as info:
            rc.check_ray_address(f"127.0.0.1:{server.server_address[1]}", timeout=1.0)
    finally:
        server.shutdown()
    assert "no Ray cluster at 127.0.0.1:" in str(info.value)


def test_a_grpc_server_without_the_gcs_method_is_not_a_cluster():
    server, address = _grpc_server(None)
    try:
        with pytest.raises(rc.RayClusterError) as info:
            rc.check_ray_address(address, timeout=1.0)
    finally:
        server.stop(None)
    assert "not a Ray cluster's GCS (gRPC UNIMPLEMENTED" in str(info.value)


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED])
def test_a_gcs_that_wants_a_token_is_a_cluster(code):
    server, address = _grpc_server(code)
    try:
        assert rc.check_ray_address(address, timeout=1.0) == address
    finally:
        server.stop(None)


def test_a_silent_server_times_out_within_the_bound():
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts TCP (kernel backlog) but never speaks
    try:
        start = time.perf_counter()
        with pytest.raises(rc.RayClusterError) as info:
            rc.check_ray_address(f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.5)
        assert time.perf_counter() - start < 2.0
    finally:
        listener.close()
    assert "no answer within 0.5 s" in str(info.value) or "unreachable" in str(info.value)


def test_address_check_runs_in_the_background_and_raises_on_result(monkeypatch):
    """``AddressCheck`` probes from the moment it is made (``run_recipe`` makes it before validating, so a silent
    address's timeout overlaps the config checks); no thread without an address; ``result()`` raises as
    ``check_ray_address`` does."""
    assert rc.AddressCheck(None)._thread is None and rc.AddressCheck(None).result() is None
    started = threading.Event()

    def slow_probe(target, host, port, timeout):
        started.set()
        return "no answer within 1 s"

    monkeypatch.setattr(rc, "_probe", slow_probe)
    check = rc.AddressCheck("10.0.0.1:6379")
    assert started.wait(5)  # under way before anyone asks for the result
    with pytest.raises(rc.RayClusterError, match=r"ray_address='10.0.0.1:6379': no Ray cluster at 10.0.0.1:6379"):
        check.result()
    with pytest.raises(rc.RayClusterError, match="not an address"):
        rc.AddressCheck("local").result()


def test_local_instance_size():
    assert resources.local_num_cpus("cpu") == max(resources.CPU_OVERSUBSCRIBE_MIN, os.cpu_count() or 1)
    assert resources.local_num_cpus("gpu") is None


def test_init_ray_refuses_before_ray_init_and_starts_local_explicitly(monkeypatch):
    import ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0})
    with pytest.raises(rc.RayClusterError, match="ray_address='127.0.0.1:1'"):
        rc.init_ray("127.0.0.1:1")
    assert calls == []  # ray.init never ran
    assert rc.init_ray(None, device="cpu") == {"CPU": 8.0}
    assert calls[-1]["address"] == "local" and calls[-1]["num_cpus"] == resources.local_num_cpus("cpu")
    assert calls[-1]["_system_config"] == {"prestart_worker_first_driver": False}  # no idle workers no actor can use

    def refuse(**kwargs):
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(rc, "_probe", lambda *args, **kwargs: None)
    with pytest.raises(rc.RayClusterError, match=r"ray_address='10\.0\.0\.1:6379': Ray could not connect"):
        rc.init_ray("10.0.0.1:6379")


@pytest.mark.integration
def test_a_real_cluster_passes_the_check(ray_cluster):
    import ray

    address = ray.get_runtime_context().gcs_address
    assert rc.check_ray_address(address) == address
