"""``BasePPOExp``: the class users subclass to say what an experiment trains on; ``run()`` runs it.

Subclass it to change one piece; each hook has one job:

* :meth:`load_train_rows` / :meth:`load_eval_sets`: the data (default: ``cfg.train_data`` / ``cfg.eval_data``),
* :meth:`build_scorer`: the reward (default: ORZ math reward, or ``cfg.reward_fn``),
* :meth:`build_template`: the prompt template (default: ``cfg.prompt_template``).

How a run lives (validation, the resume checkpoint, Ray, placement, workers and engines, restarts after a dead
actor, Ctrl-C / SIGTERM, cleanup) is not this class's job: :meth:`BasePPOExp.run` hands the experiment to
:class:`reasonrl.run.lifecycle.ExperimentRunner`, which drives it::

    validate config, check the resume checkpoint's config.json (before Ray starts) -> every hook called and its
    result checked, the tokenizer loaded once the data hooks passed (``reasonrl.run.exp_hooks``, still before Ray)
    -> ray.init -> placement groups -> worker groups (policy, ref, critic, reward model) + vLLM engines
    (``reasonrl.run.launch``) -> PPOTrainer.fit() -> shutdown; a dead actor: shut down, restart, resume

A hook that returns None or the wrong type (a scorer that is not callable, no training rows, a template that
cannot render the first row) raises ``HookError`` naming the hook before anything starts. A script that calls
``run()`` must guard it with ``if __name__ == "__main__":`` (reward worker processes re-run the main module);
a worker that re-runs an unguarded script exits at the top of ``run()`` and the error says so.

Recipes (``playground/*.py``) call :func:`run_recipe`, which reads ``field=value`` overrides from the command line
and applies ``DEBUG_MODE=1`` (one device, small batches) at run time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from reasonrl.config import BasePPOExpConfig
from reasonrl.run.lifecycle import ExperimentRunner
from reasonrl.utils.interrupt import TrainingInterrupted


class BasePPOExp:
    """An experiment: its config (``cfg``) and the hooks that build its data, reward and prompt template. The hooks
    are called once per run, before Ray starts, and their results are checked (``reasonrl.run.exp_hooks``)."""

    def __init__(self, cfg: BasePPOExpConfig):
        self.cfg = cfg

    # ------------------------------------------------------------------ hooks
    def load_train_rows(self) -> list[dict]:
        """The training rows: a non-empty list of dict rows, at least ``rollout_batch_size`` of them (default: the
        rows of every ``cfg.train_data`` source)."""
        from reasonrl.data import load_rows

        rows: list[dict] = []
        for source in self.cfg.train_data:
            rows += load_rows(source, fields=self.cfg.data_fields, **self._image_options()).rows
        return rows

    def _image_options(self) -> dict:
        """How vision-language rows' images are read: sized into [min_pixels, max_pixels], at most
        max_images_per_prompt each."""
        c = self.cfg
        return dict(min_pixels=c.min_pixels, max_pixels=c.max_pixels, max_images=c.max_images_per_prompt)

    def load_eval_sets(self) -> dict[str, list[dict]]:
        """Rows of each ``cfg.eval_data`` source, keyed by a unique readable name (``eval_set_names``). An override
        returns a dict of name -> list of dict rows, ``{}`` for no evaluation, with no question that is also a training
        question unless ``allow_train_eval_overlap=true``."""
        from reasonrl.data import load_rows
        from reasonrl.data.eval_names import eval_set_names

        sources = self.cfg.eval_data
        names = eval_set_names(sources)
        options = dict(fields=self.cfg.data_fields, **self._image_options())
        return {name: load_rows(s, **options).rows for name, s in zip(names, sources, strict=True)}

    def build_scorer(self):
        """The reward: a callable ``scorer(completions, rows) -> list[RewardResult]``; an optional ``close()`` runs when
        the run ends, however it ends, and an optional ``wait_ready()`` before Ray starts (default: the ORZ math
        reward, or ``cfg.reward_fn``, routed per row by ``data_source``)."""
        from reasonrl.data.gym_source import gym_sources
        from reasonrl.rewards.routing import build_scorer

        return build_scorer(self.cfg, gym_sources(self.cfg))

    def build_template(self, tokenizer):
        """The prompt template: an object with ``render(row) -> str`` that renders the first training row and the
        first row of every eval set (default: ``cfg.prompt_template``; with ``env_fn=tools`` and the ``chat``
        template, the tools' schemas are in the prompt)."""
        from reasonrl.data import get_template

        cfg = self.cfg
        if cfg.prompt_template == "chat" and cfg.env_fn is not None and cfg.env_fn.strip() == "tools":
            from reasonrl.agents.tools import resolve_tools

            schemas = {name: tool.schema for name, tool in resolve_tools(list(cfg.tools)).items()}
            return get_template("chat", tokenizer=tokenizer, tool_schemas=schemas)  # the tools in the prompt
        return get_template(cfg.prompt_template, tokenizer=tokenizer)

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, float]:
        """Validate, build and check the hooks' results, start, train, clean up: the run's lifecycle, driven by
        :class:`reasonrl.run.lifecycle.ExperimentRunner` for this experiment. Returns the last step's metrics."""
        return ExperimentRunner(self).run()


def run_recipe(
    cfg_cls: type[BasePPOExpConfig], exp_cls: type[BasePPOExp] = BasePPOExp, argv: Sequence[str] | None = None
):
    """Entry point of a playground recipe: ``python -m playground.<recipe> [field=value ...]``.

    ``DEBUG_MODE=1`` in the environment shrinks the recipe to one device and small batches (read here, at run
    time, never at import).
    """
    from reasonrl.config import ConfigError
    from reasonrl.distributed.ray_cluster import AddressCheck
    from reasonrl.run.checks import validate_run

    try:
        cfg = cfg_cls.from_cli(argv)
        address_check = AddressCheck(cfg.ray_address)  # runs while the config is checked: a silent address costs 1 s
        validate_run(cfg)
        runner = ExperimentRunner(exp_cls(cfg), address_check=address_check)
        runner.resume_checkpoint()  # a checkpoint of another config is refused here (kept for run(), not re-resolved)
    except ConfigError as err:  # a readable message, no traceback: nothing has started yet
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    try:
        return runner.run()
    except ConfigError as err:  # hooks, Ray address, cluster resources: before any actor starts (Ray is shut down)
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    except TrainingInterrupted as err:  # Ctrl-C / SIGTERM: everything is shut down; exit as a shell would
        print(f"reasonrl: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:  # a second signal: stopped where it was, cleanups done
        print("reasonrl: stopped at once by a second signal; no checkpoint written on the way out", file=sys.stderr)
        raise SystemExit(130) from None
