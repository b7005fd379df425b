"""The judge model of ``judge_pretrain`` on frozen vLLM engines: :class:`EngineJudge` is the ``generate(prompts) ->
texts`` callable of :class:`reasonrl.rewards.judge.JudgeScorer`, talking to :class:`~reasonrl.distributed.vllm_engine.
VLLMEngine` actors (the adapter) through their ``generate`` call only.

A prompt (the rendered judge template) is the user turn of the judge's chat template when its tokenizer has one
(with the generation prompt), else the text itself; its token ids are cut from the left to ``max_prompt_len`` (the
end of the response and the template's question stay), and each call splits the prompts evenly over the engines.
The engines are never synced: the judge's weights are the ones it loaded.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonrl.utils.even_split import even_bounds


class EngineJudge:
    """``judge(prompts) -> texts`` on ``engines`` (``VLLMEngine`` Ray actors), one text per prompt in order.

    ``tokenizer``: the judge model's (a Hugging Face tokenizer); ``max_tokens``, ``temperature``, ``seed``: its
    sampling (greedy at temperature 0); ``max_prompt_len``: the most prompt tokens kept (the left is cut)."""

    def __init__(
        self,
        engines: Sequence,
        tokenizer,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        max_prompt_len: int | None = None,
    ):
        if not engines:
            raise ValueError("EngineJudge needs at least one engine")
        self.engines, self.tokenizer = list(engines), tokenizer
        self.max_tokens, self.temperature, self.seed = max_tokens, temperature, seed
        self.max_prompt_len = max_prompt_len
        self.num_cut = 0  # prompts whose left part was cut to max_prompt_len

    def encode(self, prompt: str) -> list[int]:
        """The token ids the judge reads for ``prompt`` (module docstring)."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        else:
            text = prompt
        ids = list(tok(text, add_special_tokens=False)["input_ids"])
        if self.max_prompt_len is not None and len(ids) > self.max_prompt_len:
            self.num_cut += 1
            ids = ids[len(ids) - self.max_prompt_len :]
        return ids

    def __call__(self, prompts: Sequence[str]) -> list[str]:
        import ray

        from reasonrl.distributed.vllm_engine import SamplingConfig

        if not prompts:
            return []
        ids = [self.encode(p) for p in prompts]
        sampling = SamplingConfig(n=1, temperature=self.temperature, max_tokens=self.max_tokens, seed=self.seed)
        bounds = even_bounds(len(ids), len(self.engines))
        refs = [
            engine.generate.remote(ids[lo:hi], sampling)
            for engine, lo, hi in zip(self.engines, bounds[:-1], bounds[1:], strict=True)
            if hi > lo
        ]
        return [c.text for part in ray.get(refs) for c in part]


JUDGE_TEMPLATE_MARGIN = 1024
"""Tokens the judge's context keeps for its template's own text around the question and the response."""


def judge_context(model_context: int | None, max_prompt_len: int, generate_max_len: int, judge_max_tokens: int) -> int:
    """The judge engine's ``max_model_len``: what it reads (the policy's prompt and response, the template's text:
    :data:`JUDGE_TEMPLATE_MARGIN`) and writes (``judge_max_tokens``), no more than the judge model's own context
    (``max_position_embeddings``; None: unknown, not bounded)."""
    need = max_prompt_len + generate_max_len + JUDGE_TEMPLATE_MARGIN + judge_max_tokens
    return need if model_context is None else min(need, model_context)


def start_judge_engine(model_source: str, *, dtype: str, max_model_len: int, seed: int, ready_timeout_s: float = 60.0):
    """One frozen :class:`~reasonrl.distributed.vllm_engine.VLLMEngine` actor of the judge on a placement group of
    its own, one CPU bundle, with a CPU placement's environment; returns ``(engine, placement group)`` (the caller
    shuts the engine down and removes the group). Raises ``TimeoutError`` when the cluster has no free CPU for the
    bundle within ``ready_timeout_s`` (the run's placement groups hold theirs first)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from reasonrl.distributed.platform import cpu_threads_env, runtime_env_vars
    from reasonrl.distributed.vllm_engine import create_vllm_engines

    pg = placement_group([{"CPU": 1}], strategy="PACK", name="reasonrl-judge")
    try:
        ray.get(pg.ready(), timeout=ready_timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        raise TimeoutError(f"no free CPU for the judge's bundle within {ready_timeout_s:g}s") from None
    env = runtime_env_vars(on_gpu=False) | cpu_threads_env(1.0)
    (engine,) = create_vllm_engines(
        1,
        model_source,
        placement_group=pg,
        bundle_indices=[0],
        num_cpus=1,
        env=env,
        dtype=dtype,
        max_model_len=max_model_len,
        seed=seed,
        enable_sleep_mode=False,
    )
    return engine, pg
