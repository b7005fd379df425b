"""The PPO critic: a transformers backbone (no LM head) plus a scalar value head, and its save/load.

Value convention (matches ``reasonrl.algos.advantages.gae_advantages``): ``values[:, t] = V(s_t)`` where
``s_t = prompt + response[:t]`` is the state BEFORE response token t is emitted. V(s_t) is read from the hidden
state of the last token of s_t, i.e. the position that predicts response token t: the same position whose logits
give that token's log-prob (``reasonrl.models.logprobs``). So ``values[:, 0]`` is read at the last prompt token;
the terminal state after the last response token has no entry (GAE takes V = 0 there).

Value head: ``nn.Linear(hidden_size, 1, bias=False)`` as in ORZ/OpenRLHF (``bias=True`` is available), initialised
from N(0, std = 1 / (hidden_size + 1)) as ORZ/OpenRLHF do when the critic starts from a causal LM. Not zero-init:
with w = 0 the gradient reaching the backbone, dV/dh = w, is zero, so the backbone would not learn on the first
update; the small normal init keeps initial values near 0 (|V| ~ |h| / hidden_size) while letting gradients into
the backbone from the start. The init uses its own seeded generator, so every rank builds the same head without
touching the global RNG (DeepSpeed ZeRO-3 also broadcasts rank 0's copy when it partitions the head).

On disk a critic is a folder: the backbone via ``save_pretrained`` (config.json + model.safetensors, a base-model
checkpoint such as ``Qwen2Model``; not a causal LM) plus ``value_head.safetensors`` (``weight`` [1, hidden] and
optional ``bias`` [1]). ``load_critic`` reads such a folder, or a causal-LM checkpoint (the policy's path), in which
case the LM head is skipped and a fresh value head is initialised.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from reasonrl.models.batching import PackedBatch, PaddedBatch, scatter_to_padded

VALUE_HEAD_FILE = "value_head.safetensors"


def hidden_size(config) -> int:
    """Width of the backbone's last hidden state: the text model's for a vision-language model (its config nests
    ``text_config``), else ``hidden_size``."""
    return config.get_text_config().hidden_size


def init_value_head_(head: nn.Linear, seed: int = 0) -> nn.Linear:
    """In place: weight ~ N(0, (1 / (hidden_size + 1))^2) from a generator seeded with ``seed``; bias = 0."""
    generator = torch.Generator().manual_seed(seed)
    std = 1.0 / (head.in_features + 1)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * std)
        if head.bias is not None:
            head.bias.zero_()
    return head


class CriticModel(nn.Module):
    """``values = value_head(backbone(...).last_hidden_state)``: one scalar per position.

    ``backbone`` is a transformers base model (``AutoModel``: embeddings + decoder layers + final norm, no LM
    head; for a vision-language model its vision tower and connector too, fed the batch's pixel inputs). Under
    ZeRO-3 it may be partitioned; the value head is a plain layer that DeepSpeed partitions when the engine is built.
    """

    def __init__(self, backbone: nn.Module, value_head: nn.Linear | None = None, *, bias: bool = False, seed: int = 0):
        super().__init__()
        self.backbone = backbone
        if value_head is None:
            dtype = next(backbone.parameters()).dtype
            value_head = init_value_head_(nn.Linear(hidden_size(backbone.config), 1, bias=bias, dtype=dtype), seed)
        self.value_head = value_head

    @property
    def config(self):
        return self.backbone.config

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        self.backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    def forward(
        self,
        input_ids: torch.Tensor,  # [batch, seq]
        attention_mask: torch.Tensor | None = None,  # [batch, seq]; None for the packed layout
        position_ids: torch.Tensor | None = None,  # [batch, seq]
        **kwargs,
    ) -> torch.Tensor:
        """Values at every position, ``[batch, seq]`` float32: entry i is V(tokens[: i + 1])."""
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **kwargs
        )
        hidden = out.last_hidden_state  # [batch, seq, hidden]
        return self.value_head(hidden).squeeze(-1).float()  # [batch, seq]


def response_values(critic, batch: PaddedBatch | PackedBatch) -> torch.Tensor:
    """V(s_t) for every response token t (module docstring), ``[batch, T]`` float32, zeros where masked.

    ``critic`` is a ``CriticModel`` or a DeepSpeed engine wrapping one. Runs in the caller's grad mode.
    """
    if isinstance(batch, PaddedBatch):
        values = critic(**batch.model_inputs())  # [batch, P+T]; a VLM batch adds its pixel inputs
        grid = batch.response_slice(values)  # [batch, T]
        return torch.where(batch.action_mask, grid, torch.zeros_like(grid))
    if isinstance(batch, PackedBatch):
        values = critic(
            input_ids=batch.input_ids, attention_mask=None, position_ids=batch.position_ids, **batch.forward_kwargs()
        )  # [1, total]; cu_seqlens for flash-attention
        return scatter_to_padded(batch.response_slice(values), batch.action_mask)  # [batch, T]
    raise TypeError(f"batch must be a PaddedBatch or PackedBatch, got {type(batch).__name__}")


def load_critic(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    *,
    attn_implementation: str = "sdpa",
    bias: bool = False,
    seed: int = 0,
    **from_pretrained_kwargs,
) -> CriticModel:
    """Critic from a folder written by ``save_critic``, or from a causal-LM checkpoint (fresh value head).

    The backbone is loaded with ``transformers.AutoModel.from_pretrained`` only, so under DeepSpeed ZeRO-3 it is
    partitioned at load time when the caller has created (and keeps referenced) a
    ``transformers.integrations.deepspeed.HfDeepSpeedConfig`` for a stage-3 config before calling this. From a
    causal-LM checkpoint the LM head weights are simply not loaded.

    Args:
        path: local folder or hub id. ``value_head.safetensors`` is looked for in a local folder; when present
            the head is loaded from it (its keys decide the bias), else a new head is built (``bias``, ``seed``).
        dtype: parameter dtype of backbone and head.
        from_pretrained_kwargs: passed on to ``AutoModel.from_pretrained``.
    """
    from transformers import AutoModel

    backbone = AutoModel.from_pretrained(
        str(path), dtype=dtype, attn_implementation=attn_implementation, **from_pretrained_kwargs
    )
    head_file = Path(path) / VALUE_HEAD_FILE
    if not head_file.is_file():
        return CriticModel(backbone, bias=bias, seed=seed)
    from safetensors.torch import load_file

    state = load_file(str(head_file))
    head = nn.Linear(hidden_size(backbone.config), 1, bias="bias" in state, dtype=dtype)
    head.load_state_dict({k: v.to(dtype) for k, v in state.items()})
    return CriticModel(backbone, head)


def save_critic(critic, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``critic`` to ``path``: backbone ``save_pretrained`` + ``value_head.safetensors``. Returns ``path``.

    Args:
        critic: a ``CriticModel`` (or a DeepSpeed engine wrapping one: its ``.module`` is used).
        state_dict: the FULL critic state dict (keys ``backbone.*`` and ``value_head.*``) to write instead of
            ``critic.state_dict()``. Under ZeRO-3 the parameters are partitioned, so gather them first (e.g.
            ``reasonrl.distributed.deepspeed_engine.gather_full_state_dict``, collective) and call this on rank 0.
    """
    from safetensors.torch import save_file

    module = getattr(critic, "module", critic)
    state = module.state_dict() if state_dict is None else state_dict
    backbone_state = {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}
    head_state = {k.removeprefix("value_head."): v for k, v in state.items() if k.startswith("value_head.")}
    unknown = sorted(set(state) - {f"backbone.{k}" for k in backbone_state} - {f"value_head.{k}" for k in head_state})
    if unknown or "weight" not in head_state:
        raise ValueError(f"not a critic state dict: unknown keys {unknown[:5]}, value head keys {sorted(head_state)}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    module.backbone.save_pretrained(path, state_dict=backbone_state)
    head_tensors = {k: v.detach().cpu().contiguous() for k, v in head_state.items()}
    save_file(head_tensors, str(path / VALUE_HEAD_FILE), metadata={"format": "pt"})
    return path
