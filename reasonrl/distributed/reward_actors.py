"""Reward work on the cluster: single-CPU Ray actors that score the math and code routes anywhere in the cluster.

With ``reward_num_cpus = N > 0`` the run starts N :class:`RewardActor`s once Ray is up (``reasonrl.run.launch``),
each holding one Ray CPU and no GPU, scheduled ``SPREAD`` (so they land on CPU-only nodes as readily as on the
training nodes). Each actor builds, where it runs, the same scorer the driver would have built, with one worker (a
math verifier with one pool process, a sandbox running one program at a time) and the same per-item timeouts, so
deadlines and verdicts are the driver's. What an actor builds arrives as picklable zero-argument builders
(``reasonrl.rewards.cluster_routes.RouteBuild``): this module never imports ``rewards/`` or ``config/``.

:class:`RewardActors` is the driver's handle of the N actors: :meth:`RewardActors.score` cuts a batch into N
contiguous, nearly equal chunks (``utils.even_split``), sends chunk i to actor i, and returns the results in the
batch's order. :class:`RayScorer` is one route's view of them with the scorer interface
(``scorer(completions, rows) -> list[RewardResult]``, ``wait_ready()``, ``close()``), which the routing scorer
holds for that route while the actors live.

Failures. An actor that dies mid-batch (its process killed, its node lost) is replaced once: a new actor is
started (SPREAD again: another node if its node is gone), and that chunk alone is scored again there; the batch
goes on and :attr:`RewardActors.restarts` counts it, with a warning naming the actor, its node and the error. If
the replacement dies too, :class:`RewardActorError` says which actor, chunk and node. An error raised by the
scorer itself (a bug, not a death) is raised as is. Actors that cannot start (no free CPU in the cluster) are
reported by :meth:`RewardActors.wait_ready` after ``ready_timeout_s`` with the CPUs the cluster has free.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loguru import logger

from reasonrl.utils.even_split import even_bounds


class RewardActorError(RuntimeError):
    """Reward actors that cannot start, or one that died again after it was replaced."""


class RewardActor:
    """One reward actor (created through ``ray.remote`` by :class:`RewardActors`): it builds the scorer of a route
    on first use from ``builds[route]`` (those in ``eager`` at once, so their workers start with the actor) and
    scores one chunk at a time. Its worker processes (verification pool, sandboxed programs) are its children."""

    def __init__(self, builds: Mapping[str, Callable[[], Any]], eager: Sequence[str] = ()):
        self.builds = dict(builds)
        self.scorers: dict[str, Any] = {}
        for kind in eager:
            self._scorer(kind)

    def _scorer(self, kind: str):
        if kind not in self.scorers:
            if kind not in self.builds:
                raise KeyError(f"this reward actor scores {sorted(self.builds)}, not {kind!r}")
            self.scorers[kind] = self.builds[kind]()
        return self.scorers[kind]

    def ready(self) -> dict[str, Any]:
        """Wait until the scorers built so far have their workers up; where the actor runs."""
        import ray

        for scorer in self.scorers.values():
            wait_ready = getattr(scorer, "wait_ready", None)
            if callable(wait_ready):
                wait_ready()
        return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def score(self, kind: str, completions: Sequence[Any], rows: Sequence[dict]) -> list:
        """Route ``kind``'s results of one chunk, in order."""
        return self._scorer(kind)(completions, rows)

    def close(self) -> None:
        """Stop the scorers' workers (the actor is killed right after)."""
        for scorer in self.scorers.values():
            scorer.close()
        self.scorers.clear()


def _wire(completion: Any) -> Any:
    """A completion as sent to an actor: without what the math and code scorers never read (the prompt's tokens,
    log-probs, images), so a chunk's message stays small. Anything that is not a dataclass goes as it is."""
    if not dataclasses.is_dataclass(completion):
        return completion
    slim = {"prompt_token_ids": [], "logprobs": None, "images": None}
    fields = {f.name for f in dataclasses.fields(completion)}
    return dataclasses.replace(completion, **{k: v for k, v in slim.items() if k in fields})


class RewardActors:
    """``num_actors`` :class:`RewardActor`s (``num_cpus=1``, no GPU, ``SPREAD``), each able to build every route
    of ``builds``; those in ``eager`` are built when an actor starts. Creating this object starts the actors without
    waiting; :meth:`wait_ready` waits. ``ready_timeout_s``: how long actors may take to be scheduled and start."""

    def __init__(
        self,
        builds: Mapping[str, Callable[[], Any]],
        num_actors: int,
        *,
        eager: Sequence[str] = (),
        ready_timeout_s: float = 180.0,
    ):
        import ray

        if num_actors < 1:
            raise ValueError(f"num_actors must be >= 1, got {num_actors}")
        self.builds = dict(builds)
        self.eager = tuple(eager)
        self.ready_timeout_s = ready_timeout_s
        self.restarts = 0
        self._cls = ray.remote(RewardActor)
        self._lock = threading.Lock()
        self._closed = False
        self.actors = [self._start() for _ in range(num_actors)]
        self.places: list[dict[str, Any] | None] = [None] * num_actors  # what each actor's ready() said

    def _start(self):
        return self._cls.options(num_cpus=1, num_gpus=0, scheduling_strategy="SPREAD").remote(self.builds, self.eager)

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every actor has started and built its eager routes; :class:`RewardActorError` naming how
        many are missing and the cluster's free CPUs after ``timeout_s`` (default ``ready_timeout_s``)."""
        import ray

        timeout = self.ready_timeout_s if timeout_s is None else timeout_s
        refs = [actor.ready.remote() for actor in self.actors]
        ready, missing = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if missing:
            free = ray.available_resources().get("CPU", 0.0)
            raise RewardActorError(
                f"{len(missing)} of {len(refs)} reward actors (reward_num_cpus) not ready after {timeout:g}s: each "
                f"needs 1 free CPU outside the placement groups and the cluster has {free:g} free now; lower "
                "reward_num_cpus or add (CPU-only) nodes"
            )
        self.places = ray.get(refs)
        nodes = {place["node_id"] for place in self.places}
        logger.info(f"reward actors: {len(self.actors)} on {len(nodes)} node(s), routes {sorted(self.builds)}")

    def score(self, kind: str, completions: Sequence[Any], rows: Sequence[dict]) -> list:
        """Route ``kind``'s results of the batch: contiguous, nearly equal chunks over the actors, in order."""
        import ray

        if self._closed:
            raise RewardActorError("the reward actors are closed")
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
        bounds = even_bounds(len(rows), len(self.actors))
        sent = []
        for i, actor in enumerate(list(self.actors)):
            lo, hi = bounds[i], bounds[i + 1]
            if hi > lo:
                chunk = [_wire(c) for c in completions[lo:hi]]
                sent.append((i, lo, hi, actor, chunk, actor.score.remote(kind, chunk, list(rows[lo:hi]))))
        results: list = [None] * len(rows)
        for i, lo, hi, actor, chunk, ref in sent:
            try:
                part = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                part = self._score_again(i, actor, kind, chunk, list(rows[lo:hi]), err)
            if len(part) != hi - lo:
                raise RewardActorError(f"reward actor {i} returned {len(part)} results for {hi - lo} samples")
            results[lo:hi] = part
        return results

    def _score_again(self, i: int, dead, kind: str, chunk: list, rows: list, err: Exception) -> list:
        """Actor ``i`` (``dead``) died on a chunk: replace it (once per death) and score the chunk there."""
        import ray

        place = self.places[i] or {}
        where = f"node {place.get('node_id', '?')[:12]} (host {place.get('host', '?')}, pid {place.get('pid', '?')})"
        with self._lock:
            if self.actors[i] is dead:  # another batch in flight may have replaced it already
                logger.warning(
                    f"reward actor {i} on {where} died ({type(err).__name__}); a new one scores its {len(chunk)} "
                    "samples again"
                )
                ray.kill(dead, no_restart=True)
                self.actors[i] = self._start()
                self.restarts += 1
                try:
                    self.places[i] = ray.get(self.actors[i].ready.remote(), timeout=self.ready_timeout_s)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as again:
                    raise RewardActorError(
                        f"reward actor {i} died on {where} and its replacement did not start: {again}"
                    ) from err
            actor = self.actors[i]
        try:
            return ray.get(actor.score.remote(kind, chunk, rows))
        except ray.exceptions.RayActorError as again:
            raise RewardActorError(
                f"reward actor {i} died on {where} scoring {len(chunk)} {kind} samples, and its replacement died on "
                f"them too ({type(again).__name__}): {again}"
            ) from err

    def scorer(self, kind: str) -> RayScorer:
        """Route ``kind``'s view of the actors (the scorer interface)."""
        if kind not in self.builds:
            raise KeyError(f"the reward actors score {sorted(self.builds)}, not {kind!r}")
        return RayScorer(self, kind)

    def close(self) -> None:
        """Stop every actor's workers, then kill the actors; safe to call twice."""
        import ray

        if self._closed:
            return
        self._closed = True
        try:
            ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors), timeout=30)
        finally:
            for actor in self.actors:
                ray.kill(actor, no_restart=True)


class RayScorer:
    """Route ``kind`` scored on :class:`RewardActors`, with the scorer interface the routing scorer holds.

    ``close()`` only stops this view from scoring: the actors belong to whoever created the
    :class:`RewardActors` (the run's attempt, whose exit stack closes them), since one set of actors serves every
    cluster route."""

    def __init__(self, actors: RewardActors, kind: str):
        self.actors = actors
        self.kind = kind
        self._closed = False

    def __call__(self, completions: Sequence[Any], rows: Sequence[dict]) -> list:
        if self._closed:
            raise RewardActorError(f"the {self.kind} route's RayScorer is closed")
        return self.actors.score(self.kind, completions, rows)

    def wait_ready(self) -> None:
        self.actors.wait_ready()

    def close(self) -> None:
        self._closed = True
