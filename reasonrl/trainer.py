"""The asyncio PPO loop: it owns ordering and timing; the workers compute and ``reasonrl.algos`` holds the math.

One step::

    prompts  --> generate (all vLLM engines at once) --> rewards (verifier pool, in a thread)
             --> [dynamic sampling: drop zero-variance groups, refill]
             --> reference log-probs | critic values | policy log-probs   (concurrently)
             --> advantages (algos) --> critic update || policy update   (concurrently unless colocated)
             --> weight sync policy -> vLLM (verified) --> eval / checkpoint / log

Generation seeds derive from (seed, step, engine), data order from (seed, episode): a run is reproducible and a
resumed run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from loguru import logger

from reasonrl import algos
from reasonrl.data.sampler import PromptSampler
from reasonrl.experience import Experience, outcome_token_rewards, padded_from_rows
from reasonrl.types import Completion
from reasonrl.utils.rng import derive_seed


@dataclasses.dataclass
class Roles:
    """The running actors of one experiment (``None`` for a disabled role)."""

    policy: Any
    engines: list
    ref: Any = None
    critic: Any = None
    reward_model: Any = None


# A scorer turns completions (+ their data rows) into objects with .reward/.correct/.reason (RewardResult).
Scorer = Callable[[Sequence[Completion], Sequence[dict]], list]


class PPOTrainer:
    def __init__(
        self,
        cfg,
        roles: Roles,
        *,
        tokenizer,
        template,
        train_rows: Sequence[dict],
        eval_sets: dict[str, Sequence[dict]],
        scorer: Scorer,
        tracker,
        checkpoints,
    ):
        self.cfg, self.roles, self.tokenizer, self.template = cfg, roles, tokenizer, template
        self.eval_sets, self.scorer, self.tracker, self.checkpoints = eval_sets, scorer, tracker, checkpoints
        self.sampler = PromptSampler(train_rows, cfg.rollout_batch_size, cfg.seed, cfg.num_episodes)
        self.total_steps = min(self.sampler.total_steps, cfg.max_steps or self.sampler.total_steps)
        self.global_step = 0
        self.kl_ctl = algos.get_kl_controller(cfg.kl_controller, cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)
        self.entropy_ctl = (
            algos.AdaptiveEntropyController(
                target_entropy=cfg.entropy_target,
                init_coef=cfg.entropy_coef,
                delta=cfg.entropy_coef_delta,
                min_coef=cfg.entropy_coef_min,
                max_coef=cfg.entropy_coef_max,
            )
            if cfg.adaptive_entropy
            else None
        )
        self.probe_ids: list[int] | None = None

    # ================================================================== the loop
    async def fit(self) -> dict[str, float]:
        cfg = self.cfg
        await self.sync_for_generation()  # engines start from the policy's (possibly resumed) weights
        if cfg.eval_before_training and self.global_step == 0 and self.eval_sets:
            self.tracker.log_metrics(0, await self.evaluate())
        last: dict[str, float] = {}
        saved_at = evaluated_at = None
        while self.global_step < self.total_steps:
            step_start = time.perf_counter()
            metrics = await self.train_step()
            if metrics is None:  # data used up early (dynamic-sampling refills draw from the same sampler)
                logger.warning(f"training data exhausted after step {self.global_step} of {self.total_steps}")
                break
            self.global_step += 1
            final = self.global_step == self.total_steps
            if self.eval_sets and (final or (cfg.eval_interval and self.global_step % cfg.eval_interval == 0)):
                metrics |= await self.timed_phase(metrics, "eval", self.evaluate())
                evaluated_at = self.global_step
            metrics["time/step"] = time.perf_counter() - step_start
            # Log the step before its checkpoint commits: a resumed run drops rows after the checkpoint's step.
            if self.global_step % cfg.log_interval == 0 or final:
                self.tracker.log_metrics(self.global_step, metrics)
            if self._should_save():
                await self._timed_save()
                saved_at = self.global_step
            self.tracker.advance(self.global_step, {"reward": metrics.get("reward/mean", float("nan"))})
            last = metrics
        if self.global_step > 0 and self.global_step != evaluated_at and self.eval_sets:
            self.tracker.log_metrics(self.global_step, await self.evaluate())
        if (
            self.global_step > 0
            and self.global_step != saved_at
            and not self.checkpoints.path_for(self.global_step).exists()
        ):
            await self._timed_save()
        return last

    async def _timed_save(self) -> None:
        start = time.perf_counter()
        await self.save_checkpoint()
        self.tracker.log_metrics(self.global_step, {"time/checkpoint": time.perf_counter() - start})

    def _should_save(self) -> bool:
        interval = self.cfg.save_interval
        return (interval and self.global_step % interval == 0) or self.global_step == self.total_steps

    async def timed_phase(self, metrics: dict, name: str, awaitable):
        start = time.perf_counter()
        result = await awaitable
        metrics[f"time/{name}"] = time.perf_counter() - start
        return result

    async def train_step(self) -> dict[str, float] | None:
        m: dict[str, float] = {}
        rows = self.sampler.next_batch()
        if rows is None:
            return None
        completions, results, rows_per_sample, group_ids = await self.rollout(rows, m)
        if not completions:
            logger.warning(f"step {self.global_step}: every group had zero reward variance; skipping the update")
            return m
        await self.to_training_phase()
        exp = await self.timed_phase(m, "forward", self.make_experience(completions, results, m))
        start = time.perf_counter()
        m |= self.compute_advantages(exp, results, group_ids)
        m["time/advantages"] = time.perf_counter() - start
        m |= await self.timed_phase(m, "update", self.update(exp))
        m |= await self.timed_phase(m, "sync", self.sync_for_generation())
        self.dump_generations(completions, results, rows_per_sample, step=self.global_step + 1)
        return m

    # ================================================================== device sharing (colocate_all)
    def _trainable_groups(self) -> list:
        roles = self.roles
        return [g for g in (roles.policy, roles.critic, roles.ref, roles.reward_model) if g is not None]

    async def to_training_phase(self) -> None:
        """colocate_all: vLLM sleeps (frees GPU memory) and the DeepSpeed states come back onto the devices.
        On CPU both are logged no-ops (nothing to free)."""
        if not self.cfg.colocate_all:
            return
        await asyncio.gather(*[engine.sleep.remote() for engine in self.roles.engines])
        await asyncio.gather(*[_gather_refs(g.call_async("reload")) for g in self._trainable_groups()])

    async def to_generation_phase(self, keep_policy: bool = False) -> None:
        """colocate_all: DeepSpeed states leave the devices (the policy's too unless ``keep_policy``), vLLM wakes."""
        if not self.cfg.colocate_all:
            return
        groups = [g for g in self._trainable_groups() if not (keep_policy and g is self.roles.policy)]
        await asyncio.gather(*[_gather_refs(g.call_async("offload")) for g in groups])
        await asyncio.gather(*[engine.wake_up.remote() for engine in self.roles.engines])

    async def sync_for_generation(self) -> dict[str, float]:
        """Wake the engines, send them the policy's weights (verified), then move the policy's states off too.
        The policy stays on its devices during the sync: the gather and the probe forward need it there."""
        await self.to_generation_phase(keep_policy=True)
        metrics = await self.sync_weights()
        if self.cfg.colocate_all:
            await _gather_refs(self.roles.policy.call_async("offload"))
        return metrics

    # ================================================================== rollout
    def encode(self, rows: Sequence[dict]) -> list[list[int]]:
        """Prompt token ids (the template's text, tokenized without extra special tokens), cut to max_prompt_len."""
        ids = []
        for row in rows:
            tokens = self.tokenizer(self.template.render(row), add_special_tokens=False).input_ids
            ids.append(tokens[-self.cfg.max_prompt_len :])
        return ids

    async def generate(self, rows: Sequence[dict], *, n: int, temperature: float, seed: int) -> list[Completion]:
        """Sample ``n`` completions per row, prompts split evenly over the engines (all at once)."""
        from reasonrl.distributed.vllm_engine import SamplingConfig

        cfg, engines = self.cfg, self.roles.engines
        prompt_ids = self.encode(rows)
        bounds = [round(i * len(rows) / len(engines)) for i in range(len(engines) + 1)]
        refs = []
        for e, engine in enumerate(engines):
            sampling = SamplingConfig(
                n=n,
                temperature=temperature,
                top_p=cfg.top_p if temperature > 0 else 1.0,
                top_k=cfg.top_k if temperature > 0 else 0,
                max_tokens=cfg.generate_max_len,
                stop=list(cfg.stop) or None,
                include_stop_str_in_output=cfg.include_stop_str_in_output,
                seed=derive_seed(seed, e),
            )
            refs.append(engine.generate.remote(prompt_ids[bounds[e] : bounds[e + 1]], sampling))
        out: list[Completion] = []
        for e, part in enumerate(await asyncio.gather(*refs)):
            for c in part:
                c.prompt_index += bounds[e]
                out.append(c)
        return out

    async def score(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list:
        """Rewards in a worker thread (the verifier pool blocks), so the event loop stays free."""
        return await asyncio.to_thread(self.scorer, completions, rows)

    async def rollout(self, rows: Sequence[dict], m: dict):
        """Generate + score, with DAPO dynamic sampling (drop zero-variance groups, refill up to max tries).

        Returns (completions, reward results, the data row of each sample, prompt-group id of each sample).
        """
        cfg = self.cfg
        target = cfg.rollout_batch_size * cfg.n_samples_per_prompt
        kept_c, kept_r, kept_rows, kept_groups = [], [], [], []
        tries = total_groups = 0
        gen_s = score_s = 0.0
        gen_tokens = 0
        while True:
            start = time.perf_counter()
            seed = derive_seed(cfg.seed, "rollout", self.global_step, tries)
            completions = await self.generate(rows, n=cfg.n_samples_per_prompt, temperature=cfg.temperature, seed=seed)
            gen_s += time.perf_counter() - start
            gen_tokens += sum(len(c.token_ids) for c in completions)
            start = time.perf_counter()
            per_sample_rows = [rows[c.prompt_index] for c in completions]
            results = await self.score(completions, per_sample_rows)
            score_s += time.perf_counter() - start
            groups = [total_groups + c.prompt_index for c in completions]  # unique across refills
            keep = [True] * len(completions)
            if cfg.dynamic_sampling:
                rewards = torch.tensor([float(r.reward) for r in results])
                keep = algos.dynamic_sampling_keep_mask(rewards, torch.tensor(groups)).tolist()
            for item in zip(completions, results, per_sample_rows, groups, keep, strict=True):
                if item[-1]:
                    for bucket, value in zip((kept_c, kept_r, kept_rows, kept_groups), item, strict=False):
                        bucket.append(value)
            tries += 1
            total_groups += len(rows)
            if not cfg.dynamic_sampling or len(kept_c) >= target or tries >= cfg.max_sampling_tries:
                break
            rows = self.sampler.next_batch() or rows
        if cfg.dynamic_sampling:
            kept_c, kept_r, kept_rows, kept_groups = (x[:target] for x in (kept_c, kept_r, kept_rows, kept_groups))
            m["sampling/kept_groups_frac"] = len(set(kept_groups)) / max(total_groups, 1)
            m["sampling/tries"] = float(tries)
        m |= {"time/generate": gen_s, "time/reward": score_s, "perf/tokens_per_s_generate": gen_tokens / gen_s}
        m |= self.rollout_metrics(kept_c, kept_r)
        return kept_c, kept_r, kept_rows, kept_groups

    def rollout_metrics(self, completions: Sequence[Completion], results: Sequence) -> dict[str, float]:
        if not completions:
            return {}
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
        rewards = torch.tensor([r.reward for r in results], dtype=torch.float32)
        return {
            "reward/mean": rewards.mean().item(),
            "reward/accuracy": sum(bool(r.correct) for r in results) / len(results),
            "reward/truncated_frac": sum(c.finish_reason != "stop" for c in completions) / len(completions),
            "response/length_mean": lengths.mean().item(),
            "response/length_max": lengths.max().item(),
            "response/clip_frac": (lengths >= self.cfg.generate_max_len).float().mean().item(),
        }

    # ================================================================== experience
    async def make_experience(self, completions, results, m) -> Experience:
        """Reference / critic / policy forwards, all roles at once (each role's ranks get one shard)."""
        cfg, roles = self.cfg, self.roles
        samples = [(c.prompt_token_ids, c.token_ids) for c in completions]
        width = max(len(r) for _, r in samples)
        action_mask = padded_from_rows([[1.0] * len(r) for _, r in samples], width).bool()
        exp = Experience(samples=samples, action_mask=action_mask)
        calls = {"policy": (roles.policy, "compute_logprobs", (cfg.temperature,))}
        if roles.ref is not None:
            calls["ref"] = (roles.ref, "compute_logprobs", (cfg.temperature,))
        if roles.critic is not None:
            calls["critic"] = (roles.critic, "compute_values", ())
        if roles.reward_model is not None:
            calls["rm"] = (roles.reward_model, "score", ())
        jobs = {
            name: _gather_refs(
                group.call_sharded_async(method, [s.samples for s in exp.shard(group.world_size)], *args)
            )
            for name, (group, method, args) in calls.items()
        }
        done = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
        exp.old_logprobs = _stitch([lp for lp, _ in done["policy"]], width)
        if "ref" in done:
            exp.ref_logprobs = _stitch(done["ref"], width)
        if "critic" in done:
            exp.old_values = _stitch(done["critic"], width)
        if "rm" in done:
            rm_scores = torch.cat(done["rm"])
            for r, s in zip(results, rm_scores.tolist(), strict=True):
                r.reward = r.reward + s
            m["reward/model_score_mean"] = rm_scores.mean().item()
        return exp

    def compute_advantages(self, exp: Experience, results, group_ids: Sequence[int]) -> dict[str, float]:
        """Token rewards (outcome at the last token, optionally minus coef*KL), then the configured estimator."""
        cfg, m = self.cfg, {}
        rewards = torch.tensor([float(r.reward) for r in results])
        token_rewards = outcome_token_rewards(rewards, exp.action_mask)
        if exp.ref_logprobs is not None:
            kl = algos.kl_penalty(exp.old_logprobs, exp.ref_logprobs, cfg.kl_estimator) * exp.action_mask
            m["policy/kl"] = (kl.sum() / exp.action_mask.sum().clamp(min=1)).item()
            if cfg.kl_mode == "reward":
                token_rewards = token_rewards - self.kl_ctl.value * kl
            self.kl_ctl.update(m["policy/kl"], len(exp))
            m["kl/coef"] = self.kl_ctl.value
        adv, returns = algos.compute_advantages(
            cfg.advantage_estimator,
            whiten=cfg.whiten_advantages,
            token_rewards=token_rewards,
            action_mask=exp.action_mask,
            values=exp.old_values,
            group_ids=torch.tensor(list(group_ids)),
            gamma=cfg.gamma,
            lam=cfg.lam,
            eps=cfg.grpo_eps,
            norm_by_std=cfg.grpo_norm_by_std,
        )
        exp.advantages, exp.returns = adv, returns
        valid = adv[exp.action_mask]
        m |= {"adv/mean": valid.mean().item(), "adv/std": valid.std().item() if valid.numel() > 1 else 0.0}
        m |= {"adv/max": valid.max().item(), "adv/min": valid.min().item()}
        m["returns/mean"] = returns[exp.action_mask].mean().item()
        return m

    # ================================================================== updates
    async def update(self, exp: Experience) -> dict[str, float]:
        """Critic and policy updates; concurrent when they do not share devices."""
        critic = self.update_role("critic", exp) if self.roles.critic is not None else None
        policy = self.update_role("policy", exp)
        if critic is None:
            return await policy
        if self.cfg.colocate_all:  # critic and policy share the devices: one after the other
            return (await critic) | (await policy)
        c, p = await asyncio.gather(critic, policy)
        return c | p

    async def update_role(self, role: str, exp: Experience) -> dict[str, float]:
        cfg = self.cfg
        group = self.roles.policy if role == "policy" else self.roles.critic
        epochs = cfg.policy_update_steps if role == "policy" else cfg.critic_update_steps
        loss_cfg = cfg.policy_loss_config() if role == "policy" else cfg.value_loss_config()
        if role == "policy" and cfg.kl_mode == "loss":  # the controller's current value (fixed or adaptive)
            loss_cfg = dataclasses.replace(loss_cfg, kl_loss_coef=self.kl_ctl.value)
        if role == "policy" and self.entropy_ctl is not None:
            loss_cfg = dataclasses.replace(loss_cfg, entropy_coef=self.entropy_ctl.effective_coef)
        per_step: list[list[dict]] = []
        start, tokens = time.perf_counter(), 0
        batch_size = cfg.policy_mini_batch_size if role == "policy" else cfg.critic_mini_batch_size
        for _ in range(epochs):
            for lo in range(0, len(exp), batch_size):
                mini = exp.select(range(lo, min(lo + batch_size, len(exp))))
                g_tokens, g_seqs = mini.num_tokens_and_seqs()
                refs = group.call_sharded_async("update", mini.shard(group.world_size), loss_cfg, g_tokens, g_seqs)
                per_step.append(await _gather_refs(refs))
                tokens += g_tokens
        out = {f"{role}/{k}": v for k, v in _mean_metrics(per_step).items() if k not in ("tokens", "loss_share")}
        out[f"{role}/{'value_loss' if role == 'critic' else 'loss'}"] = sum(
            sum(rank["loss_share"] for rank in ranks) for ranks in per_step
        ) / len(per_step)
        out[f"perf/tokens_per_s_train_{role}"] = tokens / max(time.perf_counter() - start, 1e-9)
        if role == "policy" and self.entropy_ctl is not None and "policy/entropy" in out:
            self.entropy_ctl.update(out["policy/entropy"])
            out["entropy/coef"] = self.entropy_ctl.effective_coef
        return out

    async def sync_weights(self) -> dict[str, float]:
        """Policy -> every engine, verified on a fixed probe (raises WeightSyncError on a mismatch)."""
        cfg = self.cfg
        if self.probe_ids is None:  # a fixed real prompt: the trainer and every engine must score it identically
            self.probe_ids = self.encode([self.sampler.rows[0]])[0][:64]
        refs = self.roles.policy.call_async(
            "sync_weights",
            self.roles.engines,
            cfg.sync_bucket_mb * 1024**2,
            self.probe_ids,
            cfg.resolved_sync_verify_tolerance,
        )
        report = (await _gather_refs(refs))[0]
        return report.as_metrics()

    # ================================================================== evaluation
    async def evaluate(self) -> dict[str, float]:
        """avg@k and pass@k on every eval set (k = eval_n_samples at eval_temperature); dumps the generations."""
        from reasonrl.eval_metrics import summarize_eval

        cfg, out = self.cfg, {}
        for name, rows in self.eval_sets.items():
            rows = list(rows)[: cfg.eval_max_prompts] if cfg.eval_max_prompts else list(rows)
            seed = derive_seed(cfg.seed, "eval", name)
            completions = await self.generate(rows, n=cfg.eval_n_samples, temperature=cfg.eval_temperature, seed=seed)
            results = await self.score(completions, [rows[c.prompt_index] for c in completions])
            per_prompt: list[list[bool]] = [[] for _ in rows]
            for c, r in zip(completions, results, strict=True):
                per_prompt[c.prompt_index].append(bool(r.correct))
            summary = summarize_eval(per_prompt, cfg.eval_n_samples)
            out |= {f"eval/{name}/{k}": float(v) for k, v in summary.items()}
            rows_per_sample = [rows[c.prompt_index] for c in completions]
            self.tracker.dump_generations(
                self.global_step, _records(completions, results, rows_per_sample, limit=None, split=f"eval/{name}")
            )
            logger.info(f"eval {name} @ step {self.global_step}: {summary}")
        return out

    def dump_generations(self, completions, results, rows, step: int) -> None:
        if self.cfg.dump_generations:
            records = _records(completions, results, rows, limit=self.cfg.dump_generations, split="train")
            self.tracker.dump_generations(step, records)

    # ================================================================== checkpoints
    def trainer_state(self) -> dict[str, Any]:
        state = {"global_step": self.global_step, "sampler": self.sampler.state_dict()}
        state["kl_ctl"] = {"value": self.kl_ctl.value}
        if self.entropy_ctl is not None:
            state["entropy_ctl"] = {"coef": self.entropy_ctl.coef, "enabled": self.entropy_ctl.enabled}
        return state

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])
        self.sampler.load_state_dict(state["sampler"])
        self.kl_ctl.value = float(state["kl_ctl"]["value"])
        if self.entropy_ctl is not None and "entropy_ctl" in state:
            for key, value in state["entropy_ctl"].items():
                setattr(self.entropy_ctl, key, value)

    async def save_checkpoint(self) -> Path:
        from reasonrl.utils.checkpoint import save_trainer_state
        from reasonrl.utils.rng import save_rng_state

        staging = self.checkpoints.begin(self.global_step)
        try:
            await self.to_training_phase()  # DeepSpeed saves the states from the devices
            tag = "ds"
            await _gather_refs(self.roles.policy.call_async("save_checkpoint", str(staging / "policy"), tag))
            if self.roles.critic is not None:
                await _gather_refs(self.roles.critic.call_async("save_checkpoint", str(staging / "critic"), tag))
            await _gather_refs(self.roles.policy.call_async("export_hf", str(staging / "policy_hf")))
            self.tokenizer.save_pretrained(staging / "policy_hf")
            save_trainer_state(staging, self.trainer_state())
            save_rng_state(staging / "rng_state.json")
            self.cfg.save_json(staging / "config.json")
        except BaseException:
            self.checkpoints.abort(staging)
            raise
        finally:
            await self.to_generation_phase()
        path = self.checkpoints.commit(self.global_step, staging, {"exp_name": self.cfg.exp_name})  # also prunes
        logger.info(f"checkpoint saved: {path}")
        return path

    async def load_checkpoint(self, path: Path) -> None:
        from reasonrl.utils.checkpoint import load_trainer_state
        from reasonrl.utils.rng import load_rng_state

        await _gather_refs(self.roles.policy.call_async("load_checkpoint", str(path / "policy"), "ds"))
        if self.roles.critic is not None:
            await _gather_refs(self.roles.critic.call_async("load_checkpoint", str(path / "critic"), "ds"))
        self.load_trainer_state(load_trainer_state(path))
        load_rng_state(path / "rng_state.json")
        logger.info(f"resumed from {path} at step {self.global_step}")


# ====================================================================== helpers
async def _gather_refs(refs: Sequence) -> list:
    return list(await asyncio.gather(*refs))


def _stitch(parts: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Concatenate per-rank [b_i, T_i] tensors into [sum b_i, width] (zero right-padding)."""
    return torch.cat([torch.nn.functional.pad(p.float(), (0, width - p.shape[1])) for p in parts])


def _mean_metrics(per_step: Sequence[Sequence[dict]]) -> dict[str, float]:
    """Per key: mean over the optimizer steps that report it of the token-weighted mean over the ranks that do.

    A rank with an empty shard reports only grad_norm / lr / tokens; it must not bias the others' means.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for ranks in per_step:
        for key in {k for r in ranks for k in r}:
            having = [r for r in ranks if key in r]
            if key in ("grad_norm", "lr"):
                value = having[0][key]  # identical on every rank
            else:
                weights = [max(r.get("tokens", 1), 1) for r in having]
                value = sum(r[key] * w for r, w in zip(having, weights, strict=True)) / sum(weights)
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}


def _records(completions, results, rows, limit: int | None, split: str) -> list[dict]:
    out = []
    for c, r, row in list(zip(completions, results, rows, strict=True))[:limit]:
        out.append(
            {
                "split": split,
                "id": row.get("id"),
                "question": row.get("question"),
                "gold": row.get("answer"),
                "response": c.text,
                "finish_reason": c.finish_reason,
                "reward": float(r.reward),
                "correct": bool(r.correct),
                "reason": getattr(r, "reason", None),
                "extracted": getattr(r, "extracted", None),
                "response_tokens": len(c.token_ids),
            }
        )
    return out
