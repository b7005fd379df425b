"""Count the functions and files of reasonrl that one GRPO step runs through, on the driver and on the workers.

Runs ``bench_grpo_step.py``'s workload (the ``tiny_grpo_cpu`` recipe on a 26.2M Qwen2: one policy rank, one
in-process vLLM engine) for 3 steps and traces step 2 (``PPOTrainer.train_step``: rollout, forwards, advantages,
update, weight sync) with ``sys.setprofile``: every Python function of the ``reasonrl`` package called while the
step runs, by file and qualified name, on the driver (every thread) and in every Ray worker process (the policy
rank, the engine actor; installed by Ray's ``worker_process_setup_hook``, recording only while the driver's step
flag file exists). Prints the counts per side and per package; ``--list`` prints every function.

    python benchmarks/step_path.py
    python benchmarks/step_path.py --list
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAG_ENV, OUT_ENV = "REASONRL_STEP_PATH_FLAG", "REASONRL_STEP_PATH_OUT"


def _package_root() -> str:
    import reasonrl

    return str(Path(reasonrl.__file__).parent) + os.sep


def install() -> None:
    """Ray's ``worker_process_setup_hook``: record this process's reasonrl calls while the flag file exists."""
    flag, out = os.environ.get(FLAG_ENV), os.environ.get(OUT_ENV)
    if not flag or not out:
        return
    root, seen = _package_root(), set()
    path = Path(out) / f"worker-{os.getpid()}.txt"

    def tracer(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.startswith(root) and os.path.exists(flag):
            key = (code.co_filename[len(root) :], code.co_qualname)
            if key not in seen:
                seen.add(key)
                with open(path, "a") as f:
                    f.write(f"{key[0]}\t{key[1]}\n")

    sys.setprofile(tracer)
    threading.setprofile(tracer)


def _driver_tracer(root: str, seen: set, active: list):
    def tracer(frame, event, arg):
        if event == "call" and active and frame.f_code.co_filename.startswith(root):
            seen.add((frame.f_code.co_filename[len(root) :], frame.f_code.co_qualname))

    return tracer


def _functions(seen: set) -> set:
    """Functions as one reads them: comprehensions, generator expressions, lambdas and module bodies dropped."""
    return {(f, name) for f, name in seen if not name.rsplit(".", 1)[-1].startswith("<")}


def _summary(side: str, seen: set) -> None:
    files = {f for f, _ in seen}
    by_package = collections.Counter(f.split(os.sep)[0] if os.sep in f else "(top)" for f, _ in seen)
    print(f"{side}: {len(seen)} functions in {len(files)} files")
    for package, n in by_package.most_common():
        print(f"  {package:<12} {n:4d} functions, {len({f for f, _ in seen if f.startswith(package)}):3d} files")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every function")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import ray
    from bench_grpo_step import workload

    from reasonrl.distributed.platform import runtime_env_vars
    from reasonrl.exp import BasePPOExp
    from reasonrl.loop.trainer import PPOTrainer

    work = Path(tempfile.mkdtemp(prefix="reasonrl-step-path-"))
    flag, out = work / "tracing", work / "workers"
    out.mkdir()
    (work / "run").mkdir()
    env = runtime_env_vars(on_gpu=False) | {FLAG_ENV: str(flag), OUT_ENV: str(out)}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))])
    os.environ.update({FLAG_ENV: str(flag), OUT_ENV: str(out)})
    ray.init(
        address="local",
        include_dashboard=False,
        runtime_env={"env_vars": env, "worker_process_setup_hook": "step_path.install"},
    )
    root, driver, active = _package_root(), set(), []
    tracer = _driver_tracer(root, driver, active)
    step = PPOTrainer.train_step

    async def traced_step(self):
        if self.global_step != 1:  # step 2: warm (the first step pays first calls and the engines' first forward)
            return await step(self)
        flag.touch()
        active.append(True)
        sys.setprofile(tracer)
        threading.setprofile(tracer)
        try:
            return await step(self)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            active.clear()
            flag.unlink()

    PPOTrainer.train_step = traced_step
    BasePPOExp(workload(work / "run", steps=3)).run()
    workers = set()
    for part in out.glob("worker-*.txt"):
        workers |= {tuple(line.split("\t")) for line in part.read_text().splitlines()}
    print("one GRPO step (step 2 of the tiny_grpo_cpu workload), reasonrl functions called:")
    driver, workers = _functions(driver), _functions(workers)
    _summary("driver", driver)
    _summary("workers (policy rank and engine)", workers)
    if args.list:
        for side, seen in (("driver", driver), ("workers", workers)):
            for file, name in sorted(seen):
                print(f"{side}\t{file}\t{name}")


if __name__ == "__main__":
    main()
