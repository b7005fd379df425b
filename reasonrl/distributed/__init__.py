"""The only package that knows Ray, DeepSpeed and vLLM.

* ``platform``: device / communication backend choice and the environment each runtime needs (one place).
* ``ray_cluster``: starting or joining a Ray cluster, placement groups.
* ``deepspeed_engine``: the DeepSpeed adapter (config builder, ZeRO-3 init via transformers, gathering weights).
* ``vllm_engine``: the vLLM adapter (the only module that imports ``vllm``).
* ``workers``: Ray actors that hold DeepSpeed engines.

Heavy libraries are imported lazily inside functions so that ``import reasonrl.distributed`` stays cheap.
"""
