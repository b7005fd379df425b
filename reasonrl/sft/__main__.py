"""SFT from the command line: ``python -m reasonrl.sft pretrain=... train_data=... output_dir=... [field=value]``."""

from reasonrl.sft.trainer import run_sft_recipe

if __name__ == "__main__":
    run_sft_recipe()
