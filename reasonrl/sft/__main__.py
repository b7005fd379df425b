"""SFT from the command line: ``python -m reasonrl.sft pretrain=... train_data=... output_dir=... [field=value]``,
or ``python -m reasonrl.sft config=<file.json|file.yaml> [field=value]``; ``--help`` lists every field."""

from reasonrl.sft.trainer import run_sft_recipe
from reasonrl.sft.warm_start import register_offline_models

if __name__ == "__main__":
    register_offline_models()  # pretrain= any offline model, the warm starts too
    run_sft_recipe()
