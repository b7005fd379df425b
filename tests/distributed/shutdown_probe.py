"""Run by test_distributed_shutdown.py in a subprocess: start Ray + a multiprocess vLLM engine, use it, shut down.

Usage: python shutdown_probe.py <ray_temp_dir> <model_dir>
"""

import os
import sys


def main(temp_dir: str, model_dir: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the leak-prone mode: engine core + worker subprocesses
    import ray

    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines

    init_ray(num_cpus=4, object_store_memory=256 * 1024**2, _temp_dir=temp_dir)
    (engine,) = create_vllm_engines(1, model_dir, dtype="float32", max_model_len=256)
    out = ray.get(engine.generate.remote([[1, 5, 9, 17]], SamplingConfig(n=2, max_tokens=8, seed=0)), timeout=300)
    assert len(out) == 2
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine)
    ray.shutdown()
    print("probe-done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
