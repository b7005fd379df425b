"""Ray actors that hold one DeepSpeed rank each.

:class:`DistributedWorker` joins a role's process group (``gloo`` on CPU, ``nccl`` on GPU). :class:`DeepSpeedLMWorker`
trains a causal LM with a plain next-token loss (smoke tests, SFT). The PPO roles are in ``ppo_workers``.
"""

from __future__ import annotations

import random
import socket
from typing import Any

from loguru import logger

from reasonrl.distributed import deepspeed_engine as ds
from reasonrl.utils.worker_logs import install_worker_log_sink

# Rendezvous ports are picked from here: above Ray's worker ports (its default min/max_worker_port, 10002-19999) and
# below the kernel's ephemeral range (32768 by default; read from /proc where it exists).
RENDEZVOUS_PORTS_LOW = 20000
EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port() -> int:
    """A TCP port free on this node now, for a rendezvous that binds it a moment later (DeepSpeed's TCPStore, the
    weight-sync group). Picked at random between Ray's worker ports and the kernel's ephemeral range: a port from
    ``bind(0)`` is ephemeral, and any process's next outgoing connection (Ray's processes make many) can take it
    before the rendezvous binds it; seen here as EADDRINUSE at DeepSpeed's TCPStore. The draw does not use the
    ``random`` module's seeded state (two runs with the same seed would draw the same ports). Falls back to
    ``bind(0)`` where that range is empty or every draw is taken."""
    ports = range(RENDEZVOUS_PORTS_LOW, _ephemeral_low())
    for port in random.SystemRandom().sample(ports, min(64, len(ports))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:  # in use
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        with open(EPHEMERAL_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class DistributedWorker:
    """One rank of a role's data-parallel group."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        install_worker_log_sink(f"{type(self).__name__} rank {rank}")  # WARNING+ lines into the run's train.log
        self.engine = None
        self._hf_ds_config = None

    def master_address(self) -> tuple[str, int]:
        """Called on rank 0: where the other ranks should rendezvous."""
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def init_process_group(self, master_addr: str, master_port: int, timeout_s: float = 1800) -> None:
        ds.init_distributed(self.rank, self.world_size, master_addr, master_port, timeout_s=timeout_s)

    def ready(self) -> bool:
        return True

    def device_memory(self, reset_peak: bool = False) -> dict[str, int] | None:
        """This process's CUDA allocator on its current device, in bytes: ``memory_allocated`` (live tensors),
        ``max_memory_allocated`` (their peak since the last reset) and ``memory_reserved`` (allocated + cached
        blocks). The CUDA context and NCCL buffers are outside the allocator and not counted.

        ``reset_peak``: after reading, restart the peak counter (``torch.cuda.reset_peak_memory_stats``), so the
        next call's peak covers only what ran in between. ``None`` (a logged no-op) without CUDA.
        """
        import torch

        if not torch.cuda.is_available():
            logger.debug("device_memory: no CUDA device, nothing to measure")
            return None
        memory = {
            "memory_allocated": torch.cuda.memory_allocated(),
            "max_memory_allocated": torch.cuda.max_memory_allocated(),
            "memory_reserved": torch.cuda.memory_reserved(),
        }
        if reset_peak:
            torch.cuda.reset_peak_memory_stats()
        return memory


class DeepSpeedLMWorker(DistributedWorker):
    """A causal LM trained with a next-token loss under the configured ZeRO stage."""

    def setup(self, model_path: str, ds_config: dict[str, Any], lr: float = 1e-3) -> int:
        """Load the model partitioned, build the optimizer. Returns the local parameter count."""
        import torch

        torch.manual_seed(0)
        from reasonrl.utils.hub import local_model_folder

        model, self._hf_ds_config = ds.load_causal_lm(local_model_folder(model_path), ds_config)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self.engine = ds.initialize(model, ds_config, optimizer)
        return sum(p.numel() for p in self.engine.module.parameters())

    def lm_loss(self, input_ids, attention_mask):
        """Mean next-token cross-entropy over unmasked positions."""
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        return self.engine(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss

    def train_step(self, input_ids, attention_mask) -> float:
        """One forward/backward/optimizer step on this rank's micro-batch. Returns the loss before the step."""
        self.engine.train()
        loss = self.lm_loss(input_ids, attention_mask)
        self.engine.backward(loss)
        self.engine.step()
        return float(loss.detach())

    def eval_loss(self, input_ids, attention_mask) -> float:
        import torch

        self.engine.eval()
        with torch.no_grad():
            return float(self.lm_loss(input_ids, attention_mask))

    def full_state_dict(self) -> dict[str, Any] | None:
        """Gather full parameters (collective: call on every rank). Rank 0 gets the dict, others ``None``."""
        return ds.gather_full_state_dict(self.engine.module)

    def local_param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of this rank's local parameter tensors (``(0,)`` where ZeRO-3 partitioned them away)."""
        return {n: tuple(p.shape) for n, p in self.engine.module.named_parameters()}
