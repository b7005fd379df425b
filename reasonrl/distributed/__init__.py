"""The only package that knows Ray, DeepSpeed and vLLM.

* ``platform``: device / communication backend choice (from the actor's placement, ``REASONRL_DEVICE``) and the
  environment of a GPU or CPU placement (one place).
* ``ray_cluster``: starting or joining a Ray cluster.
* ``placement``: creates the placement groups planned by :mod:`reasonrl.planning.placement_layout` (pure, no Ray).
* ``deepspeed_engine``: the DeepSpeed adapter (ZeRO-3 init via transformers, engines, gathering weights);
  ``ds_config`` / ``optim_setup`` / ``param_gather``: the non-DeepSpeed parts of engine setup and gathering.
* ``vllm_engine``: the vLLM adapter (the only module that imports ``vllm``).
* ``workers``: Ray actors that hold DeepSpeed engines.

Heavy libraries are imported lazily inside functions so that ``import reasonrl.distributed`` stays cheap.
"""
