"""Known names: mirrors of the reasonrl registries (``reasonrl.algos`` imports torch), field groups and the
spellings of true/false. ``tests/test_config.py`` asserts the mirrors equal the registries."""

# ------------------------------------------------------------------------------------------------- known names
# Mirrors of the registries in reasonrl.algos (which imports torch); tests/test_config.py asserts they are equal.
ADVANTAGE_ESTIMATOR_NAMES = (
    "gae",
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
)
# Estimators that compare the samples of one prompt: they need n_samples_per_prompt >= 2.
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline")
POLICY_LOSS_NAMES = ("ppo", "gspo", "cispo", "reinforce")
# off, monitor (metrics only), then reasonrl.algos.ROLLOUT_CORRECTION_MODES without "none"
ROLLOUT_CORRECTIONS = ("off", "monitor", "token_tis", "seq_tis", "token_mis", "seq_mis", "geo_mis")
AGG_MODE_NAMES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
_KL_BASE = ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl")
KL_ESTIMATOR_NAMES = tuple(sorted(_KL_BASE)) + tuple(sorted(f"{n}+" for n in _KL_BASE))
KL_CONTROLLERS = ("fixed", "adaptive")
KL_MODES = ("none", "reward", "loss")
LR_SCHEDULES = ("constant", "linear", "cosine")  # reasonrl.distributed.optim_setup.SCHEDULES
PROMPT_TEMPLATES = ("orz", "r1_zero", "chat", "plain")  # or the path of a jinja2 file
DEVICES = ("auto", "cpu", "gpu")
RESUME_MODES = ("auto", "none")  # or the path of a checkpoint directory
ATTN_IMPLEMENTATIONS = ("auto", "flash_attention_2", "sdpa", "eager")
ZERO_STAGES = (0, 1, 2, 3)
AGENT_REWARD_MODES = ("agent", "verifier", "both")  # mirror of reasonrl.loop.agent_rollout.AGENT_REWARD_MODES
PARTIAL_ROLLOUT_MODES = ("keep", "recompute")  # mirror of reasonrl.distributed.flow_requests.PARTIAL_ROLLOUT_MODES
# Mirrors of reasonrl.distributed.weight_sync.TRANSPORTS / VERIFY_SOURCES, plus "auto".
SYNC_TRANSPORTS = ("auto", "broadcast", "ipc", "object_store")
SYNC_VERIFY_SOURCES = ("auto", "sent_weights", "trainer_forward")
# Where scalars go besides metrics.jsonl: reasonrl.utils.tracking.TRACKERS (its registry).
# The offline models (name -> context length) are declared in reasonrl.config.offline_models, their registry.
# reasonrl.data.ORZ_STOP: generation stops for the ORZ prompt template.
ORZ_STOP_STRINGS = ("User:", "Human:", "Assistant:", "</answer>")

GROUPS = (
    "experiment",
    "resources",
    "models",
    "data",
    "rollout",
    "algorithm",
    "optimisation",
    "evaluation",
    "logging",
)
_TRUE = ("1", "true", "yes", "on", "y", "t")
_FALSE = ("0", "false", "no", "off", "n", "f")
