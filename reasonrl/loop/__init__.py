"""The training loop: :class:`reasonrl.loop.trainer.PPOTrainer` and its parts.

One step, in the files that run it: rollout on the vLLM engines (``rollout.py``, generating ahead ``rollout_ahead.py``),
completions scored as they arrive (``rollout_stream.py``, ``scoring.py``), forwards in chunks (``forward_stream.py``),
advantages and the no-signal check (``learning_signal.py``), mini-batches of the updates (``mini_batches.py``), the user
hooks checked before anything starts (``exp_hooks.py``) and the eval metrics (``eval_metrics.py``).

This ``__init__`` imports nothing, so that importing one part (the eval metrics, say) does not import the trainer.
"""
