"""The only package that knows Ray, DeepSpeed and vLLM.

* ``platform``: device / communication backend choice (from the actor's placement, ``REASONRL_DEVICE``) and the
  environment of a GPU or CPU placement (one place).
* ``ray_cluster``: starting or joining a Ray cluster.
* ``placement`` (+ ``feasibility``): placement groups, each actor's resources, bundle and environment.
* ``deepspeed_engine``: the DeepSpeed adapter (config builder, ZeRO-3 init via transformers, gathering weights).
* ``vllm_engine``: the vLLM adapter (the only module that imports ``vllm``).
* ``workers``: Ray actors that hold DeepSpeed engines.

Heavy libraries are imported lazily inside functions so that ``import reasonrl.distributed`` stays cheap.
"""
