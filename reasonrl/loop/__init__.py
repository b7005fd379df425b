"""The training loop: :class:`reasonrl.loop.trainer.PPOTrainer` and the parts it composes.

One step, in the files that run it: generation and scoring on the vLLM engines (``generation.py``: ``Generator``), the
step's rollout with dynamic sampling (``rollout.py``: ``RolloutCollector``; generating ahead ``rollout_ahead.py``),
completions scored as they arrive (``rollout_stream.py``; the scorer routes rows by :mod:`reasonrl.rewards.routing`),
forwards in chunks (``forward_stream.py``: ``StepForwards``), advantages and the no-signal check
(``learning_signal.py``), the updates (``updates.py``: ``StepUpdates``; mini-batches ``mini_batches.py``) and the eval
sets (``evaluation.py``, ``eval_metrics.py``). A run's life around the step (start-up, restarts, the checks before
start) is :mod:`reasonrl.run`, which imports the loop.

This ``__init__`` imports nothing, so that importing one part (the eval metrics, say) does not import the trainer.
"""
