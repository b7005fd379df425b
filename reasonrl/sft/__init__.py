"""Supervised fine-tuning (SFT) on (prompt, response) pairs, on the same Ray + DeepSpeed workers as the RL roles.

    from reasonrl.sft import SFTConfig, train_sft

    result = train_sft(SFTConfig(pretrain="tiny-demo", train_data=["arith_add2_train"], max_steps=400))
    # result.output_dir is a Hugging Face folder: pretrain=<it> starts an RL run from it

Modules: ``config`` (SFTConfig, validation; light imports), ``data`` (rows -> token pairs, batch order),
``worker`` (SFTWorker, the DeepSpeed rank), ``trainer`` (train_sft, run_sft_recipe), ``warm_start`` (the cached
``arith-sft`` warm start and the others; ``warm_start.register_offline_models`` registers them, and the offline
models of ``reasonrl.models.named``, in ``reasonrl.config.offline_models``).
Command line: ``python -m reasonrl.sft field=value ...``; recipe: ``python -m playground.sft_arith``.
"""

from reasonrl.sft.config import SFTConfig
from reasonrl.sft.data import batch_order, encode_pairs, split_rows
from reasonrl.sft.trainer import SFTResult, run_sft_recipe, train_sft
from reasonrl.sft.warm_start import ArithWarmStartConfig, warm_start_path

__all__ = [
    "ArithWarmStartConfig",
    "SFTConfig",
    "SFTResult",
    "batch_order",
    "encode_pairs",
    "run_sft_recipe",
    "split_rows",
    "train_sft",
    "warm_start_path",
]
