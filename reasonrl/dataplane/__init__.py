"""The data plane: the types a step's samples travel in between the loop and the workers.

:class:`~reasonrl.dataplane.completion.Completion` (one sampled response, what an engine returns),
:data:`~reasonrl.dataplane.experience.Sample`, :class:`~reasonrl.dataplane.experience.Experience` (a step's padded
tensors on the driver) and :class:`~reasonrl.dataplane.experience.RaggedShard` (one rank's samples on the wire), with
the tensor helpers both sides use. Below both :mod:`reasonrl.loop` and :mod:`reasonrl.distributed`: it imports
neither (torch and numpy only).
"""
