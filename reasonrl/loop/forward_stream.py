"""The forward passes of a step (reference and teacher log-probs, critic values, the policy's old log-probs), run chunk
by chunk.

:class:`StepForwards` (given the role groups and the config values it reads) builds a step's :class:`Experience`.
The step's samples are cut into chunks in sample order, each holding at most ``chunk_tokens`` tokens (prompt +
response; a longer sample is a chunk alone). The cut depends only on the samples, never on timing, so a chunk
computes the same numbers whether it is launched while the engines still generate (``stream_rollout`` under split
placement with ``async_staleness=0``: :meth:`ForwardChunks.add` receives the kept samples as the rollout releases
them: :attr:`ChunkLaunch.STREAMED`) or after the rollout. Each chunk is one call per role (``run_chunk``), sharded
over the role's ranks; the outputs are padded to the step's longest response and concatenated::

    chunk c:  run_chunk(samples of c) -> {role: [batch_c, T_c]}
    step:     {role: cat_c(pad(out_c, T))}  [batch, T],  T = max response length of the step

Calls to one role's ranks are issued in chunk order (each chunk's calls go out together), so every rank of a
ZeRO-3 group runs the same collectives in the same order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Sequence

import torch

from reasonrl.dataplane.completion import Completion
from reasonrl.dataplane.experience import Experience, padded_from_flat
from reasonrl.dataplane.sharding import RankShards
from reasonrl.distributed.handles import CriticHandle, PolicyHandle, RefHandle, RoleHandle

# run_chunk(samples) -> {role: [len(samples), max response length of the chunk] float tensor, or None}
RunChunk = Callable[[list[Completion]], Awaitable[dict[str, torch.Tensor | None]]]


def sample_tokens(c: Completion) -> int:
    """Tokens one sample costs in a forward pass: its prompt and its response."""
    return len(c.prompt_token_ids) + len(c.token_ids)


def response_experience(completions: Sequence[Completion]) -> tuple[Experience, torch.Tensor, int]:
    """``(experience, lengths, width)``: the completions' token ids with their loss mask as ``action_mask``
    ``[batch, T]`` (each completion's ``loss_mask``, holes allowed; the whole response when it has none), their
    response lengths ``[batch]`` and T."""
    samples = [(c.prompt_token_ids, c.token_ids) for c in completions]
    lengths = torch.tensor([len(r) for _, r in samples])
    width = int(lengths.max())
    mask = torch.arange(width)[None, :] < lengths[:, None]  # [batch, T]: the response span
    for i, c in enumerate(completions):
        if c.loss_mask is not None:
            if len(c.loss_mask) != len(c.token_ids):
                raise ValueError(f"completion {i}: {len(c.loss_mask)} loss-mask entries for {len(c.token_ids)} tokens")
            mask[i, : len(c.token_ids)] = torch.tensor(c.loss_mask, dtype=torch.bool)
    images = [c.images or [] for c in completions] if any(c.images for c in completions) else None
    return Experience(samples=samples, action_mask=mask, images=images), lengths, width


def concat_padded(parts: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """``[batch_c, T_c]`` tensors -> one ``[sum batch_c, width]`` tensor (zeros right of each part's width)."""
    out = [torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts]
    return torch.cat(out, dim=0)


def covered_seconds(spans: Sequence[tuple[float, float]], until: float) -> float:
    """Seconds before ``until`` during which at least one span ran (the union of the spans, clipped)."""
    total, reach = 0.0, float("-inf")
    for begin, end in sorted(spans):
        begin, end = max(begin, reach), min(end, until)
        if end > begin:
            total += end - begin
        reach = max(reach, end)
    return total


class ChunkLaunch(enum.Enum):
    """When a step's forward chunks start, and whether they overlap."""

    STREAMED = "streamed"  # each chunk as soon as add() fills it, while the engines still generate
    CONCURRENT = "concurrent"  # all at finish(), together
    SEQUENTIAL = "sequential"  # all at finish(), one after the other (colocate_all: one activation peak)


class ForwardChunks:
    """One step's forwards, chunk by chunk (see the module docstring).

    Args:
        run_chunk: the forwards of one chunk (every role).
        chunk_tokens: tokens per chunk (None or 0: the whole step is one chunk).
        launch: when the chunks start (:class:`ChunkLaunch`).
    """

    def __init__(self, run_chunk: RunChunk, chunk_tokens: int | None, launch: ChunkLaunch):
        self.run_chunk, self.chunk_tokens, self.launch = run_chunk, chunk_tokens, launch
        self.samples: list[Completion] = []
        self._open: list[Completion] = []  # the chunk being filled
        self._open_tokens = 0
        self._chunks: list[list[Completion]] = []
        self._tasks: list[asyncio.Future] = []
        self.launched_early = 0  # set by finish: chunks launched while the rollout was still running
        self.spans: list[tuple[float, float]] = []  # (begin, end) of each chunk's forwards

    def add(self, completions: Sequence[Completion]) -> None:
        """Append samples (in the step's order). A chunk holds at most ``chunk_tokens`` tokens: it is closed (and
        launched when streaming) once exactly full, or before the sample that would overflow it; a sample larger
        than the budget is a chunk alone."""
        for c in completions:
            tokens = sample_tokens(c)
            if self.chunk_tokens and self._open and self._open_tokens + tokens > self.chunk_tokens:
                self._close()
            self.samples.append(c)
            self._open.append(c)
            self._open_tokens += tokens
            if self.chunk_tokens and self._open_tokens >= self.chunk_tokens:
                self._close()

    def _close(self) -> None:
        chunk, self._open, self._open_tokens = self._open, [], 0
        self._chunks.append(chunk)
        if self.launch is ChunkLaunch.STREAMED:
            self._tasks.append(asyncio.ensure_future(self._timed(chunk)))

    async def _timed(self, chunk: list[Completion]) -> dict[str, torch.Tensor | None]:
        begin = time.perf_counter()
        out = await self.run_chunk(chunk)
        self.spans.append((begin, time.perf_counter()))
        return out

    @property
    def num_chunks(self) -> int:
        return len(self._chunks) + bool(self._open)

    async def finish(self, completions: Sequence[Completion]) -> dict[str, torch.Tensor | None]:
        """The outputs of every role for ``completions`` (which must be the samples added, in order; those not
        added yet are added now): ``{role: [batch, T] or None}``."""
        if len(self.samples) > len(completions) or any(
            a is not b for a, b in zip(self.samples, completions, strict=False)
        ):
            raise RuntimeError(
                f"ForwardChunks: the {len(self.samples)} samples streamed are not the first of the step's "
                f"{len(completions)}"
            )
        self.launched_early = len(self._tasks)  # chunks that started before the rollout was complete
        self.add(completions[len(self.samples) :])
        if self._open:
            self._close()
        if self.launch is ChunkLaunch.STREAMED:
            outputs = list(await asyncio.gather(*self._tasks))
        elif self.launch is ChunkLaunch.SEQUENTIAL:
            outputs = [await self._timed(chunk) for chunk in self._chunks]
        else:
            outputs = list(await asyncio.gather(*(self._timed(chunk) for chunk in self._chunks)))
        if not outputs:
            return {}
        width = max(len(c.token_ids) for c in completions)
        return {
            role: None if outputs[0][role] is None else concat_padded([out[role] for out in outputs], width)
            for role in outputs[0]
        }

    async def close(self) -> None:
        """Wait for the chunks already launched (a step abandoned or failed): their calls are queued at the
        workers, so they finish before anything issued later; errors are dropped (the step is gone)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def metrics(self, generated_at: float) -> dict[str, float]:
        """After :meth:`finish`: the chunks, those launched while the rollout ran, and the forward seconds before
        ``generated_at`` (when the rollout was complete)."""
        return {
            "time/forward_overlapped": covered_seconds(self.spans, until=generated_at),
            "perf/forward_chunks": float(self.num_chunks),
            "perf/forward_chunks_early": float(self.launched_early),
        }


@dataclasses.dataclass(frozen=True)
class ForwardSettings:
    """The config values the forwards read (``from_config``)."""

    chunk_tokens: int | None  # forward_chunk_tokens, default one micro-batch's budget per policy rank
    temperature: float = 1.0
    reuses_current_logprobs: bool = False  # no old-log-prob forward: the update takes its own log-probs
    colocate_all: bool = False  # the roles share the devices: one forward at a time
    rollout_correction: str = "off"  # not "off": the experience carries the engines' log-probs
    reference_in_policy: bool = False  # LoRA: the reference is the policy with its adapter switched off

    @classmethod
    def from_config(cls, cfg, policy_world_size: int) -> ForwardSettings:
        return cls(
            chunk_tokens=cfg.forward_chunk_tokens or policy_world_size * cfg.max_tokens_per_micro_batch,
            temperature=cfg.temperature,
            reuses_current_logprobs=cfg.reuses_current_logprobs,
            colocate_all=cfg.colocate_all,
            rollout_correction=cfg.rollout_correction,
            reference_in_policy=cfg.reference_in_policy,
        )


class StepForwards:
    """The forwards of a step: reference log-probs, critic values and (unless the update reuses its own) the
    policy's old log-probs, chunk by chunk, into the step's :class:`Experience`.

    Args:
        policy, ref, critic: the roles' handles (``ref`` / ``critic`` None when the role is disabled; with
            ``settings.reference_in_policy`` the policy computes the reference's log-probs).
        settings: the config values the forwards read.
        teacher: the distillation teacher's handle (``teacher_pretrain``), or None: its log-probs of the sampled
            tokens at the sampling temperature, as the reference's.
    """

    def __init__(
        self,
        policy: PolicyHandle,
        ref: RefHandle | None,
        critic: CriticHandle | None,
        settings: ForwardSettings,
        teacher: RefHandle | None = None,
    ):
        self.policy, self.ref, self.critic, self.settings = policy, ref, critic, settings
        self.teacher = teacher  # the distillation teacher (teacher_pretrain): a frozen reference-class role

    def chunks(self, *, streamed: bool) -> ForwardChunks:
        """The step's forwards in chunks of at most ``chunk_tokens``: launched as the rollout releases samples
        (``streamed``), else all once the rollout is complete, one chunk after the other under colocate_all."""
        if streamed:
            launch = ChunkLaunch.STREAMED
        else:
            launch = ChunkLaunch.SEQUENTIAL if self.settings.colocate_all else ChunkLaunch.CONCURRENT
        return ForwardChunks(self.run_chunk, self.settings.chunk_tokens, launch)

    async def experience(self, completions, chunks: ForwardChunks | None = None) -> Experience:
        """The step's :class:`Experience`: token ids, masks, the engines' log-probs (rollout correction), and the
        reference / critic / policy forwards (:meth:`run_chunk` per chunk; ``chunks`` may have started some while
        the engines generated)."""
        exp, lengths, width = response_experience(completions)
        if self.settings.rollout_correction != "off":  # the engines' log-probs of the sampled tokens: [batch, T]
            flat = torch.tensor([lp for c in completions for lp in c.logprobs], dtype=torch.float32)
            exp.rollout_logprobs = padded_from_flat(flat, lengths, width)
        chunks = chunks or self.chunks(streamed=False)
        done = await chunks.finish(completions)
        exp.old_logprobs = done.get("policy")
        exp.ref_logprobs = done.get("ref")
        exp.old_values = done.get("critic")
        exp.teacher_logprobs = done.get("teacher")
        return exp

    async def run_chunk(self, completions: Sequence[Completion]) -> dict[str, torch.Tensor | None]:
        """Reference / teacher / critic / policy forwards of some samples: ``{role: [batch, T]}`` with T their longest
        response. All roles at once under split placement, one after the other under colocate_all (they share the
        devices: one activation peak).

        Each rank gets its token-balanced shard of token ids (:meth:`RoleHandle.shard`), put in the object store once
        per world size (roles of the same size share it); the handles return the outputs stitched in batch order."""
        s = self.settings
        exp, _, _ = response_experience(completions)
        shards: dict[int, RankShards] = {}  # world size -> the chunk cut and put once, shared by roles of that size

        def cut(role: RoleHandle) -> RankShards:
            if role.world_size not in shards:
                shards[role.world_size] = role.shard(exp, with_fields=False)
            return shards[role.world_size]

        calls: dict[str, Callable[[], Awaitable[torch.Tensor]]] = {}  # role -> its forward, launched when called
        if not s.reuses_current_logprobs:  # else the update takes its own log-probs
            calls["policy"] = lambda: self.policy.logprobs(cut(self.policy), s.temperature)
        if s.reference_in_policy:  # LoRA: the base model is the policy with its adapter switched off
            calls["ref"] = lambda: self.policy.ref_logprobs(cut(self.policy), s.temperature)
        elif self.ref is not None:
            calls["ref"] = lambda: self.ref.logprobs(cut(self.ref), s.temperature)
        if self.teacher is not None:
            calls["teacher"] = lambda: self.teacher.logprobs(cut(self.teacher), s.temperature)
        if self.critic is not None:
            calls["critic"] = lambda: self.critic.values(cut(self.critic))
        if s.colocate_all:
            done = {name: await call() for name, call in calls.items()}
        else:
            jobs = {name: call() for name, call in calls.items()}
            done = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
        return {role: done.get(role) for role in ("policy", "ref", "teacher", "critic")}
