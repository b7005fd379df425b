"""The scalars a run logs: their documented names and meanings (:data:`SCALARS`), the check that a name is
documented (:func:`known_scalar`) and the compact per-step log line (:data:`HEADLINE`, :func:`format_metrics_line`).

The writers that log them are :class:`reasonrl.utils.tracking.Tracker`; docs/logging_and_checkpoints.md lists the
same names.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple


class Scalar(NamedTuple):
    name: str  # "<dataset>" stands for an eval dataset name, "@k" for "@<number>"
    meaning: str


SCALARS: tuple[Scalar, ...] = (
    # rewards (per training step, over all sampled responses of the step)
    Scalar("reward/mean", "mean final reward per response (after shaping/penalties)"),
    Scalar("reward/accuracy", "fraction of responses whose extracted answer verified as correct"),
    Scalar("reward/truncated_frac", "fraction of responses that did not finish by themselves (finish reason != stop)"),
    # responses
    Scalar("response/length_mean", "mean response length in tokens"),
    Scalar("response/length_max", "longest response in tokens"),
    Scalar("response/clip_frac", "truncation rate: fraction of responses stopped by the generation length limit"),
    # policy update (means over all PPO mini-batches of the step)
    Scalar("policy/kl", "mean per-token KL(policy ‖ reference) over response tokens (configured estimator)"),
    Scalar(
        "distill/reverse_kl",
        "teacher_pretrain: token mean of log pi_old - log pi_teacher over the loss tokens, the single-sample reverse "
        "KL(student ‖ teacher) on the student's own samples (0 when the teacher is the student)",
    ),
    Scalar(
        "distill/reward_mean",
        "teacher_pretrain: mean over samples of the summed distillation reward -distill_coef * (log pi_old - log "
        "pi_teacher) of each sample's loss tokens",
    ),
    Scalar("policy/entropy", "mean per-token entropy of the policy over response tokens"),
    Scalar("policy/clipfrac", "fraction of response tokens whose probability ratio was clipped (either side)"),
    Scalar("policy/clipfrac_low", "fraction clipped at the lower bound (ratio < 1 - eps_low, negative advantage)"),
    Scalar("policy/clipfrac_high", "fraction clipped at the upper bound (ratio > 1 + eps_high, positive advantage)"),
    Scalar("policy/approx_kl", "approximate KL(old policy ‖ new policy) during the update; large = steps too big"),
    Scalar(
        "policy/old_logprobs_reused",
        "1 when the old-log-prob forward was skipped: one policy step per rollout, so the update's own log-probs "
        "(detached) are the old ones and the ratio is exactly 1",
    ),
    Scalar("policy/grad_norm", "policy gradient norm before clipping"),
    Scalar("policy/lr", "policy learning rate"),
    Scalar("policy/loss", "policy loss of the mini-batch (PPO/GSPO/CISPO/REINFORCE term + KL loss - entropy bonus)"),
    Scalar("policy/dual_clipfrac", "fraction of negative-advantage tokens cut by the dual clip"),
    Scalar("policy/ratio_mean", "mean probability ratio pi/pi_old over response tokens"),
    Scalar("policy/ratio_max", "largest probability ratio"),
    Scalar("policy/ratio_min", "smallest probability ratio"),
    Scalar("policy/seq_ratio_mean", "gspo: mean sequence-level ratio exp(mean_t log pi/pi_old) over sequences"),
    # rollout-policy correction (rollout_correction != off): per micro-batch, token-weighted means over the step
    Scalar(
        "policy/rollout_corr/ratio_mean",
        "rollout correction: mean token ratio pi_old/pi_rollout (trainer vs engine log-probs of the sampled "
        "tokens; 1 = they agree)",
    ),
    Scalar(
        "policy/rollout_corr/ratio_min",
        "rollout correction: smallest token ratio pi_old/pi_rollout (per micro-batch, mean over the step)",
    ),
    Scalar(
        "policy/rollout_corr/ratio_max",
        "rollout correction: largest token ratio pi_old/pi_rollout (per micro-batch, mean over the step)",
    ),
    Scalar(
        "policy/rollout_corr/seq_log_ratio_mean",
        "rollout correction: mean over sequences of sum_t log(pi_old/pi_rollout)",
    ),
    Scalar("policy/rollout_corr/seq_log_ratio_min", "rollout correction: smallest sequence log-ratio"),
    Scalar("policy/rollout_corr/seq_log_ratio_max", "rollout correction: largest sequence log-ratio"),
    Scalar(
        "policy/rollout_corr/logp_abs_diff_mean",
        "rollout correction: mean |log pi_old - log pi_rollout| over response tokens",
    ),
    Scalar(
        "policy/rollout_corr/logp_abs_diff_max",
        "rollout correction: largest |log pi_old - log pi_rollout| (per micro-batch, mean over the step)",
    ),
    Scalar(
        "policy/rollout_corr/kl_k1", "rollout correction: KL(rollout || trainer), k1 estimator (mean of -log ratio)"
    ),
    Scalar(
        "policy/rollout_corr/kl_k3",
        "rollout correction: KL(rollout || trainer), k3 estimator (mean of ratio - 1 - log ratio; >= 0)",
    ),
    Scalar(
        "policy/rollout_corr/chi2_token", "rollout correction: token-level chi-square divergence, mean(ratio^2) - 1"
    ),
    Scalar("policy/rollout_corr/weight_mean", "rollout correction: mean loss weight on response tokens"),
    Scalar(
        "policy/rollout_corr/weight_max",
        "rollout correction: largest loss weight (per micro-batch, mean over the step)",
    ),
    Scalar(
        "policy/rollout_corr/ess",
        "rollout correction: effective sample size of the weights, (sum w)^2 / (n sum w^2), in (0, 1]",
    ),
    Scalar(
        "policy/rollout_corr/masked_token_frac",
        "rollout correction (*_mis): fraction of response tokens dropped from the loss",
    ),
    Scalar(
        "policy/rollout_corr/masked_seq_frac",
        "rollout correction (*_mis): fraction of sequences with at least one token dropped",
    ),
    Scalar(
        "policy/rollout_corr/truncated_token_frac",
        "rollout correction (*_tis): fraction of tokens whose weight was capped at C",
    ),
    # critic (PPO with a value model only)
    Scalar("critic/value_loss", "value-function loss"),
    Scalar("critic/vf_clipfrac", "fraction of value predictions clipped by the value clip range"),
    Scalar("critic/grad_norm", "critic gradient norm before clipping"),
    Scalar("critic/lr", "critic learning rate"),
    Scalar("critic/vf_mean", "mean predicted value over response tokens"),
    Scalar("critic/vf_error", "mean squared error (V - R)^2 over response tokens"),
    # advantages and returns (over response tokens, as used in the loss)
    Scalar("adv/mean", "mean advantage"),
    Scalar("adv/std", "standard deviation of advantages"),
    Scalar("adv/max", "largest advantage"),
    Scalar("adv/min", "smallest advantage"),
    Scalar("adv/nonzero_frac", "fraction of response tokens with a non-zero advantage (0 = no learning signal)"),
    Scalar("returns/mean", "mean return (value target)"),
    # controllers
    Scalar("kl/coef", "current KL coefficient (fixed or from the adaptive controller)"),
    Scalar("entropy/coef", "current entropy-bonus coefficient"),
    # sampling
    Scalar(
        "sampling/kept_groups_frac", "fraction of prompt groups kept by the group filter (e.g. DAPO: not all equal)"
    ),
    Scalar("sampling/tries", "generation rounds needed to fill the batch"),
    Scalar("sampling/samples", "samples trained on this step after the group filter (target: rollout x n)"),
    # repetition of the trained responses (reasonrl.rewards.repetition; n = 10 words, looping = 3 repeats)
    Scalar("repetition/looping_frac", "fraction of responses in which some 10-word n-gram occurs 3+ times"),
    Scalar("repetition/max_ngram_count_mean", "mean over responses of the largest n-gram count"),
    Scalar("repetition/max_ngram_count_max", "largest n-gram count of any response"),
    Scalar("repetition/rep_ratio_mean", "mean rep-n ratio: 1 - distinct n-grams / n-grams"),
    # throughput
    Scalar("perf/tokens_per_s_generate", "generated tokens per second of time/generate (all engines together)"),
    Scalar("perf/tokens_per_s_train_policy", "response tokens per second of the policy update"),
    Scalar("perf/tokens_per_s_train_critic", "response tokens per second of the critic update"),
    # phase timings, seconds of wall time within the step
    Scalar("time/generate", "rollout generation with vLLM: wall time until the last engine returned"),
    Scalar(
        "time/wait_rollout",
        "async_staleness > 0: time the trainers waited for this step's rollout (generated ahead, during training)",
    ),
    Scalar(
        "async/staleness",
        "async_staleness > 0: updates between the weights that generated this step's data and the trained ones",
    ),
    # fully_async (reasonrl.loop.continuous_rollout): lags in weight versions (training steps)
    Scalar(
        "async/version_lag_mean", "fully_async: mean over the step's tokens of (trained version - sampling version)"
    ),
    Scalar("async/version_lag_max", "fully_async: largest (trained version - version of a sample's oldest token)"),
    Scalar("async/engine_idle_frac", "fully_async: share of the engines' wall time since the last step not generating"),
    Scalar("async/buffer_groups", "fully_async: scored prompt groups left in the buffer after this step took its own"),
    Scalar("async/groups_drawn", "fully_async: prompt groups drawn since the run (re)started (cumulative)"),
    Scalar("async/groups_trained", "fully_async: prompt groups trained since the run (re)started (cumulative)"),
    Scalar(
        "async/dropped_stale",
        "fully_async: groups dropped because their oldest token was more than async_staleness versions old",
    ),
    Scalar("async/dropped_filtered", "fully_async: groups dropped by dynamic sampling (no reward variance)"),
    Scalar("async/kept_requests", "fully_async: requests in flight at this step's sync that kept their KV cache"),
    Scalar("async/recomputed_requests", "fully_async: requests in flight at this step's sync, resubmitted (recompute)"),
    Scalar("time/reward", "reward computation not hidden behind generation (after the last engine returned)"),
    Scalar(
        "time/reward_overlapped",
        "reward computation that ran while engines were still generating (completions are scored as they arrive)",
    ),
    Scalar(
        "time/forward",
        "forward passes (reference logprobs, critic values, old policy logprobs) not hidden behind generation",
    ),
    Scalar(
        "time/forward_overlapped",
        "stream_rollout: seconds in which forward chunks ran before the rollout was complete (0 when not streamed)",
    ),
    Scalar("perf/forward_chunks", "chunks the step's forward passes were cut into (forward_chunk_tokens at most)"),
    Scalar("perf/forward_chunks_early", "stream_rollout: chunks started before the rollout was complete"),
    Scalar("time/advantages", "advantage and return computation"),
    Scalar("time/update", "policy and critic updates"),
    Scalar("time/sync", "weight sync policy -> vLLM, including verification"),
    Scalar("time/eval", "evaluation (on steps that evaluate)"),
    Scalar("time/checkpoint", "checkpoint save (on steps that save)"),
    Scalar("time/step", "the whole step"),
    # weight sync
    Scalar("sync/total_s", "seconds of the last weight sync (gather + transfer + load + check + verify)"),
    Scalar("sync/bytes", "bytes of parameters sent to the engines by the last sync"),
    Scalar("sync/buckets", "number of buckets (each a set of whole decoder layers) of the last sync"),
    Scalar("sync/gather_s", "seconds gathering ZeRO-3 shards into full tensors"),
    Scalar("sync/load_s", "seconds the engines spent loading the new weights"),
    Scalar(
        "sync/check_s",
        "seconds of the exact check (fingerprints of every tensor received and of the engine parameters)",
    ),
    Scalar("sync/params_checked", "engine parameters whose bytes the exact check compared with what was sent"),
    Scalar("sync/params_total", "engine parameters over all workers (those not checked are named once in the log)"),
    Scalar("sync/reload_warnings_dropped", "vLLM partial-reload warnings dropped (one per module outside each bucket)"),
    Scalar("sync/verify_s", "seconds of the probe check (policy vs engines)"),
    Scalar("sync/probe_max_abs_diff", "max |logprob difference| between policy and engines on the probe"),
    Scalar("sync/probe_tokens", "tokens the probe scored (a vision-language probe's picture expanded into its tokens)"),
    Scalar("sync/probe_images", "pictures the probe carried (1 for a vision-language policy: its tower is scored too)"),
    Scalar(
        "reward/model_score_mean",
        "mean score of the learned reward model over every sampled response (when reward_pretrain is set); "
        "it is part of reward/mean and of what dynamic sampling filters on",
    ),
    Scalar("reward/rule_mean", "mean rule (or reward_fn) reward alone, when a reward model adds its score"),
    # remote rewards (reward_url set; docs/model_rewards.md)
    Scalar(
        "reward/remote_failed",
        "reward_url: samples whose request failed after every retry (scored reward_url_failure_reward)",
    ),
    Scalar("reward/remote_retries", "reward_url: retries of the requests that scored the step's samples"),
    Scalar("reward/remote_seconds", "reward_url: the slowest request's seconds (retries and back-off included)"),
    Scalar("reward/greedy_baseline_mean", "remax: mean final reward of the greedy response per prompt"),
    # multi-turn rollouts (env_fn set; docs/multi_turn.md)
    Scalar("multi_turn/turns_mean", "model turns per sample"),
    Scalar("multi_turn/tool_calls", "tool calls in the step's samples (summed from the environments' info)"),
    Scalar("multi_turn/tool_calls/<tool>", "calls of one tool"),
    Scalar("multi_turn/tool_errors", "tool calls answered with an error (malformed, unknown tool, the tool failed)"),
    Scalar("multi_turn/tool_errors/<tool>", "errors of one tool ('invalid': a call that could not be parsed)"),
    Scalar(
        "multi_turn/observation_tokens_mean", "observation (tool message) tokens per sample, masked out of the loss"
    ),
    Scalar("multi_turn/observations_cut", "observations cut in the middle to max_observation_tokens"),
    Scalar("multi_turn/env_errors", "samples ended early by an environment that raised, hung or returned garbage"),
    Scalar("time/env", "seconds in environment steps (summed over the worker threads)"),
    Scalar("time/env_exposed", "seconds the engines waited on environments with nothing to generate"),
    # agent programs (agent_fn set; docs/agents.md); time/env is then the seconds inside agent functions
    Scalar("agent/sessions", "agent_fn: agent sessions the step's rollout ran (one per sample)"),
    Scalar("agent/requests_per_session", "agent_fn: model turns (gateway requests) per session"),
    Scalar(
        "agent/errors",
        "agent_fn: samples whose agent function raised or returned no AgentResult (trained as they stand)",
    ),
    Scalar("agent/timeouts", "agent_fn: samples whose agent function passed agent_timeout_s (trained as they stand)"),
    Scalar("agent/no_requests", "agent_fn: sessions without a model turn (kept in their group with nothing trained)"),
    Scalar(
        "agent/forks",
        "agent_fn: pieces closed because the agent rewrote history (not trained: a session trains its last piece)",
    ),
    Scalar("agent/fork_tokens_dropped", "agent_fn: response tokens of those untrained fork pieces"),
    Scalar(
        "agent/gateway_added_latency_ms",
        "agent_fn: the gateway's mean added latency per request since it started (not the engine's time)",
    ),
    # evaluation (on steps that evaluate), see reasonrl.loop.eval_metrics
    Scalar("eval/<dataset>/avg@k", "mean accuracy over k samples per prompt, averaged over the dataset's prompts"),
    Scalar("eval/<dataset>/pass@k", "unbiased pass@k: chance that one of k samples is correct, averaged over prompts"),
    Scalar("eval/<dataset>/maj@k", "majority answer of k samples is correct (math scorer), averaged over prompts"),
    Scalar("eval/<dataset>/num_prompts", "number of prompts evaluated"),
    # SFT runs (reasonrl.sft)
    Scalar("sft/loss", "token-mean NLL of the response tokens of the step's global batch"),
    Scalar("sft/lr", "learning rate the step used"),
    Scalar("sft/grad_norm", "global gradient 2-norm before clipping"),
    Scalar("eval/<dataset>/loss", "SFT: token-mean response NLL on the held-out pairs"),
)

# compact per-step loguru line: (metric, label)
HEADLINE: tuple[tuple[str, str], ...] = (
    ("reward/mean", "reward"),
    ("reward/accuracy", "acc"),
    ("response/length_mean", "len"),
    ("response/clip_frac", "trunc"),
    ("policy/kl", "kl"),
    ("policy/entropy", "ent"),
    ("sft/loss", "loss"),
    ("sft/lr", "lr"),
    ("time/step", "step_s"),
)


def _scalar_pattern(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(re.escape("<dataset>"), r"[^/]+").replace(re.escape("@k"), r"@\d+")
    pattern = pattern.replace(re.escape("<tool>"), r"[^/]+")
    return re.compile(f"^{pattern}$")


_SCALAR_PATTERNS = [_scalar_pattern(s.name) for s in SCALARS]


def known_scalar(name: str) -> bool:
    """Whether ``name`` is documented in :data:`SCALARS` (``eval/math500/pass@16`` matches the templates)."""
    return any(p.match(name) for p in _SCALAR_PATTERNS)


def format_value(value: Any) -> str:
    """A metric value as shown in a log line or next to the progress bar: floats with 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_metrics_line(step: int, metrics: dict[str, Any]) -> str:
    """``step 12 | reward 0.41 acc 0.38 len 512 ... | generate 8.1s reward 0.2s ... | eval/math500/pass@4 0.6``."""
    parts = [f"step {step}"]
    head = [f"{label} {format_value(metrics[key])}" for key, label in HEADLINE if key in metrics]
    if head:
        parts.append(" ".join(head))
    timings = [
        f"{key[5:]} {metrics[key]:.2f}s"
        for key in metrics
        if key.startswith("time/") and key != "time/step" and isinstance(metrics[key], (int, float))
    ]
    if timings:
        parts.append(" ".join(timings))
    evals = [f"{key} {format_value(metrics[key])}" for key in metrics if key.startswith("eval/")]
    if evals:
        parts.append(" ".join(evals))
    return " | ".join(parts)


RUN_TO_RUN_PREFIXES = (
    "time/",
    "perf/",
    "sync/gather_s",
    "sync/load_s",
    "sync/check_s",
    "sync/verify_s",
    "sync/total_s",
    "sync/probe",
)
"""Scalars that differ between two identical runs: timings, and the engine-vs-trainer probe difference (the float
noise of two implementations, not training state). A resumed run must match an uninterrupted one on the rest."""
