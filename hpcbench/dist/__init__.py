"""Distributed execution: topology, launching worker ranks, and the worker side.

A notebook is the *driver*: it calls :func:`launch`, which starts worker processes
(with torchrun on one machine, as the tasks of one srun step on a SLURM allocation);
each worker calls a library entry point with its rank's :class:`Topology` and a
:class:`~hpcbench.core.results.RecordWriter`, and the driver then reads the records back.
"""

from hpcbench.dist.launcher import LaunchResult, launch
from hpcbench.dist.topology import GROUP_KINDS, Topology

__all__ = ["GROUP_KINDS", "LaunchResult", "Topology", "launch"]
