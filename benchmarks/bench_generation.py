"""Generation throughput of vLLM through reasonrl's adapter vs calling ``vllm.LLM.generate`` directly.

    python benchmarks/bench_generation.py                 # tiny model and SmolLM2-135M, CPU defaults
    python benchmarks/bench_generation.py --model smollm2 --prompts 16 --n 4 --max-tokens 128

Both paths run in this process on the same engine, prompts and sampling settings; the figure of merit is generated
tokens per second (steady state: the first call of each path is a warm-up and is not timed). Prints peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

from reasonrl.distributed.platform import apply_runtime_env

apply_runtime_env()


def bench_model(name: str, path: str, prompts: int, n: int, max_tokens: int, repeats: int) -> None:
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from reasonrl.distributed.vllm_engine import SamplingConfig, VLLMEngine

    tok = AutoTokenizer.from_pretrained(path)
    questions = [f"Question {i}: what is {i} plus {2 * i + 1}? Think step by step." for i in range(prompts)]
    prompt_ids = [
        tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"]
        for q in questions
    ]
    start = time.perf_counter()
    engine = VLLMEngine(path, dtype="float32", max_model_len=1024)
    load_s = time.perf_counter() - start
    sampling = SamplingConfig(n=n, temperature=1.0, max_tokens=max_tokens, seed=0, ignore_eos=True)
    raw_params = [
        SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, seed=i, ignore_eos=True) for i in range(prompts)
    ]
    raw_prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]

    def run_adapter() -> int:
        return sum(len(c.token_ids) for c in engine.generate(prompt_ids, sampling))

    def run_raw() -> int:
        outs = engine.llm.generate(raw_prompts, raw_params, use_tqdm=False)
        return sum(len(o.token_ids) for r in outs for o in r.outputs)

    paths = [("raw vllm.LLM.generate", run_raw), ("reasonrl VLLMEngine.generate", run_adapter)]
    for _, fn in paths:
        fn()  # warm-up
    tokens = {label: 0 for label, _ in paths}
    elapsed = {label: 0.0 for label, _ in paths}
    for _ in range(repeats):  # interleaved, so load from other processes hits both paths alike
        for label, fn in paths:
            t0 = time.perf_counter()
            tokens[label] += fn()
            elapsed[label] += time.perf_counter() - t0
    results = {label: tokens[label] / elapsed[label] for label, _ in paths}
    for label, _ in paths:
        print(f"{name:8s} {label:30s} {tokens[label] / repeats:7.0f} tokens/call  {results[label]:8.0f} tok/s")
    ratio = results["reasonrl VLLMEngine.generate"] / results["raw vllm.LLM.generate"]
    print(f"{name:8s} adapter/raw throughput ratio: {ratio:.3f}   engine load: {load_s:.1f}s")
    engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["tiny", "smollm2", "both"], default="both")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from reasonrl.models import smollm2_path, tiny_model_path

    models = {"tiny": tiny_model_path, "smollm2": smollm2_path}
    for name in ["tiny", "smollm2"] if args.model == "both" else [args.model]:
        bench_model(name, str(models[name]()), args.prompts, args.n, args.max_tokens, args.repeats)
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB")


if __name__ == "__main__":
    main()
