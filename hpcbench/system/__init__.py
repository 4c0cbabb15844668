"""Facts about the machine and the launch.

:mod:`inventory`: the environment probes; :mod:`facts`: the recorded facts rules read applicability from.
"""
