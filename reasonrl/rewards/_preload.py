"""Imported once by the fork server of ``TimeoutPool`` (``preload``): every forked worker starts warm."""

from reasonrl.rewards.verify import warmup

warmup()
