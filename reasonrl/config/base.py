"""``BasePPOExpConfig``: the flat dataclass of one run with its grouped, documented fields. Its derived values come
from :class:`reasonrl.config.derived.DerivedValues`; its methods delegate the work to the modules of this package
(model_paths, mapping, validate, overrides, debug, serialise, render)."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from reasonrl.config import mapping
from reasonrl.config.convert import _type_hints
from reasonrl.config.debug import shrink_for_debug
from reasonrl.config.derived import DerivedValues
from reasonrl.config.errors import ConfigError
from reasonrl.config.fields import _alg, _annotation_text, _dat, _evl, _exp, _log, _mod, _opt, _res, _rol
from reasonrl.config.model_paths import model_source, pin_model_fields, resolve_model_path
from reasonrl.config.names import ORZ_STOP_STRINGS
from reasonrl.config.overrides import apply_overrides, config_from_cli, debug_mode_requested
from reasonrl.config.render import config_help, config_table, markdown_fields
from reasonrl.config.serialise import config_to_dict, load_config_json, save_config_json
from reasonrl.config.validate import DataChecks, validate_config


@dataclass
class BasePPOExpConfig(DerivedValues):
    """Everything one PPO/GRPO run needs, as a flat dataclass with grouped, documented fields.

    Subclass it (``@dataclass`` + annotated fields) to make a recipe; override fields on the command line with
    ``field=value`` (:meth:`from_cli`, :meth:`with_overrides`); call :meth:`validate` before starting Ray. The
    defaults are Open-Reasoner-Zero-like settings for one 8-GPU node; recipes change what they need.
    """

    # ---------------------------------------------------------------------------------------------- experiment
    exp_name: str = _exp("reasonrl", "name of the run: checkpoints go to ckpt_dir/exp_name, logs to log_dir/exp_name")
    seed: int = _exp(42, "seed of Python, NumPy, torch, data order and vLLM sampling (engine i uses seed + i)")
    ckpt_dir: str = _exp("ckpt", "root folder of checkpoints (ckpt_dir/exp_name/step_<n>/)")
    log_dir: str = _exp("logs", "root folder of logs, TensorBoard events and generation dumps (log_dir/exp_name/)")
    resume: str = _exp(
        "auto",
        "'auto': continue from the newest complete checkpoint of this run (damaged ones are moved aside; only "
        "damaged ones: refused), else start fresh; 'none': start fresh on purpose (the old run's checkpoints and "
        "logs are moved aside, not deleted); or the path of a checkpoint directory (step_<n>)",
    )
    resume_allow_changes: list[str] = _exp(
        doc="fields that may differ from the checkpoint's config.json on resume, e.g. generate_max_len,max_steps "
        "for a staged recipe (bookkeeping, eval and memory fields are always allowed: docs/logging_and_checkpoints.md)",
        factory=list,
    )
    max_restarts: int = _exp(
        2,
        "when an actor dies (killed, out of memory, node lost), restart every actor and resume from the newest "
        "checkpoint in the same process, at most this many times; 0 = the run fails instead",
    )
    device: str = _exp("auto", "'auto' (GPU when the Ray cluster has GPUs, else CPU), 'gpu' or 'cpu'")
    ray_address: str | None = _exp(
        None, "address of a running Ray cluster ('auto' or host:port); None starts a local Ray instance"
    )
    debug: bool = _exp(
        False, "set by DEBUG_MODE=1 / apply_debug_mode() (informational; setting it alone shrinks nothing)"
    )

    # ---------------------------------------------------------------------------------------------- resources
    policy_num_nodes: int = _res(1, "policy (actor) group: number of nodes")
    policy_devices_per_node: int = _res(8, "policy group: devices per node (data-parallel world = nodes x devices)")
    ref_num_nodes: int = _res(1, "reference model group: nodes (used only when kl_mode != 'none')")
    ref_devices_per_node: int = _res(8, "reference model group: devices per node")
    critic_num_nodes: int = _res(1, "critic group: nodes (used only by advantage_estimator='gae')")
    critic_devices_per_node: int = _res(8, "critic group: devices per node")
    reward_num_nodes: int = _res(0, "reward model group: nodes; 0 = no reward model (rule-based reward only)")
    reward_devices_per_node: int = _res(8, "reward model group: devices per node")
    vllm_num_engines: int = _res(8, "number of vLLM engines (rollout data parallelism)")
    vllm_tensor_parallel_size: int = _res(1, "devices per vLLM engine (tensor parallelism)")
    colocate_all: bool = _res(
        True,
        "policy, ref, critic, reward model and vLLM time-share the same devices (states offloaded between "
        "phases); needs equal role sizes and vllm_num_engines * vllm_tensor_parallel_size == policy world size",
    )
    colocate_policy_ref: bool = _res(False, "policy and reference share devices (when colocate_all is off)")
    colocate_critic_reward: bool = _res(False, "critic and reward model share devices (when colocate_all is off)")
    reference_process: str = _res(
        "auto",
        "where the frozen reference runs: 'own' (ranks of its own), 'policy' (a frozen copy in each policy rank's "
        "process: one process fewer per rank; CPU runs with the reference sized and placed as the policy), 'auto' "
        "(policy where it can, else own; reasonrl.config.reference_process)",
    )
    zero_stage: int | str = _res(
        "auto",
        "DeepSpeed ZeRO stage of the trained and frozen models: 0-3 for every role, or 'auto' per role: 0 where the "
        "role has one rank and needs no ZeRO feature (ref_offload_params, optimizer_offload, bf16 training, GPU "
        "colocation of a trained role), else 3 (reasonrl.config.zero_stages); with auto a resume keeps the stage its "
        "checkpoint was written with",
    )
    bf16: bool = _res(True, "train and run models in bfloat16 (False: float32, e.g. on CPU)")
    gradient_checkpointing: bool = _res(True, "activation checkpointing in the policy and critic")
    attn_implementation: str = _res(
        "auto",
        "'auto' (resolved on each worker: flash_attention_2 on a GPU in bf16 where flash_attn imports, else sdpa), "
        "'flash_attention_2', 'sdpa', 'eager'",
    )
    sequence_parallel_size: int = _res(
        1,
        "Ulysses sequence parallelism: ranks that share each sequence (policy, reference, critic); must divide the "
        "heads and each role's ranks; no LoRA, no vision-language model (docs/distributed.md)",
    )
    ref_offload_params: bool = _res(False, "ZeRO-3 parameter offload to CPU for the frozen models (ref, reward)")
    optimizer_offload: bool = _res(False, "ZeRO-Offload of optimizer states to CPU (policy, critic)")
    vllm_gpu_memory_utilization: float = _res(0.85, "fraction of device memory vLLM may use, in (0, 1]")
    vllm_enable_sleep: bool = _res(True, "let vLLM sleep (free weights and KV cache) while models train")
    vllm_max_model_len: int | None = _res(None, "vLLM context length; None = max_prompt_len + generate_max_len")
    vllm_max_num_seqs: int | None = _res(
        None, "requests one vLLM engine runs at once (vLLM's max_num_seqs); None = vLLM's default"
    )
    max_tokens_per_micro_batch: int = _res(
        16384, "token budget of one forward/backward micro-batch (must hold one full prompt + response)"
    )
    packing_samples: bool = _res(
        True,
        "padding-free micro-batches (sequences packed into one row) where that saves compute: flash-attention's "
        "varlen kernels (reasonrl.models.packing_pays), decided by each worker for the backend it resolved; padded "
        "otherwise (sdpa/eager would need a dense block mask and ran the update 1.6x slower packed on CPU)",
    )
    cpus_per_bundle: float = _res(1.0, "logical CPUs per placement bundle (one bundle per device)")

    # ---------------------------------------------------------------------------------------------- models
    pretrain: str | None = _mod(
        None,
        "REQUIRED. Policy (and reference) model: a local Hugging Face folder (with config.json; an existing path "
        "wins), a Hub id owner/name or owner/name@revision (from the HF cache; downloaded first unless "
        "HF_HUB_OFFLINE=1; pinned to its commit at the start, owner/name@<commit>, which each node loads from its "
        "own HF cache and a resume keeps), or an offline model: tiny / tiny-demo / smollm2 / arith-sft",
    )
    critic_pretrain: str | None = _mod(None, "critic initialisation (value head added); None = same as pretrain")
    reward_pretrain: str | None = _mod(
        None, "reward model folder (needs reward_num_nodes >= 1); None = rule-based reward only"
    )
    teacher_pretrain: str | None = _mod(
        None,
        "on-policy distillation (docs/algorithms.md): the frozen teacher model (same forms as pretrain; the same "
        "tokenizer as pretrain, checked before start-up); its log-probs of the student's sampled tokens give the "
        "per-token reward -distill_coef * (log pi_student - log pi_teacher). Placed exactly as the reference "
        "(ref_num_nodes x ref_devices_per_node, colocated as it is), next to it; None = no teacher",
    )
    lora_rank: int = _mod(
        0,
        "LoRA rank r of the policy's adapters (PEFT; docs/lora.md); 0 = train every weight. With adapters the "
        "reference is the policy with its adapter switched off (no reference worker, no second copy of the weights)",
    )
    lora_alpha: float = _mod(16.0, "LoRA alpha: the adapter's update is scaled by lora_alpha / lora_rank")
    lora_dropout: float = _mod(
        0.0, "dropout on the adapters' input: must be 0 in RL (it would skew the PPO ratio); SFT takes [0, 1)"
    )
    lora_sync: str = _mod(
        "merged",
        "how a LoRA policy reaches vLLM: merged (each bucket sends W + (alpha/r)*B@A under the base names; the "
        "engines serve a plain model) or adapter (the engines keep the base model and each sync sends the adapter "
        "only, through vLLM's LoRA support: ~1% of the bytes at rank 32 on 7B, generation somewhat slower)",
    )
    freeze_vision_tower: bool = _mod(
        False,
        "vision-language models: keep the vision tower (image encoder) frozen; only the connector and the language "
        "model train, and the weight sync sends only what trains (docs/vision.md)",
    )
    lora_target_modules: list[str] = _mod(
        doc="linear layers that get adapters: last parts of module names (q_proj,v_proj or self_attn.o_proj), "
        "checked against the model before start-up, or all-linear (every linear layer but the output head)",
        factory=lambda: ["all-linear"],
    )

    # ---------------------------------------------------------------------------------------------- data
    train_data: list[str] = _dat(
        doc="training sets: built-in names (gsm8k_train, gsm8k_test, math_train, math500_test), paths of "
        ".jsonl/.json/.parquet files or dataset folders, Hugging Face Hub dataset ids owner/name[:config] (offline: "
        "from the local HF cache), or reasoning-gym tasks gym:<task>[:size=N][:seed=S][:option=value]; a folder or "
        "Hub dataset holding several splits must name one as path@split, e.g. data/snap@train, "
        "openai/gsm8k:main@train",
        factory=lambda: ["math_train"],
    )
    eval_data: list[str] = _dat(
        doc="evaluation sets (same forms as train_data, e.g. data/snap@test), each logged under a unique name: "
        "built-in name or file stem, parent folders added on a clash (a_test, b_test), _split appended for @split; "
        "empty = no evaluation",
        factory=lambda: ["math500_test"],
    )
    prompt_template: str = _dat(
        "orz", "'orz' (R1-Zero <think>/<answer> prompt), 'chat' (tokenizer chat template), 'plain', or a jinja2 file"
    )
    data_fields: dict[str, str] | str | None = _dat(
        None,
        "field mapping of the data files: None (automatic), a preset (orz, orz_eval, gsm8k, math; code rows: apps, "
        'taco, deepcoder, verl_code) or a JSON object like {"question": "problem", "answer": "final_answer"} '
        '(code rows: {"tests": "input_output"})',
    )
    allow_train_eval_overlap: bool = _dat(
        False,
        "let training data share sources or questions with eval_data (refused by default: it inflates eval scores); "
        "only to measure accuracy on training questions on purpose",
    )
    max_prompt_len: int = _dat(1024, "prompts longer than this many tokens are truncated (left) or dropped")
    min_pixels: int | None = _dat(
        None,
        "vision-language rows: images smaller than this many pixels (width x height) are scaled up, aspect ratio "
        "kept, when the data is loaded (EasyR1: 262144); None = as stored",
    )
    max_pixels: int | None = _dat(
        None,
        "vision-language rows: images larger than this many pixels are scaled down when the data is loaded, so "
        "that their image tokens fit max_prompt_len (EasyR1: 4194304); None = as stored",
    )
    max_images_per_prompt: int = _dat(1, "vision-language rows: most images one prompt may hold (vLLM's limit)")
    reward_fn: str | None = _dat(
        None, "None = ORZ math reward; else a user function 'path/to/file.py:fn' or 'package.module:fn'"
    )
    extract_mode: str = _dat("auto", "answer extraction: auto, orz, answer_tag, boxed, gsm8k, answer_is")
    verify_timeout_s: float = _dat(5.0, "hard timeout of one answer verification (seconds)")
    verify_workers: int | None = _dat(None, "answer verification worker processes; None = number of CPUs")
    verify_batch_timeout_s: float | None = _dat(
        300.0,
        "deadline of one batch's answer verification (seconds); answers not verified by then score as timeouts "
        "(counted in reward/verify_batch_deadline_items); None = no deadline (each answer still has verify_timeout_s)",
    )
    code_reward: str = _dat(
        "all", "rows with data_source=code: 'all' (1 only when every test passes, as Skywork-OR1) or 'fraction'"
    )
    code_test_timeout_s: float = _dat(4.0, "wall-clock and CPU limit of one unit test of a model-written program")
    code_max_timeout_s: float = _dat(
        30.0, "cap of one program's limit (code_test_timeout_s x tests + 1 s) over all its tests (seconds)"
    )
    code_batch_timeout_s: float | None = _dat(
        300.0, "deadline of one batch of programs (seconds); programs not done by then score as timeouts"
    )
    code_memory_mb: int = _dat(512, "address-space limit of each process of a model-written program (MiB)")
    code_isolate: str = _dat(
        "auto",
        "sandbox isolation: 'auto' (Linux namespaces where the kernel allows them, else limits only), 'ns' "
        "(refuse to run without namespaces), 'none' (limits only; see docs/rewards_and_data.md)",
    )
    code_workers: int | None = _dat(None, "programs run at once by the sandbox; None = number of CPUs")
    reward_num_cpus: int = _dat(
        0,
        "0 = math verification and code sandboxes in process pools on the driver (verify_workers, code_workers); N > 0 "
        "= N single-CPU Ray actors anywhere in the cluster (CPU-only nodes too) score the math and code rows, same "
        "timeouts and verdicts (docs/model_rewards.md)",
    )
    reward_url: str | None = _dat(
        None,
        "a reward service's score endpoint, e.g. http://127.0.0.1:8123/v1/score (python -m reasonrl.reward_server or "
        "your own, protocol in docs/model_rewards.md): rows without data_source and rows with data_source=remote are "
        "scored there; None = no service",
    )
    reward_url_secret_env: str | None = _dat(
        "REASONRL_REWARD_SECRET",
        "environment variable holding the service's shared secret (sent as Authorization: Bearer; the secret itself "
        "is never a config field, configs are logged); none = a service without authentication",
    )
    reward_url_batch_size: int = _dat(64, "samples per request to reward_url (a batch is cut into such requests)")
    reward_url_concurrency: int = _dat(4, "requests to reward_url in flight at once")
    reward_url_timeout_s: float = _dat(
        60.0, "deadline of one request to reward_url, the whole exchange (seconds); past it the request is retried"
    )
    reward_url_retries: int = _dat(
        3,
        "retries of a request after a connection error, timeout, 5xx/429 or a response that breaks the protocol "
        "(a 4xx is not retried); then its samples score reward_url_failure_reward, counted in reward/remote_failed",
    )
    reward_url_backoff_s: float = _dat(
        0.5, "first back-off before a retry (seconds), doubled each retry, times a random jitter in [0.5, 1)"
    )
    reward_url_failure_reward: float | None = _dat(
        None, "reward of a sample whose request failed for good (counted in reward/remote_failed); None = wrong_reward"
    )
    judge_pretrain: str | None = _dat(
        None,
        "LLM-as-judge model (folder, offline name or Hub id), run on a frozen vLLM engine of its own on a CPU bundle "
        "(not yet placed on GPUs); its verdicts mix into the rewards by judge_weight (docs/model_rewards.md)",
    )
    judge_url: str | None = _dat(
        None,
        "a judge behind an OpenAI-compatible endpoint, the base URL (e.g. http://127.0.0.1:8000/v1; requests go to "
        "<url>/chat/completions with judge_model); exclusive with judge_pretrain",
    )
    judge_model: str | None = _dat(None, "judge_url: the model name sent in each request (required with judge_url)")
    judge_url_secret_env: str | None = _dat(
        None, "judge_url: environment variable holding the API key (sent as Authorization: Bearer); none = no key"
    )
    judge_url_concurrency: int = _dat(8, "judge_url: requests in flight at once (one request per judged sample)")
    judge_url_timeout_s: float = _dat(
        120.0, "judge_url: deadline of one request, the whole exchange (seconds); past it the request is retried"
    )
    judge_url_retries: int = _dat(
        3,
        "judge_url: retries after a connection error, timeout, 5xx/429 or an answer without text (a 4xx is not "
        "retried); then the sample scores judge_unparsed_reward, counted in reward/judge_failed",
    )
    judge_template: str | None = _dat(
        None,
        "judge prompt: None = the built-in yes/no template, or a jinja2 file (variables: question, response, "
        "reference, data_source, row), rendered sandboxed",
    )
    judge_parse: str = _dat(
        "yes_no",
        "how a verdict's text becomes a score in [0, 1]: yes_no, boxed, last_number:LO:HI (scaled to [0, 1]), or "
        "file.py:fn (text -> score or None)",
    )
    judge_max_tokens: int = _dat(256, "most tokens the judge writes per verdict")
    judge_temperature: float = _dat(0.0, "the judge's sampling temperature (0 = greedy)")
    judge_unparsed_reward: float | None = _dat(
        None,
        "judge reward of a verdict that does not parse or a judge_url request that failed (counted in "
        "reward/judge_unparsed); None = wrong_reward",
    )
    judge_weight: float = _dat(
        1.0,
        "w in r = (1 - w) * rule + w * judge, for rows whose data_source judge_weights does not list; 1 = the judge "
        "alone (the rule is not called), 0 = not judged",
    )
    judge_weights: dict[str, float] | None = _dat(
        None, 'per data_source judge weights, a JSON object like {"math": 0.5, "code": 0}; others use judge_weight'
    )

    # ---------------------------------------------------------------------------------------------- rollout
    rollout_batch_size: int = _rol(128, "prompts per training step")
    n_samples_per_prompt: int = _rol(
        16, "responses sampled per prompt (ORZ used 64); group estimators (grpo, rloo, ...) need >= 2"
    )
    temperature: float = _rol(1.0, "sampling temperature of training rollouts (> 0; logits are divided by it)")
    top_p: float = _rol(1.0, "nucleus sampling, in (0, 1]; 1 = off")
    top_k: int = _rol(0, "top-k sampling; 0 or -1 = off")
    generate_max_len: int = _rol(8000, "maximum response length in tokens (vLLM max_tokens)")
    stop: list[str] = _rol(
        doc="stop strings; the default is the ORZ template's (User:, Human:, Assistant:, </answer>); with the "
        "'chat' or 'plain' template set stop= (EOS only) or your own",
        factory=lambda: list(ORZ_STOP_STRINGS),
    )
    include_stop_str_in_output: bool = _rol(True, "keep the matched stop string (e.g. </answer>) in the response")
    async_staleness: int = _rol(
        0,
        "asynchronous RL: the engines generate the rollouts of up to k steps ahead while the trainers update (their "
        "data is at most k updates old; pair with rollout_correction=token_tis); 0 = the exact synchronous loop; "
        "1 = one step ahead (more is refused: an engine cannot receive weights while it generates, so it would add "
        "staleness, not overlap); needs split placement (colocate_all=false). With fully_async: any k >= 1, the "
        "largest number of updates between the weights of a sample's oldest token and the trained ones",
    )
    fully_async: bool = _rol(
        False,
        "fully asynchronous RL (docs/async.md): prompts flow to the engines continuously, finished prompt groups wait "
        "in a bounded buffer, the trainer takes a step's batch as soon as it is ready, and weights are loaded "
        "between engine steps while requests are in flight (partial_rollout); needs async_staleness >= 1 and split "
        "placement",
    )
    partial_rollout: str = _rol(
        "keep",
        "fully_async: what happens to requests in flight at a weight sync. 'keep': their tokens and KV cache stay, the "
        "next tokens come from the new weights; 'recompute': aborted and resubmitted as prompt + tokens so far, so "
        "the new weights re-read them",
    )
    stream_rollout: bool = _rol(
        True,
        "score each completion as it finishes and, under split placement with async_staleness=0, start the "
        "reference/critic/policy forwards on each full chunk of kept samples (forward_chunk_tokens) while the engines "
        "still generate; false: score each engine's part when it returns, forwards after the rollout. The numbers "
        "are the same either way",
    )
    env_fn: str | None = _rol(
        None,
        "multi-turn rollouts (docs/multi_turn.md): 'tools' (the built-in tool environment) or file.py:Name / "
        "package.module:Name, a class or factory of environments with reset(row) and step(model_turn); None = one "
        "completion per sample",
    )
    tools: list[str] = _rol(
        doc="tools of the built-in tool environment (env_fn=tools): calculator, python (the sandbox), or "
        "file.py:function / package.module:function (a plain function with a docstring and type hints)",
        factory=lambda: ["calculator"],
    )
    max_turns: int = _rol(4, "multi-turn: model turns per sample (the last one is its answer)")
    max_observation_tokens: int = _rol(
        256, "multi-turn: an environment's observation longer than this many tokens is cut in the middle"
    )
    env_step_timeout_s: float = _rol(
        30.0, "multi-turn: deadline of one environment step; a step past it ends its sample as an error (counted)"
    )
    check_retokenize: bool = _rol(
        False,
        "multi-turn: compare every sample with a one-piece re-render of its conversation by the chat template and "
        "warn at the first differing token (a check mode: the rollout never re-tokenises)",
    )
    agent_fn: str | None = _rol(
        None,
        "agent programs written with any framework (docs/agents.md): file.py:run / package.module:run, a function "
        "run(row, endpoint) -> AgentResult (async, or sync run in a thread) that talks to its sample's "
        "OpenAI-compatible endpoint; every model turn is the engine's tokens. Exclusive with env_fn; None = off",
    )
    agent_concurrency: int = _rol(64, "agent_fn: how many agent functions run at once on the driver (all engines)")
    agent_timeout_s: float = _rol(
        300.0,
        "agent_fn: deadline of one agent function call; past it its session is closed and the sample ends with "
        "what it has (trained as it stands, counted in agent/timeouts)",
    )
    agent_reward: str = _rol(
        "both",
        "agent_fn: a sample's reward: 'agent' (the AgentResult's reward; None counts 0), 'verifier' (the row's "
        "scorer on the final answer, its data_source) or 'both' (their sum)",
    )
    agent_gateway_host: str = _rol(
        "127.0.0.1",
        "agent_fn: the address the agent gateway listens on (port chosen free); keep it where only the run's agent "
        "functions can reach it (every session also has its own secret key)",
    )
    forward_chunk_tokens: int | None = _rol(
        None,
        "most tokens (prompt + response) in one chunk of a step's forward passes, cut in sample order whether "
        "streamed or not; None = the policy's world size x max_tokens_per_micro_batch (one micro-batch per rank)",
    )

    # ---------------------------------------------------------------------------------------------- algorithm
    advantage_estimator: str = _alg(
        "gae",
        "gae (PPO, trains a critic), grpo, dr_grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax",
    )
    gamma: float = _alg(1.0, "discount factor, in [0, 1]")
    lam: float = _alg(1.0, "GAE lambda, in [0, 1]")
    whiten_advantages: bool = _alg(True, "whiten advantages over the whole rollout batch (ORZ: on)")
    grpo_eps: float = _alg(1e-6, "epsilon added to the group std (grpo)")
    grpo_norm_by_std: bool = _alg(True, "grpo divides by the group std (False = Dr.GRPO-style centring)")
    policy_loss: str = _alg("ppo", "ppo, gspo, cispo or reinforce (on-policy only)")
    agg_mode: str = _alg(
        "seq-mean-token-mean",
        "loss aggregation: token-mean (ORZ's packed rows average close to this), seq-mean-token-sum, "
        "seq-mean-token-mean, seq-mean-token-sum-norm",
    )
    clip_eps_low: float = _alg(0.2, "lower ratio clip epsilon, in (0, 1] (1 = no lower bound, e.g. CISPO)")
    clip_eps_high: float = _alg(0.2, "upper ratio clip epsilon, > 0 (DAPO clip-higher: 0.28)")
    dual_clip_c: float | None = _alg(None, "dual-clip constant c > 1 for negative advantages (ppo only); None = off")
    value_clip: float | None = _alg(0.2, "critic value clip epsilon; None = unclipped value loss")
    kl_mode: str = _alg(
        "none", "'none' (no reference model), 'reward' (KL penalty folded into rewards) or 'loss' (KL loss term)"
    )
    kl_estimator: str = _alg("k3", "KL estimator: k1, k2, k3, abs (aliases kl, mse, low_var_kl; '+' = k2 gradient)")
    init_kl_coef: float = _alg(0.0, "KL coefficient (initial value for the adaptive controller); > 0 with a kl_mode")
    kl_controller: str = _alg("fixed", "'fixed' or 'adaptive' (Ziegler et al.; needs kl_target)")
    kl_target: float | None = _alg(None, "target KL of the adaptive controller")
    kl_horizon: int = _alg(10000, "horizon of the adaptive KL controller")
    distill_coef: float = _alg(
        1.0, "teacher_pretrain: scale of the per-token distillation reward -(log pi_student - log pi_teacher), > 0"
    )
    distill_outcome_reward: bool = _alg(
        True,
        "teacher_pretrain: keep the outcome reward (the rule / reward model) next to the distillation reward; "
        "false = distillation alone",
    )
    entropy_coef: float = _alg(0.0, "entropy bonus coefficient (initial value when adaptive_entropy)")
    adaptive_entropy: bool = _alg(False, "Skywork-OR1 adaptive entropy control towards entropy_target")
    entropy_target: float = _alg(0.2, "target entropy of the adaptive controller")
    entropy_coef_delta: float = _alg(1e-4, "adaptive entropy: coefficient step per update")
    entropy_coef_min: float = _alg(0.0, "adaptive entropy: lower bound of the coefficient")
    entropy_coef_max: float = _alg(5e-3, "adaptive entropy: upper bound of the coefficient")
    dynamic_sampling: bool = _alg(False, "DAPO: drop prompt groups whose rewards are all equal and sample more")
    max_sampling_tries: int = _alg(3, "dynamic sampling: generation rounds per step before training on what is left")
    overlong_buffer_len: int = _alg(0, "DAPO soft overlong punishment buffer in tokens; 0 = off")
    overlong_penalty_factor: float = _alg(1.0, "DAPO overlong penalty at and beyond generate_max_len")
    format_reward: float = _alg(0.0, "reward added for a well-formed <think>...</think><answer>\\boxed{}</answer>")
    correct_reward: float = _alg(1.0, "reward of a correct, properly finished response")
    wrong_reward: float = _alg(0.0, "reward of any other response")
    require_stop: bool = _alg(True, "only reward responses that ended on their own (ORZ: truncated = wrong)")
    loss_norm_constant: float | None = _alg(None, "constant C of seq-mean-token-sum-norm; None = generate_max_len")
    rollout_correction: str = _alg(
        "off",
        "rollout-policy correction of the policy loss by the ratio pi_old/pi_rollout of the trainer's and the engines' "
        "log-probs of each sampled token: off, monitor (log the mismatch only), token_tis / seq_tis (truncated IS, "
        "weight min(ratio, cap)), token_mis / seq_mis / geo_mis (drop tokens or sequences whose ratio is outside "
        "[lower, upper]); see docs/algorithms.md",
    )
    rollout_correction_cap: float = _alg(2.0, "rollout correction: cap C of the *_tis weights (> 0; verl and TRL: 2)")
    rollout_correction_lower: float | None = _alg(None, "rollout correction *_mis: lower ratio bound; None = 1/upper")
    rollout_correction_upper: float | None = _alg(None, "rollout correction *_mis: upper ratio bound; None = cap")

    # ---------------------------------------------------------------------------------------------- optimisation
    actor_lr: float = _opt(1e-6, "policy learning rate")
    critic_lr: float = _opt(5e-6, "critic learning rate")
    lr_warmup_steps: int = _opt(
        0,
        "linear LR warmup over each model's first N optimizer steps (policy and critic count their own steps, as "
        "in ORZ/OpenRLHF/verl; ORZ: 50)",
    )
    lr_schedule: str = _opt("constant", "after warmup: constant, linear or cosine decay to 0 at the last step")
    weight_decay: float = _opt(0.0, "AdamW weight decay")
    grad_clip: float = _opt(1.0, "gradient norm clipping; 0 = off")
    policy_epochs: int = _opt(1, "passes of the policy over each rollout batch (OpenRLHF max_epochs, verl ppo_epochs)")
    critic_epochs: int = _opt(1, "passes of the critic over each rollout batch")
    train_batch_size: int | None = _opt(
        None,
        "samples per policy optimizer step; must divide rollout_batch_size * n_samples_per_prompt; "
        "None = policy_update_steps decides, else the whole rollout (one step per pass, strictly on-policy)",
    )
    critic_train_batch_size: int | None = _opt(
        None, "samples per critic optimizer step; None = critic_update_steps decides, else train_batch_size"
    )
    policy_update_steps: int | None = _opt(
        None,
        "optimizer steps of the policy per pass over the rollout, ORZ's meaning: the rollout is cut into this "
        "many nearly equal mini-batches (alternative to train_batch_size; ORZ: 1)",
    )
    critic_update_steps: int | None = _opt(
        None,
        "optimizer steps of the critic per pass over the rollout, ORZ's meaning (ORZ's PPO recipes: 12 steps in "
        "ONE pass, not 12 epochs; alternative to critic_train_batch_size)",
    )
    shuffle_mini_batches: bool = _opt(
        True,
        "shuffle the rollout (seeded by seed, step, role and pass) before cutting each pass into mini-batches, as "
        "ORZ/OpenRLHF's replay-buffer loader does; no effect with one mini-batch per pass",
    )
    num_episodes: int = _opt(1, "passes over the training data")
    max_steps: int | None = _opt(None, "stop after this many training steps; None = when the data ends")

    # ---------------------------------------------------------------------------------------------- evaluation
    eval_interval: int = _evl(10, "evaluate every N training steps (and at the end); 0 = only before/after training")
    eval_n_samples: int = _evl(1, "samples per eval prompt (k of pass@k / avg@k)")
    eval_temperature: float = _evl(0.0, "eval sampling temperature; 0 = greedy (needs eval_n_samples = 1)")
    eval_max_prompts: int | None = _evl(None, "evaluate at most this many prompts per eval set; None = all")
    eval_before_training: bool = _evl(True, "evaluate the initial model at step 0")

    # ---------------------------------------------------------------------------------------------- logging
    save_interval: int = _log(50, "save a checkpoint every N steps; 0 = only at the end")
    keep_last_ckpts: int = _log(3, "keep the newest N checkpoints; 0 = keep all")
    save_on_interrupt: bool = _log(
        False, "Ctrl-C (SIGINT) saves a checkpoint of the last completed step before stopping (if none exists yet)"
    )
    save_on_sigterm: bool = _log(
        True, "SIGTERM (a scheduler's preemption notice) saves a checkpoint of the last completed step before stopping"
    )
    log_interval: int = _log(1, "write scalars every N steps")
    dump_generations: int = _log(8, "samples per step written to log_dir/exp_name/generations.jsonl; 0 = none")
    progress_bar: bool = _log(True, "show a progress bar (tqdm.auto: a widget in Jupyter, off when not a terminal)")
    tracker: str = _log(
        "tensorboard",
        "where scalars go besides metrics.jsonl: tensorboard, wandb (Weights & Biases: pip install 'reasonrl[wandb]'; "
        "WANDB_MODE=offline runs without network) or both",
    )
    wandb_project: str = _log("reasonrl", "W&B project of the run (tracker=wandb/both)")
    wandb_run_name: str | None = _log(None, "W&B run name; None = exp_name")
    sync_verify_tolerance: float | None = _log(
        None,
        "weight-sync check on a probe sequence: max |logprob difference| between policy and vLLM (float32), or "
        "between their changes across the sync (bf16: docs/distributed.md); None = auto: 1e-4 in float32, 0.1 in bf16",
    )
    sync_bucket_mb: int = _log(256, "weight sync sends the policy to vLLM in buckets of at most this many MiB")
    sync_transport: str = _log(
        "auto",
        "how the weights reach vLLM: broadcast (a process group from policy rank 0 to every engine worker: gloo on "
        "CPU, NCCL on GPU), ipc (colocate_all: each policy rank shares the bucket with the engine worker on its "
        "device, CUDA IPC on GPU, shared memory on CPU), object_store (Ray), or auto: broadcast, except ipc where "
        "the engines share GPUs with the policy (colocate_all on GPU: NCCL refuses two ranks on one device)",
    )
    sync_verify_with: str = _log(
        "auto",
        "what the engines' probe log-probs are checked against after each sync: sent_weights (a host model on the "
        "weights policy rank 0 just sent) or trainer_forward (the training model's own forward); auto: sent_weights "
        "on CPU (a ZeRO-3 forward over gloo gathers every layer again), trainer_forward on GPU",
    )

    # ------------------------------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple) and typing.get_origin(hints.get(f.name)) is list:
                setattr(self, f.name, list(value))
        ignored = self._ignored_class_attributes()
        if ignored:
            raise ConfigError(ignored, title=f"{type(self).__name__}: defaults that dataclasses ignore")

    def _ignored_class_attributes(self) -> list[str]:
        """Class attributes that look like new defaults but that dataclasses ignored (missing annotation or
        missing @dataclass decorator): the run would silently use the old default."""
        problems = []
        for f in fields(self):
            owner = next((k for k in type(self).__mro__ if f.name in vars(k)), None)
            if owner is None:
                continue
            attr = vars(owner)[f.name]
            if isinstance(attr, (property, dataclasses.Field, staticmethod, classmethod)) or callable(attr):
                continue
            if f.default is not MISSING:
                default = f.default
            elif f.default_factory is not MISSING:
                default = f.default_factory()
            else:
                continue
            if attr != default and getattr(self, f.name) == default:
                problems.append(
                    f"{owner.__name__}.{f.name} = {attr!r} is ignored and the run would use {default!r}: a dataclass "
                    f"field needs a type annotation and the class needs @dataclass; write "
                    f"`@dataclass class {owner.__name__}(...): {f.name}: {_annotation_text(f)} = {attr!r}`"
                )
        return problems

    # ------------------------------------------------------------------------------------------ model paths
    @staticmethod
    def resolve_model_path(value: str | None) -> str | None:
        """A model field's value as a local folder (:func:`reasonrl.config.model_paths.resolve_model_path`): an
        offline name (``tiny``, ``tiny-demo``, ``smollm2``, ``arith-sft``, ...) is built, converted or trained on first
        use by its registered builder; an existing local path wins over a Hub id; a Hub id ``owner/name`` or
        ``owner/name@revision`` becomes its snapshot folder in the HF cache, downloaded first when online."""
        return resolve_model_path(value)

    @staticmethod
    def model_source(value: str | None) -> str | None:
        """What the actors get for a model field (:func:`reasonrl.config.model_paths.model_source`): a Hub id
        pinned to the commit it resolves to here (each actor loads that commit from its own node's HF cache), or
        the local folder as an absolute path (which must then exist on every node that loads it)."""
        return model_source(value)

    def pin_models(self) -> dict[str, str]:
        """Pin the Hub-id model fields (``pretrain``, ``critic_pretrain``, ``reward_pretrain``) in place to the
        commits they resolve to now (``owner/name`` -> ``owner/name@<commit>``), so that the logs and checkpoints
        name the exact weights and a resume loads them again; returns ``{field: pinned id}`` of those changed.
        Resolves (downloads when online). :func:`reasonrl.config.model_paths.pin_model_fields`."""
        return pin_model_fields(self)

    # ------------------------------------------------------------------------------------------ mapping helpers
    def role_resources(self) -> dict[str, Any]:
        """``{"policy", "ref", "critic", "reward": RoleResources, "vllm": VLLMResources}`` for ``plan_groups`` /
        ``build_placement``; disabled roles have ``num_nodes=0`` (``.enabled`` is False): ref without KL,
        critic without ``gae``, reward without a reward model."""
        return mapping.role_resources(self)

    def placement_kwargs(self) -> dict[str, Any]:
        """Colocation flags and bundle CPUs, as keyword arguments of ``plan_groups`` / ``build_placement``."""
        return mapping.placement_kwargs(self)

    def placement_requests(self, device: str | None = None) -> list:
        """The placement groups this config asks for (``plan_groups``; pure, no Ray)."""
        return mapping.placement_requests(self, device)

    def policy_loss_config(self):
        """``PolicyLossConfig`` (``reasonrl.algos.loss_settings``), built once per run; the KL loss and entropy
        coefficients are not in it: they travel with each update (``PolicyStepCoefs``, from the controllers)."""
        return mapping.policy_loss_config(self)

    def value_loss_config(self):
        """``ValueLossConfig``: ``value_clip`` and the policy's aggregation mode."""
        return mapping.value_loss_config(self)

    def reward_config(self):
        """``reasonrl.rewards.RewardConfig`` of the ORZ rule plus the configured shaping terms."""
        return mapping.reward_config(self)

    def code_reward_config(self):
        """``reasonrl.rewards.code.CodeRewardConfig`` of the ``code_*`` fields (rows with ``data_source=code``)."""
        return mapping.code_reward_config(self)

    # ------------------------------------------------------------------------------------------ validation
    def validate(
        self,
        cluster_resources: Mapping[str, float] | None = None,
        nodes: Sequence[Any] | None = None,
        *,
        data_checks: DataChecks | None = None,
    ) -> None:
        """Raise :class:`ConfigError` listing every problem of this config, each with the fix; return None if OK.

        Call it before ``ray.init`` (no arguments): it then checks names, ranges, files, batch divisibility,
        lengths, colocation rules and, when ``device`` is ``gpu``/``auto`` and ``ray_address`` is None, that this
        machine has enough GPUs (``torch.cuda.device_count()``). Call it again after ``ray.init`` with
        ``ray.cluster_resources()`` and ``ray.nodes()`` to check the request against the cluster
        (``check_feasible``). Never imports Ray, DeepSpeed or vLLM. The data sources are checked by the run, above
        the config, in line with the rest: ``data_checks`` (:func:`reasonrl.run.checks.validate_run` passes
        :func:`reasonrl.data.source_checks.data_problems`).
        """
        validate_config(self, cluster_resources, nodes, data_checks=data_checks)

    # ------------------------------------------------------------------------------------------ overrides / CLI
    def with_overrides(self, overrides: Mapping[str, Any], *, strict: bool = True):
        """A copy with ``overrides`` applied (``dataclasses.replace``).

        Values are checked against the field annotations; strings are parsed (``bool``: true/false/1/0/yes/no,
        ``int``, ``float`` such as ``1e-6``, ``X | None``: none/null, ``list[str]``: comma-separated or a JSON list,
        ``dict``: a JSON object). Raises :class:`ConfigError` for unknown fields (with close matches, unless
        ``strict=False``, which ignores them) and for values of the wrong type, listing all of them.
        """
        return apply_overrides(self, overrides, strict=strict)

    @classmethod
    def from_cli(cls, argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None):
        """The recipe's defaults, then the values of a ``config=<file.json|file.yaml|checkpoint folder>`` in
        ``argv`` if any, shrunk by :meth:`apply_debug_mode` when ``DEBUG_MODE=1`` (read now from ``environ``,
        default ``os.environ``) or ``debug=true`` is given, then the ``field=value`` overrides of ``argv`` (default
        ``sys.argv[1:]``). ``-h`` / ``--help`` prints :meth:`help_text` and exits. The result is
        not validated yet: call :meth:`validate`."""
        return config_from_cli(cls, argv, environ=environ)

    def apply_env_debug(self, environ: Mapping[str, str] | None = None):
        """``apply_debug_mode()`` if ``DEBUG_MODE`` is set to 1/true in ``environ`` (default ``os.environ``, read
        now), else ``self``."""
        return self.apply_debug_mode() if debug_mode_requested(environ) else self

    def apply_debug_mode(self):
        """A copy shrunk for debugging: every role on 1 node x 1 device, one vLLM engine (tp 1), ``colocate_all``,
        4 prompts x at most 4 samples (at least 2 for group estimators / dynamic sampling), prompts of at most 512
        and responses of at most 256 tokens, at most 3 steps, 8 eval prompts, a checkpoint and an eval every 2
        steps, ``exp_name`` + ``-debug`` (``reasonrl.config.debug``). The number of optimizer steps per rollout is
        kept where the smaller batch allows it. Idempotent."""
        return shrink_for_debug(self)

    # ------------------------------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        """Field values as a JSON-ready dict (field order)."""
        return config_to_dict(self)

    def save_json(self, path: str | os.PathLike) -> Path:
        """Write the resolved config to ``path`` (a file, or a folder that gets ``config.json``) atomically."""
        return save_config_json(self, path)

    @classmethod
    def from_json(cls, path: str | os.PathLike, *, strict: bool = True):
        """Load a config written by :meth:`save_json` (keys starting with ``_`` are metadata). Unknown fields are
        an error unless ``strict=False``."""
        return load_config_json(cls, path, strict=strict)

    def table(self) -> str:
        """The resolved config as a ``group | field | value`` table; ``*`` marks values that differ from the
        defaults of ``BasePPOExpConfig`` (fields a subclass adds: from their own default)."""
        return config_table(self, BasePPOExpConfig)

    @classmethod
    def help_text(cls) -> str:
        """Every field with its type, default and help, by group (what ``--help`` prints)."""
        return config_help(cls)

    @classmethod
    def markdown_reference(cls) -> str:
        """Markdown tables of every field by group (the generated part of docs/config.md)."""
        return markdown_fields(cls)
