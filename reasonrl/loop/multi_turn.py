"""Multi-turn rollouts: each sample is its own conversation with an environment, stepped over the vLLM engines.

Per engine, one asyncio task drives that engine's request pump (``VLLMEngine.pump``): every call adds the turns
whose observations are ready and returns the turns that finished, while the environments of the others run in worker
threads. A sample waiting for its tool never holds back the rest: the engine keeps generating the others
(continuous batching across turns), and its next turn joins the running batch on the next pump call.

One sample, turn by turn (:class:`reasonrl.agents.episode.Episode` keeps the tokens)::

    env = env_factory(); env.reset(row)
    ids = prompt
    loop:  turn = engine(ids, max_tokens = budget left, seed = turn seed)      # ids kept verbatim, trained on
           stop when the turn hit the budget, at the turn cap, or when env.step(turn text).done
           obs = tool-message tokens of env.step(...).observation             # appended, masked out of the loss

Seeds: turn 0 of sample ``j`` of prompt ``i`` on an engine is seeded exactly as ``VLLMEngine.generate_stream`` seeds
it (``seed + i * n + j``), so a run whose model never calls a tool equals the single-turn rollout token for token;
turn ``k > 0`` uses ``derive_seed(that seed, k)``. Nothing depends on timing.

An environment that raises, hangs past ``env_step_timeout_s`` or returns something that is not a
:class:`~reasonrl.agents.environment.StepResult` ends its sample (with what it has so far) and is counted; the run
goes on. A hung step's thread cannot be killed: it keeps one worker of the pool until it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from loguru import logger

from reasonrl.agents.chat_tokens import ChatTemplateError, ToolMessageTokens, retokenize_difference
from reasonrl.agents.environment import StepResult
from reasonrl.agents.episode import CUT_MARKER, Episode
from reasonrl.dataplane.completion import Completion, TurnRequest
from reasonrl.distributed.handles import EngineHandle
from reasonrl.utils.rng import derive_seed


@dataclasses.dataclass(frozen=True)
class MultiTurnSettings:
    """The config values of multi-turn rollouts (``BasePPOExpConfig.multi_turn_settings``).

    ``env_factory``: builds one environment per sample (no arguments). ``max_turns``: model turns per sample.
    ``max_observation_tokens``: an observation longer than this is cut in the middle. ``env_step_timeout_s``: one
    environment step's deadline. ``check_retokenize``: compare every finished sample with a one-piece re-render of
    its conversation and log the first differing position. ``env_workers``: threads running environment steps.
    """

    env_factory: Callable[[], object]
    max_turns: int = 4
    max_observation_tokens: int = 256
    env_step_timeout_s: float = 30.0
    check_retokenize: bool = False
    env_workers: int = 32


@dataclasses.dataclass
class EnvTimes:
    """Wall time in environments during one rollout: ``env_s`` summed over steps; ``exposed_s``: time an engine's
    loop waited on environments with nothing left to generate (not hidden behind generation)."""

    env_s: float = 0.0
    exposed_s: float = 0.0
    retokenize_mismatches: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def add_env(self, seconds: float) -> None:
        """Count one environment step's wall time (called from the worker threads)."""
        with self._lock:
            self.env_s += seconds


class MultiTurnRollout:
    """Runs episodes on the engines (see the module docstring). One instance per generator; safe for concurrent
    rollouts (each call has its own state)."""

    def __init__(self, settings: MultiTurnSettings, tokenizer):
        self.settings, self.tokenizer = settings, tokenizer
        self.tool_tokens = ToolMessageTokens.from_tokenizer(tokenizer)
        self.executor = ThreadPoolExecutor(max_workers=settings.env_workers, thread_name_prefix="reasonrl-env")

    async def engine_part(
        self,
        engine: EngineHandle,
        rows: Sequence[dict],
        prompt_ids: Sequence[list[int]],
        offset: int,
        sampling,
        times: EnvTimes,
        lock: asyncio.Lock | None = None,
    ) -> AsyncIterator[list[Completion]]:
        """Run ``sampling.n`` episodes per prompt on ``engine``; yield finished samples as they end, as
        :class:`Completion` s with ``prompt_index`` counted from ``offset`` (``rows[i]`` is prompt ``i`` here).

        ``lock`` (the engine's, ``Generator.engine_locks``) is held from the first turn to the last: the engine's
        request pump serves one rollout at a time, and a weight sync waits for the rollouts launched before it."""
        async with lock if lock is not None else contextlib.nullcontext():
            async with contextlib.aclosing(self._episodes(engine, rows, prompt_ids, offset, sampling, times)) as parts:
                async for ended in parts:  # closed with this generator: its requests are aborted
                    yield ended

    async def _episodes(self, engine, rows, prompt_ids, offset, sampling, times) -> AsyncIterator[list[Completion]]:
        n = sampling.n
        episodes: dict[str, tuple[Episode, object, int, int, int]] = {}  # key -> (episode, env, i, j, turn-0 seed)
        ready: list[TurnRequest] = []
        for i, ids in enumerate(prompt_ids):
            for j in range(n):
                key = f"{offset + i}/{j}"
                seed = None if sampling.seed is None else sampling.seed + i * n + j
                episode = Episode(list(ids), budget=sampling.max_tokens, max_turns=self.settings.max_turns)
                env = await self._new_env(rows[i], episode)
                episodes[key] = (episode, env, offset + i, j, seed)
                ready.append(self._request(key, episode, sampling, seed))
        in_engine = 0
        stepping: dict[asyncio.Future, str] = {}
        try:
            while ready or in_engine or stepping:
                if not ready and not in_engine:  # nothing to generate until an environment answers
                    waited = time.perf_counter()
                    await asyncio.wait(list(stepping), return_when=asyncio.FIRST_COMPLETED)
                    times.exposed_s += time.perf_counter() - waited
                if ready or in_engine:
                    finished = await engine.pump(ready, 0.2)
                    in_engine += len(ready) - len(finished)
                    ready = []
                else:
                    finished = []
                ended: list[Completion] = []
                for key, turn in finished:
                    episode, env, *_ = episodes[key]
                    episode.add_model_turn(turn.token_ids, turn.logprobs, turn.text, turn.finish_reason)
                    if episode.done or env is None:
                        episode.finish(episode.finish_reason)
                        ended.append(self._finish(key, episodes, sampling, times))
                    else:
                        stepping[self._step(env, turn.text, times)] = key
                for future in [f for f in stepping if f.done()]:
                    key = stepping.pop(future)
                    episode, env, *_, seed = episodes[key]
                    if self._apply_step(episode, future, turn_ended_with_eos=_ended_with_eos(episode, self)):
                        ready.append(self._request(key, episode, sampling, seed))
                    else:
                        ended.append(self._finish(key, episodes, sampling, times))
                if ended:
                    yield ended
        finally:
            if in_engine:
                await engine.abort_pumped()
            for _, env, *_ in episodes.values():
                _close(env)

    # ------------------------------------------------------------------------------------------------ pieces
    async def _new_env(self, row: dict, episode: Episode):
        """A fresh environment, reset on ``row`` (in a worker thread); None, with the error on the episode, when
        building or resetting it fails: the sample then gets one model turn and no environment."""
        loop = asyncio.get_running_loop()

        def build():
            env = self.settings.env_factory()
            env.reset(row)
            return env

        try:
            return await asyncio.wait_for(loop.run_in_executor(self.executor, build), self.settings.env_step_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a user environment may raise anything; counted, not raised
            episode.error = f"environment reset failed: {type(exc).__name__}: {exc}"
            return None

    def _step(self, env, text: str, times: EnvTimes) -> asyncio.Future:
        loop = asyncio.get_running_loop()

        def timed_step():
            start = time.perf_counter()
            try:
                return env.step(text)
            finally:
                times.add_env(time.perf_counter() - start)

        step = loop.run_in_executor(self.executor, timed_step)
        return asyncio.ensure_future(asyncio.wait_for(step, self.settings.env_step_timeout_s))

    def _apply_step(self, episode: Episode, future: asyncio.Future, *, turn_ended_with_eos: bool) -> bool:
        """Apply one finished environment step to ``episode``; True when it continues with another model turn."""
        try:
            result = future.result()
        except TimeoutError:
            episode.finish("stop", f"environment step passed its {self.settings.env_step_timeout_s:g}s deadline")
            return False
        except Exception as exc:  # noqa: BLE001 - a user environment may raise anything; counted, not raised
            episode.finish("stop", f"environment step raised {type(exc).__name__}: {exc}")
            return False
        if not isinstance(result, StepResult):
            episode.finish("stop", f"environment step returned {type(result).__name__}, not a StepResult")
            return False
        try:
            episode.env_reward += float(result.reward)
        except (TypeError, ValueError):
            episode.finish("stop", f"environment step returned reward {result.reward!r}, not a number")
            return False
        episode.turns[-1]["info"] = result.info if isinstance(result.info, dict) else {}
        if result.done:
            episode.finish("stop")
            return False
        if episode.model_turns >= episode.max_turns:
            episode.finish("stop")
            return False
        if not isinstance(result.observation, str):
            episode.finish("stop", f"environment step returned observation {type(result.observation).__name__}")
            return False
        text, cut = self._capped_observation(result.observation)
        ids = self.tool_tokens.observation_ids(self.tokenizer, text, turn_ended_with_eos=turn_ended_with_eos)
        return episode.add_observation(ids, text, cut=cut)

    def _capped_observation(self, observation: str) -> tuple[str, bool]:
        """The observation cut in the middle to ``max_observation_tokens`` (first and last halves kept)."""
        cap = self.settings.max_observation_tokens
        ids = self.tokenizer(observation, add_special_tokens=False).input_ids
        if len(ids) <= cap:
            return observation, False
        head, tail = ids[: cap // 2], ids[len(ids) - (cap - cap // 2) :]
        marker = CUT_MARKER.format(len(ids) - cap).replace("characters", "tokens")
        return self.tokenizer.decode(head) + marker + self.tokenizer.decode(tail), True

    def _request(self, key: str, episode: Episode, sampling, seed: int | None) -> TurnRequest:
        ids, max_tokens = episode.next_turn()
        turn = episode.model_turns
        turn_seed = seed if turn == 0 or seed is None else derive_seed(seed, "turn", turn)
        return TurnRequest(key, ids, dataclasses.replace(sampling, n=1, max_tokens=max_tokens, seed=turn_seed))

    def _finish(self, key: str, episodes: dict, sampling, times: EnvTimes) -> Completion:
        episode, env, prompt_index, sample_index, _ = episodes[key]
        if episode.error:
            logger.debug(f"multi-turn sample {key} ended early: {episode.error}")
        if self.settings.check_retokenize:
            diff = retokenize_difference(self.tokenizer, episode.response, episode.turns, self.tool_tokens.eos_id)
            if diff is not None:
                times.retokenize_mismatches += 1
                logger.warning(
                    f"multi-turn sample {key}: the response differs from a one-piece render of its conversation at "
                    f"response token {diff[0]}: rollout {diff[1]} vs rendered {diff[2]}"
                )
        text = "".join(self._turn_text(t) for t in episode.turns)
        return episode.to_completion(prompt_index, sample_index, text=text, with_logprobs=sampling.logprobs)

    def _turn_text(self, turn: dict) -> str:
        if turn["role"] == "assistant":
            return turn["text"]
        return self.tool_tokens.before + turn["text"] + self.tool_tokens.after


def environment_problems(env_fn: str, tools: Sequence[str], tokenizer) -> list[str]:
    """Why multi-turn rollouts cannot start (empty when they can): ``env_fn`` does not import or lacks ``reset`` /
    ``step``, a tool of ``tools`` is unknown (built-in environment), or the chat template cannot frame tool
    messages. Cheap: run before Ray starts."""
    from reasonrl.agents.loading import env_fn_problems, tools_problems

    problems = env_fn_problems(env_fn)
    if env_fn.strip() == "tools":
        problems += tools_problems(list(tools))
    try:
        ToolMessageTokens.from_tokenizer(tokenizer)
    except ChatTemplateError as err:
        problems.append(f"env_fn={env_fn!r}: {err} (pretrain's tokenizer; use a chat model or add a chat_template)")
    return problems


def row_env_problems(rows_by_name: dict[str, Sequence[dict]], env_fn: str | None) -> list[str]:
    """Rows that name an environment (``env``) other than the config's ``env_fn`` (a row cannot pick code to run;
    it can only say which environment it was written for): one problem per data set, naming its first such row."""
    problems = []
    for name, rows in rows_by_name.items():
        for i, row in enumerate(rows):
            wanted = row.get("env")
            if wanted is not None and wanted != env_fn:
                problems.append(
                    f"{name} row {i} (id {row.get('id')!r}) names env={wanted!r} but the run has env_fn={env_fn!r}: "
                    f"set env_fn={wanted!r} or drop the row's env field"
                )
                break
    return problems


def _ended_with_eos(episode: Episode, rollout: MultiTurnRollout) -> bool:
    return bool(episode.response) and episode.response[-1] == rollout.tool_tokens.eos_id


def _close(env) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - closing a user environment must not end the rollout
            logger.debug(f"environment close() raised {type(exc).__name__}: {exc}")


def multi_turn_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """Per-step figures of multi-turn samples (empty when none is one): model turns per sample, tool calls and
    tool errors per tool (summed from the environments' ``info``), observation tokens per sample, observations
    cut, samples ended by the budget while adding an observation, and samples an environment failure ended."""
    episodes = [c for c in completions if c.turns is not None]
    if not episodes:
        return {}
    calls: dict[str, float] = {}
    errors: dict[str, float] = {}
    obs_tokens = cuts = 0
    for c in episodes:
        for turn in c.turns:
            if turn["role"] == "tool":
                obs_tokens += turn["num_tokens"]
                cuts += int(turn.get("cut", False))
            info = turn.get("info") or {}
            for name, count in (info.get("tool_calls") or {}).items():
                calls[name] = calls.get(name, 0.0) + float(count)
            for name, count in (info.get("tool_errors") or {}).items():
                errors[name] = errors.get(name, 0.0) + float(count)
    n = len(episodes)
    m = {
        "multi_turn/turns_mean": sum(sum(t["role"] == "assistant" for t in c.turns) for c in episodes) / n,
        "multi_turn/observation_tokens_mean": obs_tokens / n,
        "multi_turn/observations_cut": float(cuts),
        "multi_turn/env_errors": float(sum(c.env_error is not None for c in episodes)),
        "multi_turn/tool_calls": sum(calls.values()),
        "multi_turn/tool_errors": sum(errors.values()),
    }
    m |= {f"multi_turn/tool_calls/{name}": v for name, v in sorted(calls.items())}
    m |= {f"multi_turn/tool_errors/{name}": v for name, v in sorted(errors.items())}
    return m
