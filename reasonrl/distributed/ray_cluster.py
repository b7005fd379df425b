"""Starting (or joining) the Ray cluster reasonrl runs on, and checking the address before anything starts.

On a CPU machine Ray's logical CPU count is oversubscribed: each role is a Ray actor holding one CPU bundle, and
a 2-core box must still host 2 DeepSpeed ranks plus a vLLM engine plus the driver (those actors mostly wait on
each other, so time-sharing the cores is fine). On GPU clusters the real resources are used as reported.

``ray_address`` (or ``RAY_ADDRESS``) is checked by :func:`check_ray_address` before ``ray.init``, with one gRPC
call bounded by a short timeout: ``ray.init`` on an address where no cluster answers retries for minutes (Ray
2.60: 20 connection attempts, each waiting up to about 35 s for the GCS), so an unreachable address, a port that
is not a Ray cluster (the dashboard's 8265, say) or ``auto`` without a running cluster is refused at once with a
:class:`RayClusterError` naming ``ray_address`` (its own type: ``distributed/`` does not import ``config/``; the entry
points report it as the config error it is). Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

from loguru import logger

from reasonrl.utils.cpus import local_ray_cpus

# Seconds the address check may take (one gRPC call); a cluster head answers in milliseconds. With the ~0.6 s the
# command takes to start and validate, an address where nothing answers is refused in under 2 s.
ADDRESS_PROBE_TIMEOUT_S = 1.0
# The GCS method the address check calls: any gRPC answer from it (even "unauthenticated", under Ray's token auth)
# proves a Ray cluster; other gRPC servers answer "unimplemented", closed ports "unavailable".
_GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_HOW = (
    "start the cluster first (`ray start --head --port=6379` on the head node), give the head's GCS address "
    "host:port (6379 by default; not the dashboard's 8265), or set ray_address=none (and unset RAY_ADDRESS) to start "
    "a local Ray instance"
)


class RayClusterError(ValueError):
    """No Ray cluster answers at the address the run was given (``ray_address`` / ``RAY_ADDRESS``), or Ray refused to
    connect: raised before any actor starts. ``problems`` and ``title`` as in ``reasonrl.config.ConfigError``, which
    the entry points raise from it (``ConfigError(err.problems, title=err.title)``)."""

    def __init__(self, problem: str, title: str):
        self.problems = [problem]
        self.title = title
        super().__init__(f"{title}: 1 problem:\n  - {problem}")


def ray_address_file() -> str:
    """Where ``ray start`` records the address of the cluster it started (read by ``ray_address=auto``); Ray
    2.60's ``ray._common.utils.get_ray_address_file``: ``$RAY_TMPDIR``, else ``$TMPDIR`` (Linux), else ``/tmp``,
    then ``ray/ray_current_cluster``."""
    root = os.environ.get("RAY_TMPDIR")
    if root is None:
        root = os.environ.get("TMPDIR") if sys.platform.startswith("linux") and "TMPDIR" in os.environ else "/tmp"
    return os.path.join(root, "ray", "ray_current_cluster")


def resolve_ray_address(address: str | None) -> tuple[str | None, str]:
    """``(target, origin)``: the address ``init_ray(address)`` connects to (None: it starts a local instance) and
    how it was found, for messages. ``"auto"`` means ``RAY_ADDRESS``, else the cluster the last ``ray start`` on
    this machine recorded (:func:`ray_address_file`). Unlike Ray's own ``auto``, a Ray instance another process
    started with ``ray.init()`` is never joined. Raises :class:`RayClusterError` when ``auto`` finds nothing."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if not address:
        return (env, f"ray_address=none takes RAY_ADDRESS={env!r} from the environment") if env else (None, "")
    if address != "auto":
        return address, f"ray_address={address!r}"
    if env:
        return env, f"ray_address='auto' takes RAY_ADDRESS={env!r} from the environment"
    path = ray_address_file()
    try:
        with open(path) as f:
            recorded = f.read().strip()
    except OSError:
        recorded = ""
    if not recorded:
        raise RayClusterError(
            f"ray_address='auto' found no running Ray cluster: RAY_ADDRESS is not set and {path} (written by "
            f"`ray start`) does not exist: {_HOW}",
            title="no Ray cluster",
        )
    return recorded, f"ray_address='auto' resolves to {recorded!r} (recorded by the last `ray start` in {path})"


def _host_port(target: str) -> tuple[str, int] | None:
    rest = target.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    host = host.strip("[]")  # [::1]:6379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        return None
    return host, int(port)


def _probe(target: str, host: str, port: int, timeout: float) -> str | None:
    """None when a Ray cluster answers at ``target`` within ``timeout`` seconds, else what went wrong: a gRPC call
    of the GCS (``host:port``), or a TCP connect for Ray Client (``ray://``), under TLS, or without grpcio."""
    try:
        import grpc
    except ImportError:  # ray[default] brings grpcio; without it, reachable is all we can tell
        grpc = None
    if grpc is None or target.startswith("ray://") or os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except TimeoutError:
            return f"no answer within {timeout:g} s"
        except OSError as err:
            return err.strerror or str(err) or type(err).__name__
        return None
    channel = grpc.insecure_channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    try:
        channel.unary_unary(_GCS_METHOD, request_serializer=bytes, response_deserializer=bytes)(b"", timeout=timeout)
    except grpc.RpcError as err:
        code, details = err.code(), (err.details() or "").strip()
        if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return None  # a GCS that wants Ray's auth token: Ray sends it
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"no answer within {timeout:g} s"
        if code == grpc.StatusCode.UNAVAILABLE:
            return f"unreachable, or not a Ray cluster: {details.split('last error: ')[-1]}"
        return (
            f"something answers there, but it is not a Ray cluster's GCS (gRPC {code.name}: {details}); the "
            "dashboard (8265) and Ray Client (10001) ports are not the cluster address"
        )
    finally:
        channel.close()
    return None


def check_ray_address(address: str | None, timeout: float = ADDRESS_PROBE_TIMEOUT_S) -> str | None:
    """The address ``init_ray(address)`` will connect to (None: a new local instance), after checking that a Ray
    cluster answers there within ``timeout`` seconds (one gRPC call of its GCS, :func:`_probe`).
    Raises :class:`RayClusterError` naming ``ray_address`` (and ``RAY_ADDRESS`` when it came from there)."""
    target, origin = resolve_ray_address(address)
    if target is None:
        return None
    parsed = _host_port(target)
    if parsed is None:
        problem = (
            f"{origin}: not an address: give host:port (e.g. 10.0.0.1:6379), ray://host:port for Ray Client, "
            "'auto' for the cluster `ray start` started on this machine, or none for a local Ray instance"
        )
        raise RayClusterError(problem, title="bad Ray address")
    failure = _probe(target, *parsed, timeout=timeout)
    if failure is not None:
        raise RayClusterError(f"{origin}: no Ray cluster at {target} ({failure}): {_HOW}", title="no Ray cluster")
    return target


class AddressCheck:
    """:func:`check_ray_address` of ``address`` run in a thread from the moment this is made, so that waiting for a
    cluster that does not answer overlaps the run's other start-up checks; :meth:`result` waits for it and returns
    or raises as :func:`check_ray_address` would. No thread when there is no address to check (a local instance).
    Not a daemon: an exit meanwhile waits for the check (at most ``timeout``), so gRPC is never torn down mid-call."""

    def __init__(self, address: str | None, timeout: float = ADDRESS_PROBE_TIMEOUT_S):
        self.address = address
        self._target: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        try:
            needed = resolve_ray_address(address)[0] is not None
        except RayClusterError:
            needed = True  # raised again by the check itself
        if needed:
            self._thread = threading.Thread(target=self._check, args=(timeout,), name="ray-address-check")
            self._thread.start()

    def _check(self, timeout: float) -> None:
        try:
            self._target = check_ray_address(self.address, timeout)
        except BaseException as err:  # noqa: BLE001 - handed to the caller of result()
            self._error = err

    def result(self) -> str | None:
        """The address ``init_ray`` will connect to (None: a new local instance); :class:`RayClusterError` when
        no cluster answers there."""
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._target


def init_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_memory: int | None = None,
    device: str | None = None,
    **ray_kwargs,
):
    """Connect to ``address`` (``"auto"`` after ``ray start --head``, or host:port) or, without an address and
    without ``RAY_ADDRESS``, start a new local Ray instance (never joining one another process started).

    The address is checked first (:func:`check_ray_address`, :class:`RayClusterError` when no cluster answers), and
    a connection Ray refuses is a :class:`RayClusterError` too. ``device`` (the config's ``device``) sizes the local
    instance (:func:`reasonrl.utils.cpus.local_ray_cpus`) unless ``num_cpus`` is given. Every worker process of a
    local instance inherits :func:`reasonrl.distributed.platform.runtime_env_vars` of this machine; on a cluster
    joined by address only the device-independent :func:`~reasonrl.distributed.platform.common_env_vars` (the
    driver's machine says nothing about the workers' devices: each actor gets its placement's environment,
    ``RolePlacement.actor_options``).
    Returns the cluster's resources. Calling it twice is harmless (the second call returns the running cluster's
    resources). ``ray_kwargs`` go to ``ray.init`` as they are (e.g. ``_temp_dir``).
    """
    import ray

    from reasonrl.distributed.platform import common_env_vars, has_cuda, runtime_env_vars

    if ray.is_initialized():
        return ray.cluster_resources()
    target = check_ray_address(address)
    local_gpu = device == "gpu" or (device != "cpu" and has_cuda())  # a local instance is this machine
    env = common_env_vars() if target is not None else runtime_env_vars(on_gpu=local_gpu)
    kwargs = dict(runtime_env={"env_vars": env}, include_dashboard=False, log_to_driver=True)
    kwargs |= ray_kwargs
    if target is not None:
        try:
            ray.init(address=target, **kwargs)
        except ConnectionError as err:
            raise RayClusterError(
                f"ray_address={address!r}: Ray could not connect to {target} ({err}): {_HOW}", title="no Ray cluster"
            ) from err
    else:
        if num_cpus is None:
            num_cpus = local_ray_cpus(local_gpu)
        # No idle workers started ahead for the first driver (Ray starts one per CPU, up to the machine's cores):
        # every actor of a run carries its role's runtime environment, so none of them could take such a worker
        # (~0.5 CPU-s each, wasted per local instance).
        kwargs.setdefault("_system_config", {"prestart_worker_first_driver": False})
        ray.init(address="local", num_cpus=num_cpus, object_store_memory=object_store_memory, **kwargs)
    resources = ray.cluster_resources()
    logger.info(f"Ray cluster resources: { {k: v for k, v in resources.items() if not k.startswith('node:')} }")
    return resources


def shutdown_ray() -> None:
    """Stop the local Ray instance (or disconnect from a remote one)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
