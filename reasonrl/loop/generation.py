"""Generating and scoring on the vLLM engines: :class:`Generator`, shared by the training rollout, the in-loop eval
and ``python -m reasonrl.eval``.

``Generator.generate_and_score(rows, n=..., temperature=..., seed=...)`` encodes the rows with the template, splits
them evenly over the engines, and scores the completions as they arrive (:mod:`reasonrl.loop.rollout_stream`):
with ``stream_rollout`` each completion as soon as its engine finishes it, else each engine's part as soon as that
engine returns (as ORZ does), while the engines still generate. The result is prompt-major whatever the order
the engines finished in, and each final reward is assembled by :func:`reasonrl.rewards.shaping.final_reward` (the
scorer's reward, the environment's rewards of a multi-turn sample, the learned reward model's score when there is
one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence

import torch

from reasonrl.data.images import with_model_placeholder
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.handles import EngineHandle, RewardModelHandle
from reasonrl.loop.agent_rollout import AgentRollout, AgentSettings, AgentTimes, agent_scored_reward
from reasonrl.loop.multi_turn import EnvTimes, MultiTurnRollout, MultiTurnSettings
from reasonrl.loop.rollout_stream import OnReady, score_as_they_arrive
from reasonrl.rewards.shaping import final_reward
from reasonrl.utils.even_split import even_bounds
from reasonrl.utils.rng import derive_seed

# A scorer turns completions (+ their data rows) into objects with .reward/.correct/.reason (RewardResult).
Scorer = Callable[[Sequence[Completion], Sequence[dict]], list]


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """The config values generation reads (``from_config``): prompt cut, sampling limits, stop strings, streaming."""

    max_prompt_len: int
    generate_max_len: int
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    stream_rollout: bool = False
    multi_turn: MultiTurnSettings | None = None  # env_fn set: each sample is a conversation with an environment
    agents: AgentSettings | None = None  # agent_fn set: each sample is an agent program's gateway session
    # vision-language model: the text its chat template writes for one image (what vLLM expands); a row's
    # ``<image>`` placeholders become it. None for a text model.
    image_placeholder: str | None = None

    @classmethod
    def from_config(cls, cfg) -> GenerationSettings:
        multi_turn = None
        if cfg.env_fn is not None:
            from reasonrl.agents.loading import load_env_factory

            multi_turn = MultiTurnSettings(
                env_factory=load_env_factory(cfg.env_fn, tools=tuple(cfg.tools)),
                max_turns=cfg.max_turns,
                max_observation_tokens=cfg.max_observation_tokens,
                env_step_timeout_s=cfg.env_step_timeout_s,
                check_retokenize=cfg.check_retokenize,
            )
        agents = AgentSettings.from_config(cfg) if getattr(cfg, "agent_fn", None) is not None else None
        return cls(
            max_prompt_len=cfg.max_prompt_len,
            generate_max_len=cfg.generate_max_len,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            stop=tuple(cfg.stop),
            include_stop_str_in_output=cfg.include_stop_str_in_output,
            stream_rollout=cfg.stream_rollout,
            multi_turn=multi_turn,
            agents=agents,
            image_placeholder=model_image_placeholder(cfg.resolve_model_path(cfg.pretrain)),
        )


def row_max_tokens(rows: Sequence[dict | None], generate_max_len: int) -> list[int] | None:
    """Each row's own response-length cap: its ``max_response_tokens`` (an int >= 1; e.g. a per-prompt budget or a
    benchmark's long-tailed lengths), at most ``generate_max_len``; None when no row has one (single-turn only)."""
    if not any(row and row.get("max_response_tokens") is not None for row in rows):
        return None
    caps = []
    for row in rows:
        cap = (row or {}).get("max_response_tokens")
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"row {(row or {}).get('id', '?')!r}: max_response_tokens={cap!r} must be an int >= 1")
        caps.append(generate_max_len if cap is None else min(cap, generate_max_len))
    return caps


def model_image_placeholder(model_path) -> str | None:
    """The image placeholder text of a vision-language model's chat template (None for a text model)."""
    from reasonrl.models.vision import image_placeholder, is_vision_model, load_processor

    if model_path is None or not is_vision_model(model_path):
        return None
    return image_placeholder(load_processor(model_path))


@dataclasses.dataclass
class ScoredGeneration:
    """Completions in prompt-major order (prompt_index into the given rows), their final rewards, and wall times.

    ``generate_s``: from the launch until the LAST engine returned. ``reward_s``: scoring not hidden behind
    generation, i.e. from the last engine's return until every part (and the reward model) was scored.
    ``reward_overlapped_s``: scoring that ran while some engine was still generating. ``model_scores``: the
    learned reward model's score of each completion (empty without one).
    """

    completions: list[Completion]
    results: list
    generate_s: float
    reward_s: float
    reward_overlapped_s: float
    model_scores: list[float] = dataclasses.field(default_factory=list)
    env_times: EnvTimes | None = None  # multi-turn rollouts: time in environments, and how much was not hidden


class Generator:
    """Generation on the vLLM engines and scoring of what they return.

    Args:
        engines: the ``VLLMEngine`` actors; each call splits its prompts evenly over them (contiguous parts).
        tokenizer, template: prompt text (``template.render(row)``) -> token ids, cut to ``max_prompt_len``.
        scorer: ``(completions, rows) -> results`` (the rule or user reward); called in a worker thread, one call at
            a time across every concurrent call of this generator, so a user reward function need not be
            thread-safe.
        settings: the config values generation reads.
        reward_model: the learned reward model's handle, or None; its score is added to each final reward.
        reward_model_encoder: maps policy ``(prompt_ids, response_ids)`` samples to the reward model's vocabulary
            (``reasonrl.models.reward_inputs``); None when both share the tokenizer.
    """

    def __init__(
        self,
        engines: Sequence,
        *,
        tokenizer,
        template,
        scorer: Scorer,
        settings: GenerationSettings,
        reward_model: RewardModelHandle | None = None,
        reward_model_encoder: Callable | None = None,
    ):
        self.engines = [EngineHandle(engine) for engine in engines]
        self.tokenizer, self.template, self.scorer = tokenizer, template, scorer
        self.settings, self.reward_model, self.reward_model_encoder = settings, reward_model, reward_model_encoder
        self._scorer_lock = threading.Lock()
        # Multi-turn samples: an environment's episodes (env_fn) or agent programs' gateway sessions (agent_fn); both
        # run per engine over its request pump, with the same engine_part(...) shape.
        self.multi_turn: MultiTurnRollout | AgentRollout | None = None
        if settings.multi_turn is not None:
            self.multi_turn = MultiTurnRollout(settings.multi_turn, tokenizer)
        elif settings.agents is not None:
            self.multi_turn = AgentRollout(settings.agents, tokenizer)
        # A multi-turn part is many engine calls (pump); it holds its engine's lock from its first call to its last,
        # so that another rollout's turns, an eval or a weight sync (``engines_held``) never land in between.
        self._engine_locks: tuple[asyncio.AbstractEventLoop | None, list[asyncio.Lock]] = (None, [])

    @property
    def agents(self) -> AgentRollout | None:
        """The agent rollout (agent_fn), else None."""
        return self.multi_turn if isinstance(self.multi_turn, AgentRollout) else None

    async def aclose(self) -> None:
        """Release what generation started in the running loop: the agent gateway (agent_fn). Call once the run
        (or an eval loop) is over; a later call starts it again."""
        if self.agents is not None:
            await self.agents.aclose()

    def engine_locks(self) -> list[asyncio.Lock]:
        """One lock per engine, made for the running event loop (an asyncio lock serves one loop; the eval CLI and
        the tests run one loop after another)."""
        loop = asyncio.get_running_loop()
        if self._engine_locks[0] is not loop:
            self._engine_locks = (loop, [asyncio.Lock() for _ in self.engines])
        return self._engine_locks[1]

    @contextlib.asynccontextmanager
    async def engines_held(self):
        """Wait until no multi-turn rollout runs on any engine and keep it so inside the block (the weight sync:
        a rollout launched before it finishes on the weights it started with). Single-turn generation is one
        engine call, ordered by the actor's queue, and never holds a lock."""
        async with contextlib.AsyncExitStack() as held:
            for lock in self.engine_locks():
                await held.enter_async_context(lock)
            yield

    def encode(self, rows: Sequence[dict]) -> list[list[int]]:
        """Prompt token ids (the template's text, tokenized without extra special tokens), cut to max_prompt_len.

        A row with images (vision-language model) keeps one image placeholder per image, written as the model's
        chat template writes it; vLLM expands each into the image's tokens. Its prompt is never cut (that would cut
        image tokens): the check before start-up (``reasonrl.run.vision_check``) bounds its expanded length."""
        ids = []
        for row in rows:
            text = self.template.render(row)
            if row.get("images"):
                text = with_model_placeholder(text, self.settings.image_placeholder)
            tokens = self.tokenizer(text, add_special_tokens=False).input_ids
            ids.append(tokens if row.get("images") else tokens[-self.settings.max_prompt_len :])
        return ids

    def start_generation(
        self,
        rows: Sequence[dict],
        *,
        n: int,
        temperature: float,
        seed: int,
        logprobs: bool = False,
        env_times: EnvTimes | None = None,
    ) -> list[AsyncIterator[list[Completion]]]:
        """Launch ``n`` samples per row, prompts split evenly over the engines (contiguous parts); ``logprobs``:
        each completion carries the engine's log-prob of every sampled token (rollout-policy correction).

        Returns one async iterator per engine that got prompts, yielding lists of finished completions with
        ``prompt_index`` counted over ``rows``: each completion as its engine finishes it with ``stream_rollout``
        (``VLLMEngine.generate_stream``), else the engine's whole part at once (``VLLMEngine.generate``). Both
        give the same completions. Multi-turn (``settings.multi_turn``): each sample is an episode
        (:mod:`reasonrl.loop.multi_turn`), yielded as it ends; ``env_times`` collects the time in environments.
        """
        from reasonrl.distributed.vllm_engine import SamplingConfig

        s = self.settings
        prompt_ids = self.encode(rows)
        bounds = even_bounds(len(rows), len(self.engines))
        parts = []
        for e, engine in enumerate(self.engines):
            if bounds[e] == bounds[e + 1]:
                continue  # fewer prompts than engines
            sampling = SamplingConfig(
                n=n,
                temperature=temperature,
                top_p=s.top_p if temperature > 0 else 1.0,
                top_k=s.top_k if temperature > 0 else 0,
                max_tokens=s.generate_max_len,
                stop=list(s.stop) or None,
                include_stop_str_in_output=s.include_stop_str_in_output,
                seed=derive_seed(seed, e),
                logprobs=logprobs,
            )
            ids = prompt_ids[bounds[e] : bounds[e + 1]]
            images = [row.get("images") or [] for row in rows[bounds[e] : bounds[e + 1]]]
            images = images if any(images) else None
            caps = row_max_tokens(rows[bounds[e] : bounds[e + 1]], s.generate_max_len)
            if self.multi_turn is not None:
                rows_here = rows[bounds[e] : bounds[e + 1]]
                times = env_times if env_times is not None else EnvTimes()
                lock = self.engine_locks()[e]
                parts.append(self.multi_turn.engine_part(engine, rows_here, ids, bounds[e], sampling, times, lock))
                continue
            if s.stream_rollout:  # launched now, on every engine at once; read as it comes (images: a VLM's)
                launched = engine.generate_stream(ids, sampling, images, caps)
            else:
                launched = engine.generate(ids, sampling, images, caps)
            parts.append(_engine_parts(launched, bounds[e], streamed=s.stream_rollout, images=images))
        return parts

    def flow_sampling(self, temperature: float, seed: int, row: dict | None = None):
        """One sample's ``SamplingConfig`` in the fully asynchronous flow (``n = 1``, its own seed, the engine's
        log-prob of every token: the behaviour policy of decoupled PPO; ``row``'s ``max_response_tokens``)."""
        from reasonrl.distributed.vllm_engine import SamplingConfig

        s = self.settings
        return SamplingConfig(
            n=1,
            temperature=temperature,
            top_p=s.top_p if temperature > 0 else 1.0,
            top_k=s.top_k if temperature > 0 else 0,
            max_tokens=(row_max_tokens([row], s.generate_max_len) or [s.generate_max_len])[0],
            stop=list(s.stop) or None,
            include_stop_str_in_output=s.include_stop_str_in_output,
            seed=seed,
            logprobs=True,
        )

    def score_serialised(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list:
        """``scorer(completions, rows)``, one call at a time across every concurrent rollout and eval of this
        generator (asynchronous rollouts score while others generate). Blocking: run it in a worker thread."""
        with self._scorer_lock:
            return self.scorer(completions, rows)

    async def generate_and_score(
        self,
        rows: Sequence[dict],
        *,
        n: int,
        temperature: float,
        seed: int,
        logprobs: bool = False,
        on_ready: OnReady | None = None,
        ready_when_scored: bool = True,
    ) -> ScoredGeneration:
        """Generate ``n`` samples per row and score them as they arrive
        (:func:`reasonrl.loop.rollout_stream.score_as_they_arrive`: each completion as it finishes with
        ``stream_rollout``, else each engine's part), one scorer call at a time, while the engines still generate.

        Completions and results come back prompt-major (prompt index, then sample index), whatever order they
        finished in, so they do not depend on timing as long as the scorer scores each sample on its own (true for
        the built-in rules; a user reward function sees whatever finished together per call). The learned reward
        model, when there is one, scores all completions after the last engine returned (``model_scores`` in that
        order). ``on_ready``: see ``score_as_they_arrive`` (rule scores only).
        """
        env_times = None if self.multi_turn is None else AgentTimes() if self.agents is not None else EnvTimes()
        parts = self.start_generation(
            rows, n=n, temperature=temperature, seed=seed, logprobs=logprobs, env_times=env_times
        )

        def score(completions: list[Completion]) -> list:
            results = self.score_serialised(completions, [rows[c.prompt_index] for c in completions])
            for c, r in zip(completions, results, strict=True):
                if self.agents is not None:  # agent_reward: the verifier's, the agent's or both
                    agent_scored_reward(r, self.settings.agents.reward)
                final_reward(r, env_reward=c.env_reward)  # multi-turn: the environment's per-turn rewards join it
            return results

        completions, results, times = await score_as_they_arrive(
            parts, score, on_ready=on_ready, ready_when_scored=ready_when_scored
        )
        model_scores = await self.add_reward_model_scores(completions, results)
        reward_s = time.perf_counter() - times.generated  # scoring and the reward model after the last engine
        return ScoredGeneration(
            completions, results, times.generate_s, reward_s, times.reward_overlapped_s, model_scores, env_times
        )

    async def add_reward_model_scores(self, completions: Sequence[Completion], results: Sequence) -> list[float]:
        """With a learned reward model: its score joins each final reward (:func:`final_reward`: ``model_score``) and
        return the scores; without one, nothing (an empty list). Everything downstream (dynamic sampling, the
        logged reward, the advantages) sees the same final reward."""
        if self.reward_model is None or not completions:
            return []
        scores = (await self.reward_model_scores(completions)).tolist()
        for r, s in zip(results, scores, strict=True):
            final_reward(r, model_score=s)
        return scores

    async def reward_model_scores(self, completions: Sequence[Completion]) -> torch.Tensor:
        """[batch] scores of the learned reward model, in its own vocabulary (re-tokenised when it differs)."""
        samples = [(c.prompt_token_ids, c.token_ids) for c in completions]
        if self.reward_model_encoder is not None:
            samples = self.reward_model_encoder(samples)
        return await self.reward_model.scores(samples)


async def _engine_parts(launched, offset: int, *, streamed: bool, images: Sequence | None = None):
    """One engine's completions as they come (see ``Generator.start_generation``), prompt_index + ``offset``:
    ``launched`` is what ``EngineHandle.generate`` returns (one part) or ``generate_stream`` (parts as they come).
    ``images``: the images of the engine's prompts (its part of the rows), given to each completion of a prompt."""
    if not streamed:
        yield _with_prompt_offset(await launched, offset, images)
        return
    async for part in launched:
        yield _with_prompt_offset(part, offset, images)


def _with_prompt_offset(part: Sequence[Completion], offset: int, images: Sequence | None = None) -> list[Completion]:
    """One engine's completions with prompt_index counted in the full row list (the engine got rows[offset:]),
    each with its prompt's images (``images`` indexed by the engine's own prompt index) when there are any."""
    for c in part:
        if images is not None:
            c.images = list(images[c.prompt_index])
        c.prompt_index += offset
    return list(part)
