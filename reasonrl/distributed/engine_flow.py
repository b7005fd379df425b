"""The fully asynchronous rollouts' half of the vLLM engine (:class:`EngineFlow`, mixed into
:class:`reasonrl.distributed.vllm_engine.VLLMEngine`): requests that stay in the engine across weight syncs.

It imports no ``vllm``: it drives the engine through the objects the adapter holds (``self.llm.llm_engine``:
``step``, ``abort_request``, ``set_weight_version``, ``sleep(level=0, mode="keep")``, ``wake_up``) and reads the
fields of vLLM's outputs, so a vLLM bump still touches the adapter module (which builds the requests:
``_add_flow_request``, ``_params``) and, at most, the attribute names read here. The bookkeeping of each request
(tokens, log-probs, the version of each token) is :mod:`reasonrl.distributed.flow_requests`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from reasonrl.distributed.flow_requests import PARTIAL_ROLLOUT_MODES, FlowBook, FlowRequest


class EngineFlow:
    """Fully asynchronous rollouts on one engine (see the module docstring). The host class provides ``llm``,
    ``residency``, ``in_process``, ``_requests_started``, ``_lora_kwargs()`` and ``_add_flow_request()``."""

    weight_version: int = 0

    @property
    def _flow(self) -> FlowBook:
        """This engine's flow requests (made on first use: stand-in engines built without ``__init__`` have one)."""
        book = self.__dict__.get("_flow_book")
        if book is None:
            book = self.__dict__["_flow_book"] = FlowBook()
        return book

    def _step(self) -> list:
        """One engine step; the flow's requests' outputs go to their :class:`FlowBook` (tagged with the weight
        version the engine holds), every other request's output is returned. Every caller that steps the engine
        (generate_stream, pump, the probe, flow_step) steps it through here, so no call loses another's outputs."""
        outputs = self.llm.llm_engine.step()
        if not self._flow.running:
            return outputs
        others = []
        for out in outputs:
            if out.request_id not in self._flow:
                others.append(out)
                continue
            (delta,) = out.outputs
            new_ids = list(delta.token_ids)
            new_logprobs = None
            if delta.logprobs is not None:
                new_logprobs = [float(delta.logprobs[p][t].logprob) for p, t in enumerate(new_ids)]
            self._flow.on_output(
                out.request_id,
                prompt_token_ids=out.prompt_token_ids or [],
                new_token_ids=new_ids,
                new_logprobs=new_logprobs,
                new_text=delta.text,
                version=self.weight_version,
                finished=out.finished,
                finish_reason=delta.finish_reason,
                cached_prompt_tokens=out.num_cached_tokens,
            )
        return others

    def _foreign_requests(self) -> int:
        """Requests in the engine that are not the flow's (another call's, still running); without flow requests,
        whether the engine has any (1 or 0)."""
        engine = self.llm.llm_engine
        if not self._flow.running:
            return int(engine.has_unfinished_requests())
        return engine.get_num_unfinished_requests() - len(self._flow)

    def _cache_salt(self) -> str | None:
        """Once the flow runs, every request's prefix-cache blocks are salted with the weight version: a sync then
        need not reset the prefix cache (vLLM refuses while requests run), and no request ever reuses a block that
        another version computed."""
        return None if not self._flow_started else f"reasonrl-w{self.weight_version}"

    _flow_started = False

    def flow_step(self, requests: Sequence[FlowRequest], max_wait_s: float = 0.05) -> list[tuple[str, Any]]:
        """The fully asynchronous rollout's engine call: add ``requests`` (one sample each) to the running batch,
        step the engine until at least one flow request finished or ``max_wait_s`` passed, and return every
        finished one as ``(key, Completion)`` (``token_versions``: the weight version of each token; finished ones
        that other calls' steps produced included). Returns at once when nothing runs.

        Between two calls no engine step runs (in-process engine) and the requests stay scheduled with their KV
        cache: that is the pause a weight sync needs (:meth:`flow_pause` for a multiprocess engine)."""
        self.residency.check_generate("flow_step")
        self._flow_started = True
        for request in requests:
            self._add_flow_request(request)
        deadline = time.perf_counter() + max_wait_s
        while self._flow.running:  # at least one step (max_wait_s=0: exactly one)
            others = self._step()
            if others:  # nothing else may run between flow calls; a request of another call would lose its output
                raise RuntimeError(f"flow_step: {len(others)} output(s) of requests that are not the flow's")
            if self._flow.finished or time.perf_counter() >= deadline:
                break
        if self._flow.running and not self.llm.llm_engine.has_unfinished_requests():
            lost = len(self._flow)
            self._flow.running.clear()
            raise RuntimeError(f"flow_step: the engine dropped {lost} request(s) unfinished")
        return self._flow.take_finished()

    def flow_in_flight(self) -> int:
        """Flow requests in the engine."""
        return len(self._flow)

    def flow_pause(self) -> None:
        """Before a weight sync with flow requests in flight. In-process (CPU) the engine steps only inside this
        actor's calls, so not calling is pausing and this does nothing; a multiprocess engine core steps on its own,
        so its scheduler is paused keeping every request and its KV cache (vLLM's ``sleep(level=0, mode="keep")``,
        ``EngineCore.pause_scheduler("keep")``) until :meth:`flow_set_version` resumes it."""
        if not self.in_process:
            self.llm.llm_engine.sleep(level=0, mode="keep")

    def flow_set_version(self, version: int, partial_rollout: str = "keep") -> dict[str, int]:
        """After a weight sync: the engine holds ``version`` (tokens sampled from now on are tagged with it; new
        requests salt their prefix-cache blocks with it); the flow requests in flight continue under
        ``partial_rollout``: ``keep`` (their KV cache stays) or ``recompute`` (aborted and resubmitted as prompt +
        tokens so far, see :mod:`reasonrl.distributed.flow_requests`). Returns ``{"kept": n, "recomputed": n}``."""
        if partial_rollout not in PARTIAL_ROLLOUT_MODES:
            raise ValueError(f"partial_rollout must be one of {PARTIAL_ROLLOUT_MODES}, got {partial_rollout!r}")
        engine = self.llm.llm_engine
        self.weight_version = int(version)
        engine.set_weight_version(str(self.weight_version))  # vLLM's own per-output label (weight_versions)
        running = list(self._flow.running)
        recomputed = 0
        if partial_rollout == "recompute" and running:
            engine.abort_request(running)
            for sample in self._flow.remove(running):
                self._add_flow_request(sample.request, carried=sample)
                recomputed += 1
        if not self.in_process:
            engine.wake_up(tags=["scheduling"])  # resume the scheduler flow_pause paused
        return {"kept": len(running) - recomputed, "recomputed": recomputed}

    def flow_abort(self) -> int:
        """Abort every flow request (a stop, the end of a run); finished ones not returned yet are dropped too.
        Returns how many were in the engine."""
        ids = list(self._flow.running)
        if ids:
            self.llm.llm_engine.abort_request(ids)
        self._flow.running.clear()
        self._flow.finished.clear()
        return len(ids)

    def _probe_among_flow(self, prompt: dict[str, Any], params) -> Any:
        """One probe request stepped to its end while flow requests run (their outputs go to the flow's book)."""
        engine = self.llm.llm_engine
        (engine_input,) = engine.renderer.render_cmpl([prompt])
        request_id = f"reasonrl-{self._requests_started}"
        self._requests_started += 1
        engine.add_request(request_id, engine_input, params, **self._lora_kwargs())
        while engine.has_unfinished_requests():
            for out in self._step():
                if out.request_id == request_id and out.finished:
                    return out
        raise RuntimeError("score_probe: the engine dropped the probe request unfinished")
