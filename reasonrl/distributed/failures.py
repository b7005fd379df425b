"""Telling a dead worker from a bug: which failures of a run mean "an actor died" (restart and resume), and which
are ordinary errors (raise).

An actor that dies (killed, out of memory, its node gone) shows up in the driver as a Ray actor/worker error on the
call that needed it, or, for a collective call, as an error of a SURVIVING rank (gloo/NCCL: connection closed by
peer) that Ray wraps in ``RayTaskError``. So :func:`dead_roles` asks every actor of the run whether it still
answers; only when one does not is the failure a death.
"""

from __future__ import annotations

from collections.abc import Iterable

from loguru import logger


def death_errors() -> tuple[type[BaseException], ...]:
    """Ray's errors that by themselves mean a worker process or node is gone."""
    import ray.exceptions as rex

    return (rex.RayActorError, rex.WorkerCrashedError, rex.OutOfMemoryError, rex.NodeDiedError, rex.ObjectLostError)


def dead_roles(actors: Iterable[tuple[str, object]], timeout_s: float = 30.0) -> list[str]:
    """Names of the ``(name, actor handle)`` pairs whose actor no longer answers a no-op call."""
    import ray

    named = list(actors)
    refs = [actor.__ray_ready__.remote() for _, actor in named]
    dead = []
    for (name, _), ref in zip(named, refs, strict=True):
        try:
            ray.get(ref, timeout=timeout_s)
        except death_errors():
            dead.append(name)
        except ray.exceptions.GetTimeoutError:
            logger.warning(f"{name} did not answer within {timeout_s:.0f}s; counted as dead")
            dead.append(name)
    return dead


def run_actors(roles) -> list[tuple[str, object]]:
    """Every actor of a :class:`reasonrl.loop.trainer.Roles`, named ``policy[0]``, ``engine[1]``, ..."""
    out = []
    for role in ("policy", "ref", "teacher", "critic", "reward_model"):
        group = getattr(roles, role, None)
        if group is not None:
            out += [(f"{role}[{i}]", actor) for i, actor in enumerate(group.actors)]
    out += [(f"engine[{i}]", engine) for i, engine in enumerate(roles.engines)]
    return out
