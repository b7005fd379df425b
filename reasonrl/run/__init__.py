"""The run layer: a run's life around the loop, between the entry points and :mod:`reasonrl.loop`.

``lifecycle.py`` (:class:`ExperimentRunner`: validation, resume, the user hooks' results checked, stop signals,
restarts after a dead actor, cleanup), ``launch.py`` (one attempt started: Ray, placement, workers, engines, tracker,
trainer), ``exp_hooks.py`` (the hooks' driver: each hook called once, before Ray, its result checked) and
``vision_check.py`` (a vision-language run's rows and prompt lengths, before start) and ``checks.py`` (the config's
checks together with those that need its data: ``validate_run``).

It may import the loop; the loop never imports it (``tests/test_layout.py``). This ``__init__`` imports nothing.
"""
