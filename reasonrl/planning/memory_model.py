"""Per-device memory of one PPO step, phase by phase: an estimate from the model's shape, never a measurement.

Pure Python (no torch). From a Hugging Face model config (:class:`ModelShape`; :data:`QWEN25` holds the published
Qwen2.5 0.5B/1.5B/7B/32B values, since configs cannot be downloaded here) and the experiment's settings (ZeRO stage,
data-parallel size, offload, bf16, gradient checkpointing, micro-batch token budget, vLLM utilisation, sleep), it
computes the resident bytes of every component on one device in every phase of a colocated step
(:data:`COLOCATED_PHASES`, the same sequence :class:`reasonrl.distributed.phases.PhaseMachine` walks, with the same
residency table :data:`~reasonrl.planning.device_phases.RESIDENT`) and on each device group of a split-placement step.

Formulas (``P`` parameters, ``N`` the role's data-parallel size, ``w`` bytes per weight: 2 in bf16, 4 in fp32,
``T`` the micro-batch token budget, ``h`` hidden size, ``I`` intermediate size, ``L`` layers, ``V`` vocabulary):

* parameters: ``w P / N`` under ZeRO-3 (partitioned), ``w P`` below; each role at its own stage
  (:attr:`Setup.role_zero_stages`: a config's ``zero_stage=auto`` gives one-rank roles ZeRO-0).
* gradients: ``4 P / N`` at ZeRO >= 2 (bf16 training accumulates gradients in fp32), ``4 P`` below; 0 for frozen roles.
* optimizer: fp32 master weights + Adam m and v = ``12 P / N`` at ZeRO >= 1 (``12 P`` at 0; the master copy only in
  bf16: ``8 P / N`` in fp32); 0 on the device with ``optimizer_offload``.
* ZeRO-3 gather working set: the layer being computed and the prefetched next one, plus the embedding (or the
  output head), gathered in full: ``w (2 P_layer + V h)``.
* activations: with gradient checkpointing each layer keeps its input (``L T h w``) and one layer is recomputed in
  full (``T w (8 h + 4 I)``: q/k/v/o, two residual streams and norms, gate/up/activation/product of the MLP; flash
  attention stores no ``T^2`` term); without checkpointing every layer keeps its full set (``L T w (8 h + 4 I)``).
  Frozen roles (forward only, no graph) keep one layer's set. Under sequence parallelism (``sequence_parallel_size``
  = N, the policy, reference and critic) a rank holds ``ceil(T / N)`` of the micro-batch's positions at a time, so
  ``T`` above is ``ceil(T / N)`` for those roles (the attention core: flash / causal without a mask, no ``T^2``).
* logits: the budget's tokens x vocabulary: bf16 logits, their fp32 upcast and the fp32 log-softmax gradient,
  ``T V (w + 8)`` (an upper bound: only response positions need logits). Under SP the LM head runs in checkpointed
  chunks of ``SP_LOGITS_CHUNK`` positions: ``min(ceil(T / N), chunk) V (w + 8)``. The critic's value head: ``4 T``.
* vLLM: ``gpu_memory_utilization x device`` while generating (weights, KV cache, activations and CUDA graphs all live
  in that budget; vLLM refuses to start with less free); its weights alone, ``w P / TP``, in the SYNC phase (woken
  with ``tags=["weights"]``); nothing while asleep (sleep level 2 discards the weights too).
* weight sync: one bucket (``sync_bucket_mb``) in flight on the policy side. A broadcast engine (split placement)
  holds two (the one it reloads and the next, received meanwhile) outside vLLM's budget: 0.5 GB at the default,
  inside :data:`HEADROOM`.

* CUDA contexts: :data:`CUDA_CONTEXT_BYTES` (0.5 GB) per process that uses the device, outside every allocator and
  never freed by sleep or offload. Under colocation a device holds one rank of every DeepSpeed role, the engine's
  Ray actor (vLLM's front end; counted as an upper bound) and vLLM's worker, whose context is inside vLLM's budget
  while it generates (vLLM's profiling counts its non-torch memory: ``v1/worker/gpu_worker.py`` ~690-743) and
  outside it while the engine sleeps: 4-5 contexts per device (``cuda_contexts``, every phase). Split placement: one
  per device of a role; vLLM-only devices none (inside the budget).
* vLLM's CUDA-graph pool (:attr:`Setup.vllm_cuda_graph_bytes`): inside the budget while generating (vLLM 0.32
  subtracts it from the KV cache, ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` by default); a sleep backs it up
  to the host and the first wake brings it back whatever tags it names (``device_allocator/cumem.py`` ~331-350:
  only ``weights`` and ``kv_cache`` are deferrable; ``sleep_mode_backend.py`` ~132-136), so it is resident beside
  the weights in SYNC (``vllm_cuda_graphs``).

Not modelled: allocator fragmentation, NCCL buffers, kernel workspaces; :data:`HEADROOM` keeps 7 GB of an 80 GB
device for them.

This module knows no config: it takes a :class:`Setup` of plain values (a config's:
:func:`reasonrl.config.memory.setup_from_config`). The tables of the GPU recipes (docs/memory.md)::

    python -m playground memory --recipe qwen7b_ppo      # one recipe's table
    python -m playground memory --all                    # every GPU recipe
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from reasonrl.planning.device_phases import COLOCATED_STEP, RESIDENT, Phase

GB = 10**9
DEVICE_BYTES = 80 * GB
"""An 80 GB device (A100-80G, H100 80GB; what the GPU recipes target)."""
HEADROOM = 7 * GB
"""Kept free for what is not modelled (fragmentation, NCCL buffers, kernel workspaces). It was 8 GB when it also
covered two CUDA contexts; those are modelled now (:data:`CUDA_CONTEXT_BYTES`)."""
CUDA_CONTEXT_BYTES = GB // 2
"""One process's CUDA context on its device: ~0.5 GB, the figure of ``notes/gpu_review.md`` (item 7) and of this
module's earlier docstring, for CUDA 12/13 with lazy module loading (``CUDA_MODULE_LOADING=LAZY``, torch's default)
on A100/H100-class devices; an estimate, not measured here (no GPU): ``gpu_check``'s memory lines measure the
contexts inside every device-wide figure."""
ENGINE_PROCESSES_OUTSIDE_BUDGET = 1
"""Processes of one engine on a device whose contexts vLLM's budget does not count: its Ray actor (the front end).
vLLM's worker process counts its own context in the budget while the engine is awake."""
VLLM_CUDA_GRAPH_BYTES = 3 * GB
"""vLLM's CUDA-graph pool at its default capture sizes: the upper end of the 2-3 GB that notes/gpu_review.md gives for
7B-class models (vLLM logs the real figure at start-up, "Graph capturing finished ... took X GiB"). 0 with
``enforce_eager``."""
COLOCATED_PHASES = COLOCATED_STEP


@dataclass(frozen=True)
class ModelShape:
    """The fields of a Hugging Face ``config.json`` that size a decoder (Qwen2 layout: q/k/v biases, SwiGLU MLP)."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    vocab_size: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool

    @property
    def layer_params(self) -> int:
        """q (h x h + h), k and v (h x kv + kv each), o (h x h), MLP (3 h I), two RMSNorms (2 h)."""
        h = self.hidden_size
        kv = h // self.num_attention_heads * self.num_key_value_heads
        return (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * self.intermediate_size + 2 * h

    def lora_params(self, rank: int) -> int:
        """Adapter parameters at rank ``r`` on every linear layer (``all-linear``; an upper bound for fewer targets):
        ``r (in + out)`` per layer for q, k, v, o, gate, up and down."""
        h, i = self.hidden_size, self.intermediate_size
        kv = h // self.num_attention_heads * self.num_key_value_heads
        per_layer = (h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h)
        return rank * per_layer * self.num_hidden_layers

    @property
    def num_params(self) -> int:
        """Embedding + layers + final norm (+ output head when not tied)."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else embed
        return embed + head + self.num_hidden_layers * self.layer_params + self.hidden_size


QWEN25: Mapping[str, ModelShape] = {
    # published config.json values of Qwen/Qwen2.5-{0.5B,1.5B,7B,32B}
    "Qwen/Qwen2.5-0.5B": ModelShape(896, 24, 4864, 151936, 14, 2, True),
    "Qwen/Qwen2.5-1.5B": ModelShape(1536, 28, 8960, 151936, 12, 2, True),
    "Qwen/Qwen2.5-7B": ModelShape(3584, 28, 18944, 152064, 28, 4, False),
    "Qwen/Qwen2.5-32B": ModelShape(5120, 64, 27648, 152064, 40, 8, False),
    # DeepSeek-R1-Distill-Qwen-7B is Qwen2.5-Math-7B fine-tuned: Qwen2.5-7B's shape (its published config.json)
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": ModelShape(3584, 28, 18944, 152064, 28, 4, False),
}


@dataclass(frozen=True)
class Setup:
    """What sizes one step: the model and the experiment's memory settings, as plain values (a config's:
    :func:`reasonrl.config.memory.setup_from_config`)."""

    model: ModelShape
    zero_stage: int = 3  # every role's stage, unless role_zero_stages names the role's own
    policy_dp: int = 8
    critic_dp: int = 0  # 0: no critic
    ref_dp: int = 0  # 0: no reference model
    teacher_dp: int = 0  # 0: no distillation teacher (one is sized as the reference and the policy's model shape)
    reward_dp: int = 0  # 0: no reward model (assumed the policy's shape)
    bf16: bool = True
    gradient_checkpointing: bool = True
    optimizer_offload: bool = False
    ref_offload_params: bool = False
    micro_batch_tokens: int = 16384
    vllm_gpu_memory_utilization: float = 0.85
    vllm_tensor_parallel_size: int = 1
    vllm_enable_sleep: bool = True
    colocate_all: bool = True
    sync_bucket_mb: int = 256
    device_bytes: int = DEVICE_BYTES
    lora_rank: int = 0  # > 0: the policy trains adapters only (gradients and optimizer states of those)
    sequence_parallel_size: int = 1  # Ulysses: the policy, reference and critic hold ceil(T / N) positions per rank
    vllm_cuda_graph_bytes: int = VLLM_CUDA_GRAPH_BYTES  # 0: the engines run eager (no CUDA graphs)
    # (role, stage) pairs of the roles whose ZeRO stage is not zero_stage (a config's zero_stage=auto resolved per
    # role); roles: policy, critic, ref, reward_model
    role_zero_stages: tuple[tuple[str, int], ...] = ()

    def stage(self, role: str | None = None) -> int:
        """The ZeRO stage of ``role`` (None: :attr:`zero_stage`)."""
        return dict(self.role_zero_stages).get(role, self.zero_stage) if role else self.zero_stage


# ---------------------------------------------------------------------- components (bytes on one device)
def _w(s: Setup) -> int:
    return 2 if s.bf16 else 4


def param_bytes(s: Setup, dp: int, *, offloaded: bool = False, role: str | None = None) -> int:
    """Parameter partition of one role (at ``role``'s stage, :meth:`Setup.stage`): ``w P / N`` under ZeRO-3, ``w P``
    below; 0 with parameter offload."""
    if offloaded or dp == 0:
        return 0
    full = _w(s) * s.model.num_params
    return full // dp if s.stage(role) == 3 else full


def train_state_bytes(s: Setup, dp: int, *, lora: bool = False, role: str | None = None) -> int:
    """Gradients (fp32, partitioned at ZeRO >= 2) + fp32 master weights and Adam m, v (partitioned at ZeRO >= 1),
    of the trained parameters: every one, or the adapters only (``lora``: the policy with ``lora_rank > 0``), at
    ``role``'s stage (:meth:`Setup.stage`)."""
    if dp == 0:
        return 0
    stage = s.stage(role)
    p = s.model.lora_params(s.lora_rank) if lora and s.lora_rank else s.model.num_params
    grads = 4 * p // dp if stage >= 2 else 4 * p
    optim = 0 if s.optimizer_offload else (12 if s.bf16 else 8) * p
    optim = optim // dp if stage >= 1 else optim
    return grads + optim


def gather_bytes(s: Setup, role: str | None = None) -> int:
    """ZeRO-3 working set: two full layers (current + prefetched) and the embedding/head; 0 below ZeRO-3 (``role``'s
    stage, :meth:`Setup.stage`)."""
    if s.stage(role) != 3:
        return 0
    m = s.model
    return _w(s) * (2 * m.layer_params + m.vocab_size * m.hidden_size)


SP_LOGITS_CHUNK = 1024  # positions per LM-head chunk under SP (models.sequence_parallel.sp_response_logprobs)
SP_ROLES = ("policy", "ref", "critic")  # the roles Ulysses splits (the teacher and the reward model run whole rows)


def activation_bytes(s: Setup, *, trains: bool, logits: bool, role: str = "policy") -> int:
    """One micro-batch of ``T`` tokens through one role (see the module docstring for the terms); under sequence
    parallelism a rank of ``role`` holds ``ceil(T / N)`` positions and the LM head's logits one chunk of them."""
    m, w = s.model, _w(s)
    sp = s.sequence_parallel_size if role in SP_ROLES else 1
    t = -(-s.micro_batch_tokens // sp)
    layer = t * w * (8 * m.hidden_size + 4 * m.intermediate_size)
    if not trains:
        acts = layer
    elif s.gradient_checkpointing:
        acts = m.num_hidden_layers * t * m.hidden_size * w + layer
    else:
        acts = m.num_hidden_layers * layer
    head_rows = min(t, SP_LOGITS_CHUNK) if sp > 1 else t
    head = head_rows * m.vocab_size * (w + (8 if trains else 4)) if logits else 4 * t
    return acts + head


def vllm_weight_bytes(s: Setup) -> int:
    """The engine's weights on one of its TP devices: ``w P / TP``."""
    return _w(s) * s.model.num_params // s.vllm_tensor_parallel_size


def vllm_budget_bytes(s: Setup) -> int:
    """What vLLM takes while generating: ``gpu_memory_utilization x device``."""
    return int(s.vllm_gpu_memory_utilization * s.device_bytes)


def cuda_context_bytes(processes: int) -> int:
    """The CUDA contexts of ``processes`` processes on one device (:data:`CUDA_CONTEXT_BYTES` each)."""
    return processes * CUDA_CONTEXT_BYTES


def colocated_processes(s: Setup, phase: Phase) -> int:
    """Processes whose CUDA contexts sit on one colocated device outside vLLM's budget in ``phase``: one rank of every
    DeepSpeed role, the engine's actor, and vLLM's worker except while it generates (its context is then inside
    the budget)."""
    return len(_roles(s)) + ENGINE_PROCESSES_OUTSIDE_BUDGET + (0 if phase == Phase.GENERATION else 1)


def vllm_engine_bytes(s: Setup) -> int:
    """A started engine's use of one device: its budget plus the contexts of its processes outside the budget."""
    return vllm_budget_bytes(s) + cuda_context_bytes(ENGINE_PROCESSES_OUTSIDE_BUDGET)


# ---------------------------------------------------------------------- phases
def _roles(s: Setup) -> dict[str, tuple[int, bool, bool]]:
    """role -> (dp size, trains, computes logits)."""
    roles = {"policy": (s.policy_dp, True, True)}
    if s.critic_dp:
        roles["critic"] = (s.critic_dp, True, False)
    if s.ref_dp:
        roles["ref"] = (s.ref_dp, False, True)
    if s.teacher_dp:
        roles["teacher"] = (s.teacher_dp, False, True)
    if s.reward_dp:
        roles["reward_model"] = (s.reward_dp, False, False)
    return roles


def colocated_phase_bytes(s: Setup) -> dict[Phase, dict[str, int]]:
    """Colocated step: per phase, component -> bytes on one shared device (components from :data:`RESIDENT`).

    Every role's parameter partition stays (``offload_states`` never moves ZeRO-3 parameters); training states of
    the trained roles only in TRAINING; activations of ONE role at a time (forwards and updates are serialised):
    the largest. vLLM's budget in GENERATION, its weights and CUDA-graph pool in SYNC. Every phase also holds the
    CUDA contexts outside vLLM's budget (:func:`colocated_processes`).
    """
    roles = _roles(s)
    params = sum(
        param_bytes(s, dp, offloaded=name in ("ref", "teacher", "reward_model") and s.ref_offload_params, role=name)
        for name, (dp, _, _) in roles.items()
    )
    parts = {
        "policy_params": params,
        "train_states": sum(
            train_state_bytes(s, dp, lora=name == "policy", role=name)
            for name, (dp, trains, _) in roles.items()
            if trains
        ),
        "activations": max(
            gather_bytes(s, name) + activation_bytes(s, trains=t, logits=lg, role=name)
            for name, (_, t, lg) in roles.items()
        ),
        "vllm_weights": vllm_weight_bytes(s),
        "vllm_kv_cache": vllm_budget_bytes(s) - vllm_weight_bytes(s),
        "sync_bucket": s.sync_bucket_mb * 2**20 + gather_bytes(s, "policy"),
    }
    out = {}
    for phase in dict.fromkeys(COLOCATED_PHASES):
        out[phase] = {name: parts[name] for name in sorted(RESIDENT[phase])}
        if "vllm_weights" in out[phase] and "vllm_kv_cache" not in out[phase]:  # woken for a sync: graphs come too
            out[phase]["vllm_cuda_graphs"] = s.vllm_cuda_graph_bytes
        out[phase]["cuda_contexts"] = cuda_context_bytes(colocated_processes(s, phase))
    return out


def split_device_bytes(s: Setup) -> dict[str, dict[str, int]]:
    """Split placement: per device group (role or vLLM), component -> bytes on one of its devices (one phase each:
    nothing is offloaded; vLLM keeps its budget)."""
    out: dict[str, dict[str, int]] = {}
    for name, (dp, trains, logits) in _roles(s).items():
        out[name] = {
            "params": param_bytes(s, dp, offloaded=not trains and s.ref_offload_params, role=name),
            "train_states": train_state_bytes(s, dp, lora=name == "policy", role=name) if trains else 0,
            "activations": gather_bytes(s, name) + activation_bytes(s, trains=trains, logits=logits, role=name),
            "cuda_contexts": cuda_context_bytes(1),  # the rank's process
        }
        if name == "policy":
            out[name]["sync_bucket"] = s.sync_bucket_mb * 2**20
    out["vllm"] = {"vllm_budget": vllm_budget_bytes(s)}
    return out


def step_table(s: Setup) -> dict[str, dict[str, int]]:
    """The table the docs print: colocated phases or split device groups -> components -> bytes."""
    if s.colocate_all:
        return {phase.value: parts for phase, parts in colocated_phase_bytes(s).items()}
    return split_device_bytes(s)


def peak_bytes(s: Setup) -> int:
    """The largest per-device total over the step's phases (colocated) or device groups (split)."""
    return max(sum(parts.values()) for parts in step_table(s).values())


def _headroom(row: str) -> int:
    """vLLM-only devices need none: vLLM's budget already counts its CUDA context and non-torch allocations."""
    return 0 if row == "vllm" else HEADROOM


def fits(s: Setup) -> bool:
    """True when every phase (device group) leaves :data:`HEADROOM` free, vLLM-only devices their budget's rest."""
    return all(sum(parts.values()) + _headroom(row) <= s.device_bytes for row, parts in step_table(s).items())


def max_colocated_utilization(s: Setup) -> float:
    """The largest ``vllm_gpu_memory_utilization`` that leaves, in GENERATION, room for the roles' parameter
    partitions, the CUDA contexts outside vLLM's budget and :data:`HEADROOM` (what must stay resident while vLLM
    wakes)."""
    generation = colocated_phase_bytes(s)[Phase.GENERATION]
    resident = generation["policy_params"] + generation["cuda_contexts"]
    return (s.device_bytes - HEADROOM - resident) / s.device_bytes


# ---------------------------------------------------------------------- report
def format_table(name: str, s: Setup) -> str:
    """Markdown table of :func:`step_table` in GB (10^9 bytes)."""
    table = step_table(s)
    comps = list(dict.fromkeys(c for parts in table.values() for c in parts))
    head = "phase" if s.colocate_all else "devices"
    mode = "colocate_all" if s.colocate_all else "split placement"
    lines = [
        f"### {name} ({mode}, {s.model.num_params / 1e9:.2f}B params)",
        "",
        f"| {head} | " + " | ".join(comps) + " | total |",
        "|---" * (len(comps) + 2) + "|",
    ]
    for row, parts in table.items():
        cells = [f"{parts[c] / GB:.1f}" if c in parts else "-" for c in comps]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | **{sum(parts.values()) / GB:.1f}** |")
    verdict = "fits" if fits(s) else "DOES NOT FIT"
    lines += [
        "",
        f"Peak {peak_bytes(s) / GB:.1f} GB on a {s.device_bytes // GB} GB device, {HEADROOM // GB} GB kept free "
        f"beside DeepSpeed (none on vLLM-only devices), CUDA contexts at {CUDA_CONTEXT_BYTES / GB:.1f} GB per process: "
        f"{verdict}.",
    ]
    if s.colocate_all:
        lines.append(f"Largest vllm_gpu_memory_utilization under colocation: {max_colocated_utilization(s):.2f}.")
    return "\n".join(lines)
